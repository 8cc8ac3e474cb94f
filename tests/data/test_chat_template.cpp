// Conversation data: the built-in chat templates against transformers' renderings
// (tests/data/fixtures/chat_templates.json, tools/reference/chat_template_fixture.py), --chat-template
// files, the loss mask, preprocess_data on conversations, and every bad conversation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "robustness/child_process.h"
#include "test_util.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/tokenizer_hf.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

using test::error_of;
using test::TempDir;

const std::string kFixture = std::string(MEGADLM_SOURCE_DIR) + "/tests/data/fixtures/chat_templates.json";
constexpr ChatTemplate kAll[] = {ChatTemplate::ChatML, ChatTemplate::Llama3, ChatTemplate::Qwen};

nlohmann::json load_fixture() {
  std::ifstream in(kFixture);
  EXPECT_TRUE(in.good()) << kFixture;
  return nlohmann::json::parse(in);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

// The byte spans of the response pieces, adjacent ones joined.
std::vector<std::pair<size_t, size_t>> response_spans(const std::vector<ChatPiece>& pieces) {
  std::vector<std::pair<size_t, size_t>> spans;
  size_t at = 0;
  for (const ChatPiece& p : pieces) {
    if (p.response) {
      if (!spans.empty() && spans.back().second == at)
        spans.back().second += p.text.size();
      else
        spans.emplace_back(at, at + p.text.size());
    }
    at += p.text.size();
  }
  return spans;
}

std::vector<ChatPiece> render_line(ChatTemplate t, const std::string& line) {
  return render_chat(t, conversation_of(nlohmann::json::parse(line)));
}

std::string user_assistant(const std::string& user, const std::string& assistant) {
  return nlohmann::json{{"messages", {{{"role", "user"}, {"content", user}}, {{"role", "assistant"}, {"content", assistant}}}}}
      .dump();
}

PreprocessOptions chat_options(const std::string& input, const std::string& prefix, const std::string& tmpl) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = prefix;
  o.tokenizer.type = "ByteTokenizer";
  o.chat_template = tmpl;
  o.log = false;
  return o;
}

// A byte-level BPE tokenizer.json whose added tokens include ChatML's markers.
std::string write_chatml_tokenizer(const TempDir& dir) {
  ByteLevelBpeTrainer trainer;
  for (int i = 0; i < 20; ++i) trainer.add_text("Hello there, how are you? I am fine, thank you. user assistant system");
  BpeTrainerOptions opt;
  opt.vocab_size = 300;
  opt.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  const std::string path = dir / "tokenizer.json";
  write_text(path, trainer.train(opt).dump());
  return path;
}

}  // namespace

// ---- rendering ------------------------------------------------------------------------------------

// Our text equals transformers' apply_chat_template(tokenize=False) for every conversation and
// template, and the response pieces cover exactly the {% generation %} spans.
TEST(ChatTemplate, RendersAsTransformersWithTheAssistantSpans) {
  const nlohmann::json fx = load_fixture();
  const auto& conversations = fx.at("conversations");
  ASSERT_EQ(conversations.size(), 20u);
  for (ChatTemplate t : kAll) {
    const auto& expected = fx.at("expected").at(chat_template_name(t));
    ASSERT_EQ(expected.size(), conversations.size());
    for (size_t i = 0; i < conversations.size(); ++i) {
      SCOPED_TRACE(std::string(chat_template_name(t)) + " conversation " + std::to_string(i));
      const std::vector<ChatPiece> pieces = render_chat(t, conversation_of(conversations[i]));
      EXPECT_EQ(chat_text(pieces), expected[i].at("text").get<std::string>());
      std::vector<std::pair<size_t, size_t>> want;
      for (const auto& s : expected[i].at("response")) want.emplace_back(s[0].get<size_t>(), s[1].get<size_t>());
      EXPECT_EQ(response_spans(pieces), want);
    }
  }
}

// The Jinja sources built in are those the fixture rendered with (so a tokenizer_config.json holding
// them resolves), and the generation prompt ends with the assistant header.
TEST(ChatTemplate, BuiltInSourcesAndGenerationPrompt) {
  const nlohmann::json fx = load_fixture();
  for (ChatTemplate t : kAll)
    EXPECT_EQ(chat_template_jinja(t), fx.at("templates").at(chat_template_name(t)).get<std::string>())
        << chat_template_name(t);
  const std::vector<ChatMessage> conv = {{"user", "Hi"}, {"assistant", "Yo"}};
  EXPECT_EQ(chat_text(render_chat(ChatTemplate::ChatML, conv, true)),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat_text(render_chat(ChatTemplate::Llama3, conv, true)),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\nYo<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

// ---- --chat-template files ------------------------------------------------------------------------

TEST(ChatTemplate, ResolvesNamesAndTokenizerConfigs) {
  TempDir dir;
  const nlohmann::json fx = load_fixture();
  for (ChatTemplate t : kAll) {
    EXPECT_EQ(resolve_chat_template(chat_template_name(t)), t);
    const std::string path = dir / (std::string(chat_template_name(t)) + "_tokenizer_config.json");
    write_text(path, nlohmann::json{{"eos_token", "<|im_end|>"}, {"chat_template", fx["templates"][chat_template_name(t)]}}.dump(2));
    EXPECT_EQ(resolve_chat_template(path), t) << path;
  }
  // Laid out differently: newlines between the tags, '\n' written as an escape instead of a newline
  // inside a string, double quotes instead of single ones.
  std::string llama3 = chat_template_jinja(ChatTemplate::Llama3);
  for (size_t at; (at = llama3.find("\n\n")) != std::string::npos;) llama3.replace(at, 2, "\\n\\n");
  for (size_t at = 0; (at = llama3.find("%}{%", at)) != std::string::npos; at += 4) llama3.replace(at, 4, "%}\n  {%");
  llama3.replace(llama3.find("'<|eot_id|>'"), 12, "\"<|eot_id|>\"");
  write_text(dir / "relaid.json", nlohmann::json{{"chat_template", llama3}}.dump());
  EXPECT_EQ(resolve_chat_template(dir / "relaid.json"), ChatTemplate::Llama3);
  // transformers' list form, and a chat_template.jinja.
  write_text(dir / "list.json", nlohmann::json{{"chat_template",
                                                {{{"name", "tool_use"}, {"template", "x"}},
                                                 {{"name", "default"}, {"template", chat_template_jinja(ChatTemplate::Qwen)}}}}}
                                    .dump());
  EXPECT_EQ(resolve_chat_template(dir / "list.json"), ChatTemplate::Qwen);
  write_text(dir / "chat_template.jinja", chat_template_jinja(ChatTemplate::ChatML));
  EXPECT_EQ(resolve_chat_template(dir / "chat_template.jinja"), ChatTemplate::ChatML);
}

TEST(ChatTemplate, UnknownTemplatesAndBadFilesNameTheFile) {
  TempDir dir;
  // A real template that is not built in (Zephyr's), and one that differs from ChatML only inside a string.
  const std::string zephyr =
      "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
      "eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token "
      "}}\n{% endif %}\n{% endfor %}";
  std::string chatml_space = chat_template_jinja(ChatTemplate::ChatML);
  chatml_space.replace(chatml_space.find("'\\n' + message['content']"), 4, "' '");
  for (const std::string& source : {zephyr, chatml_space}) {
    write_text(dir / "tokenizer_config.json", nlohmann::json{{"chat_template", source}}.dump());
    EXPECT_NE(error_of([&] { resolve_chat_template(dir / "tokenizer_config.json"); })
                  .find(dir / "tokenizer_config.json" + ": its chat_template is not one of the built-ins (chatml, llama3, qwen)"),
              std::string::npos);
  }
  write_text(dir / "none.json", "{\"eos_token\": \"</s>\"}");
  EXPECT_NE(error_of([&] { resolve_chat_template(dir / "none.json"); }).find(dir / "none.json" + ": has no \"chat_template\""),
            std::string::npos);
  write_text(dir / "bad.json", "{\"chat_template\": ");
  EXPECT_NE(error_of([&] { resolve_chat_template(dir / "bad.json"); }).find(dir / "bad.json" + ": invalid JSON"),
            std::string::npos);
  write_text(dir / "num.json", "{\"chat_template\": 3}");
  EXPECT_NE(error_of([&] { resolve_chat_template(dir / "num.json"); }).find("neither a string nor a list"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_chat_template("mistral"); })
                .find("--chat-template 'mistral' is neither a built-in template (chatml, llama3, qwen) nor an existing file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { resolve_chat_template(dir.str()); }).find("is a directory"), std::string::npos);
}

// ---- bad conversations ----------------------------------------------------------------------------

// LLaVA's "conversations" (from human / gpt / system, value) is the same conversation as "messages".
TEST(ChatTemplate, LlavaConversationsAreMessages) {
  const std::string llava =
      R"({"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "<image>\nWhat is it?"},)"
      R"( {"from": "gpt", "value": "A red square."}, {"from": "human", "value": "Where?"}, {"from": "gpt", "value": "Left."}]})";
  const std::string messages =
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "<image>\nWhat is it?"},)"
      R"( {"role": "assistant", "content": "A red square."}, {"role": "user", "content": "Where?"},)"
      R"( {"role": "assistant", "content": "Left."}]})";
  for (ChatTemplate t : kAll) {
    const std::vector<ChatPiece> a = render_line(t, llava), b = render_line(t, messages);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].text, b[i].text);
      EXPECT_EQ(a[i].response, b[i].response);
    }
    EXPECT_NE(chat_text(a).find("<image>\nWhat is it?"), std::string::npos);
  }
}

TEST(ChatTemplate, BadConversationsSayWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages": {"role": "user"}})", "'messages' is not a list (a object)"},
      {R"({"messages": []})", "the conversation is empty"},
      {R"({"messages": ["hi"]})", "message 1 is not an object (a string)"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}]})",
       "message 2 has the unknown role 'tool' (roles: system, user, assistant)"},
      {R"({"messages": [{"role": "user", "content": null}, {"role": "assistant", "content": "b"}]})",
       "message 1's 'content' is not a string (a null)"},
      {R"({"messages": [{"role": "user", "content": ["a"]}]})", "message 1's 'content' is not a string (a array)"},
      {R"({"messages": [{"content": "a"}]})", "message 1 has no 'role'"},
      {R"({"messages": [{"role": "user", "content": "a"}]})", "the conversation has no assistant message"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}, {"role": "assistant", "content": "b"}]})",
       "message 2 is a system message after the first message"},
      {R"({"messages": [{"role": "assistant", "content": "a", "tool_calls": [{"name": "f"}]}]})",
       "message 1 has tool_calls"},
      {R"({"prompt": "a"})", "the line has no 'response'"},
      {R"({"prompt": "a", "response": 5})", "the line's 'response' is not a string (a number)"},
      {R"({"prompt": "a", "response": "b", "messages": []})", "has more than one of 'messages', 'conversations'"},
      {R"({"conversations": {"from": "human"}})", "'conversations' is not a list (a object)"},
      {R"({"conversations": [{"from": "bot", "value": "a"}]})", "turn 1 of 'conversations' is from the unknown 'bot'"},
      {R"({"conversations": [{"from": "human", "value": "a"}, {"from": "gpt"}]})", "turn 2 of 'conversations' has no 'value'"},
      {R"({"text": "a"})", "has neither 'messages', 'conversations' nor 'prompt' and 'response'"},
  };
  for (const auto& [line, want] : cases)
    for (ChatTemplate t : kAll) {
      SCOPED_TRACE(line);
      EXPECT_NE(error_of([&] { render_line(t, line); }).find(want), std::string::npos)
          << error_of([&] { render_line(t, line); });
    }
  // Through the line parser: a bad conversation is a status, not an exception.
  const ParsedConversation p = parse_conversation_line(R"({"messages": []})", ChatTemplate::ChatML);
  EXPECT_EQ(p.status, LineStatus::BadConversation);
  EXPECT_EQ(parse_conversation_line("[1]", ChatTemplate::ChatML).status, LineStatus::NotObject);
  EXPECT_EQ(parse_conversation_line("  ", ChatTemplate::ChatML).status, LineStatus::Blank);
}

// ---- tokens and the loss mask ---------------------------------------------------------------------

// Markers the tokenizer has become single ids; the mask is 1 exactly on each assistant content and
// its end-of-turn marker.
TEST(ChatEncoder, MarkersAreSingleIdsAndTheMaskCoversTheResponses) {
  TokenizerSpec spec;
  spec.type = "ByteTokenizer";
  spec.added_special_tokens = {"<|im_start|>", "<|im_end|>"};
  const auto tok = make_tokenizer(spec);
  const int32_t start = tok->token_to_id("<|im_start|>"), end = tok->token_to_id("<|im_end|>");
  const ChatEncoder enc(ChatTemplate::ChatML, *tok);
  EXPECT_TRUE(enc.markers_as_text().empty());
  std::vector<int32_t> ids, mask;
  enc.encode(render_line(ChatTemplate::ChatML, user_assistant("Q", "AB")), ids, mask);
  std::vector<int32_t> want_ids = {start};
  for (char c : std::string("user\nQ")) want_ids.push_back(c);
  want_ids.insert(want_ids.end(), {end, '\n', start});
  for (char c : std::string("assistant\nAB")) want_ids.push_back(c);
  want_ids.insert(want_ids.end(), {end, '\n'});
  EXPECT_EQ(ids, want_ids);
  std::vector<int32_t> want_mask(ids.size(), 0);
  want_mask[ids.size() - 4] = want_mask[ids.size() - 3] = want_mask[ids.size() - 2] = 1;  // "AB" <|im_end|>
  EXPECT_EQ(mask, want_mask);
}

TEST(ChatEncoder, MissingMarkersAreTokenizedAsText) {
  TokenizerSpec spec;
  spec.type = "ByteTokenizer";
  const auto tok = make_tokenizer(spec);
  const ChatEncoder enc(ChatTemplate::Llama3, *tok);
  EXPECT_EQ(enc.markers_as_text(),
            (std::vector<std::string>{"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}));
  const std::vector<ChatPiece> pieces = render_line(ChatTemplate::Llama3, user_assistant("Q", " A "));
  std::vector<int32_t> ids, mask;
  enc.encode(pieces, ids, mask);
  const std::string text = chat_text(pieces);
  ASSERT_EQ(ids.size(), text.size());
  std::string response;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(ids[i], static_cast<unsigned char>(text[i]));
    if (mask[i]) response += text[i];
  }
  EXPECT_EQ(response, "A<|eot_id|>");
}

// A HuggingFace tokenizer with the markers as added tokens: single ids, and a mask boundary is a token
// boundary (each segment is tokenized on its own).
TEST(ChatEncoder, HuggingFaceAddedTokensAndSegmentBoundaries) {
  TempDir dir;
  TokenizerSpec spec;
  spec.type = "HuggingFaceTokenizer";
  spec.tokenizer_model = write_chatml_tokenizer(dir);
  const auto tok = make_tokenizer(spec);
  const ChatEncoder enc(ChatTemplate::Qwen, *tok);
  EXPECT_TRUE(enc.markers_as_text().empty());
  const std::vector<ChatPiece> pieces = render_line(ChatTemplate::Qwen, user_assistant("Hello there", "I am fine"));
  std::vector<int32_t> ids, mask;
  enc.encode(pieces, ids, mask);
  EXPECT_EQ(tok->decode(ids), chat_text(pieces));
  std::vector<int32_t> response;
  for (size_t i = 0; i < ids.size(); ++i)
    if (mask[i]) response.push_back(ids[i]);
  std::vector<int32_t> want = tok->encode("I am fine");
  want.push_back(tok->token_to_id("<|im_end|>"));
  EXPECT_EQ(response, want);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok->token_to_id("<|im_start|>")), 3);  // Qwen's system, user, assistant
}

// ---- preprocess_jsonl on conversations ------------------------------------------------------------

// Tokens and loss mask: aligned datasets (same sequence and document lengths), uint8 mask, the mask
// right token by token (eod included as response), the sidecar records the template; any number of
// workers writes the same bytes.
TEST(ChatPreprocess, WritesTokensAndAlignedLossMask) {
  TempDir dir;
  const nlohmann::json fx = load_fixture();
  std::string input;
  for (const auto& c : fx["conversations"]) input += c.dump() + "\n";
  write_text(dir / "conv.jsonl", input);
  for (ChatTemplate t : kAll) {
    SCOPED_TRACE(chat_template_name(t));
    PreprocessOptions o = chat_options(dir / "conv.jsonl", dir / chat_template_name(t), chat_template_name(t));
    o.append_eod = true;
    const PreprocessResult r = preprocess_jsonl(o);
    ASSERT_EQ(r.output_prefixes, std::vector<std::string>{dir / (std::string(chat_template_name(t)) + "_conversation_document")});
    const std::string prefix = r.output_prefixes[0];
    EXPECT_EQ(r.documents, 20);
    EXPECT_EQ(r.bad_lines, 0);
    EXPECT_FALSE(r.markers_as_text.empty());  // ByteTokenizer: the markers are text
    IndexedDataset tokens(prefix), mask(loss_mask_prefix(prefix), /*vocab_size=*/2);  // read() refuses a value > 1
    EXPECT_EQ(mask.dtype(), IndexDType::U8);
    ASSERT_EQ(tokens.num_sequences(), 20);
    ASSERT_EQ(mask.num_sequences(), 20);
    ASSERT_EQ(mask.num_documents(), tokens.num_documents());
    for (int64_t j = 0; j <= tokens.num_documents(); ++j) EXPECT_EQ(mask.document_index(j), tokens.document_index(j));
    int64_t response_tokens = 0;
    for (int64_t i = 0; i < 20; ++i) {
      const auto& want = fx["expected"][chat_template_name(t)][i];
      const std::string text = want["text"].get<std::string>();
      std::vector<int32_t> ids = tokens.get(i), m = mask.get(i);
      ASSERT_EQ(m.size(), ids.size());
      ASSERT_EQ(ids.size(), text.size() + 1);  // bytes, then eod
      EXPECT_EQ(ids.back(), 256);
      EXPECT_EQ(m.back(), 1);
      std::vector<int32_t> want_mask(text.size() + 1, 0);
      want_mask.back() = 1;
      for (const auto& s : want["response"])
        for (size_t b = s[0].get<size_t>(); b < s[1].get<size_t>(); ++b) want_mask[b] = 1;
      EXPECT_EQ(m, want_mask) << i;
      for (int32_t v : m) response_tokens += v;
    }
    EXPECT_EQ(r.response_tokens, response_tokens);
    const DataSidecar side = read_data_sidecar(prefix);
    EXPECT_EQ(side.chat_template, chat_template_name(t));
    EXPECT_TRUE(side.loss_mask);
    // Three workers on small chunks: the same bytes.
    o.output_prefix = dir / "w3";
    o.workers = 3;
    o.chunk_bytes = 200;
    preprocess_jsonl(o);
    for (const std::string& f : {std::string(".bin"), std::string(".idx"), std::string(".loss_mask.bin"), std::string(".loss_mask.idx")})
      EXPECT_EQ(test::read_log(prefix + f), test::read_log(dir / ("w3_conversation_document" + f))) << f;
  }
}

// Without --strict bad conversations are reported with their line and skipped, both datasets keeping
// the same documents; with --strict the first stops the run and nothing is written.
TEST(ChatPreprocess, BadConversationsAreSkippedOrStopTheRun) {
  TempDir dir;
  const std::string good = user_assistant("a", "b");
  write_text(dir / "in.jsonl", good + "\n" + R"({"messages": [{"role": "bot", "content": "x"}]})" + "\n" + good + "\n" +
                                   R"({"messages": [{"role": "user", "content": "x"}]})" + "\n\n" + good + "\n");
  PreprocessOptions o = chat_options(dir / "in.jsonl", dir / "o", "chatml");
  const PreprocessResult r = preprocess_jsonl(o);
  EXPECT_EQ(r.documents, 3);
  EXPECT_EQ(r.blank_lines, 1);
  ASSERT_EQ(r.bad.size(), 2u);
  EXPECT_EQ(r.bad[0].line, 2);
  EXPECT_NE(r.bad[0].reason.find("unknown role 'bot'"), std::string::npos);
  EXPECT_EQ(r.bad[1].line, 4);
  EXPECT_NE(r.bad[1].reason.find("no assistant message"), std::string::npos);
  IndexedDataset tokens(dir / "o_conversation_document"), mask(dir / "o_conversation_document.loss_mask");
  EXPECT_EQ(tokens.num_documents(), 3);
  EXPECT_EQ(mask.num_documents(), 3);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(tokens.sequence_length(i), mask.sequence_length(i));

  o.output_prefix = dir / "s";
  o.strict = true;
  EXPECT_NE(error_of([&] { preprocess_jsonl(o); }).find(dir / "in.jsonl" + ":2: message 1 has the unknown role 'bot'"),
            std::string::npos);
  for (const std::string& f : test::entries_of(dir.str())) EXPECT_NE(f.rfind("s_", 0), 0u) << f << " written";
}

TEST(ChatPreprocess, JsonKeysDoNotApplyToConversations) {
  TempDir dir;
  write_text(dir / "in.jsonl", user_assistant("a", "b") + "\n");
  PreprocessOptions o = chat_options(dir / "in.jsonl", dir / "o", "chatml");
  o.json_keys = {"messages"};
  EXPECT_NE(error_of([&] { preprocess_jsonl(o); }).find("--json-keys does not apply with --chat-template"),
            std::string::npos);
}

// ---- through the program --------------------------------------------------------------------------

// A HuggingFace tokenizer with ChatML's markers: single ids, no warning, and the mask dataset beside.
TEST(ChatPreprocessProgram, ConversationsWithAHuggingFaceTokenizer) {
  MEGADLM_REQUIRE_BINARY("preprocess_data");
  TempDir dir;
  const std::string tokenizer = write_chatml_tokenizer(dir);
  write_text(dir / "in.jsonl", user_assistant("Hello there", "I am fine") + "\n" +
                                   R"({"prompt": "how are you?", "response": "fine"})" + "\n");
  const auto r = test::run_binary("preprocess_data",
                                  {"--input", dir / "in.jsonl", "--output-prefix", dir / "o", "--tokenizer-type",
                                   "HuggingFaceTokenizer", "--tokenizer-model", tokenizer, "--chat-template", "chatml",
                                   "--append-eod"},
                                  dir / "log.txt");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
  TokenizerSpec spec;
  spec.type = "HuggingFaceTokenizer";
  spec.tokenizer_model = tokenizer;
  const auto tok = make_tokenizer(spec);
  IndexedDataset tokens(dir / "o_conversation_document"), mask(dir / "o_conversation_document.loss_mask");
  ASSERT_EQ(tokens.num_sequences(), 2);
  const std::vector<int32_t> ids = tokens.get(1), m = mask.get(1);
  EXPECT_EQ(tok->decode(ids), "<|im_start|>user\nhow are you?<|im_end|>\n<|im_start|>assistant\nfine<|im_end|>\n<|endoftext|>");
  std::vector<int32_t> response;
  for (size_t i = 0; i < ids.size(); ++i)
    if (m[i]) response.push_back(ids[i]);
  std::vector<int32_t> want = tok->encode("fine");
  want.push_back(tok->token_to_id("<|im_end|>"));
  want.push_back(tok->eod());
  EXPECT_EQ(response, want);
}

// Each bad conversation with --strict: exit 1 naming file:line and the fault, nothing written; a bad
// --chat-template: exit 1 naming the flag or the file.
TEST(ChatPreprocessProgram, BadConversationsAndTemplatesExitCleanly) {
  MEGADLM_REQUIRE_BINARY("preprocess_data");
  TempDir dir;
  const std::string good = user_assistant("a", "b");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"messages": [{"role": "robot", "content": "x"}, {"role": "assistant", "content": "y"}]})",
       ":2: message 1 has the unknown role 'robot'"},
      {R"({"messages": "hello"})", ":2: 'messages' is not a list (a string)"},
      {R"({"messages": [{"role": "user", "content": 7}, {"role": "assistant", "content": "y"}]})",
       ":2: message 1's 'content' is not a string (a number)"},
      {R"({"messages": [{"role": "user", "content": "x"}]})", ":2: the conversation has no assistant message"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "s"}, {"role": "assistant", "content": "y"}]})",
       ":2: message 2 is a system message after the first message"},
      {R"({"messages": []})", ":2: the conversation is empty"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].second);
    const std::string in = dir / ("in" + std::to_string(i) + ".jsonl");
    write_text(in, good + "\n" + cases[i].first + "\n" + good + "\n");
    const auto r = test::run_binary("preprocess_data",
                                    {"--input", in, "--output-prefix", dir / "o", "--tokenizer-type", "ByteTokenizer",
                                     "--chat-template", "qwen", "--strict"},
                                    dir / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find("preprocess_data: error: " + in + cases[i].second), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "o_conversation_document.idx"));
    EXPECT_FALSE(fs::exists(dir / "o_conversation_document.loss_mask.idx"));
  }
  write_text(dir / "ok.jsonl", good + "\n");
  write_text(dir / "tokenizer_config.json", R"({"chat_template": "{{ messages[0]['content'] }}"})");
  const std::vector<std::pair<std::string, std::string>> templates = {
      {"vicuna", "--chat-template 'vicuna' is neither a built-in template (chatml, llama3, qwen) nor an existing file"},
      {dir / "tokenizer_config.json",
       dir / "tokenizer_config.json" + ": its chat_template is not one of the built-ins (chatml, llama3, qwen)"},
  };
  for (const auto& [value, want] : templates) {
    const auto r = test::run_binary("preprocess_data",
                                    {"--input", dir / "ok.jsonl", "--output-prefix", dir / "t", "--tokenizer-type",
                                     "ByteTokenizer", "--chat-template", value},
                                    dir / "log.txt");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find(want), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir / "t_conversation_document.idx"));
  }
}

// A write that fails part way (RLIMIT_FSIZE: what a full disk looks like to the writer) is an error
// that leaves nothing under the final names, neither tokens nor mask nor sidecar.
TEST(ChatPreprocessProgram, AFailedWriteLeavesNoOutput) {
  MEGADLM_REQUIRE_BINARY("preprocess_data");
  TempDir dir;
  std::string input;
  for (int i = 0; i < 100; ++i) input += user_assistant(std::string(100, 'q'), std::string(100, 'a')) + "\n";
  write_text(dir / "in.jsonl", input);
  test::ChildOptions limit;
  limit.max_file_bytes = 16 << 10;  // the input is about 25 KB; the token .bin would be about 50 KB
  const auto r = test::run_binary("preprocess_data",
                                  {"--input", dir / "in.jsonl", "--output-prefix", dir / "o", "--tokenizer-type",
                                   "ByteTokenizer", "--chat-template", "chatml"},
                                  dir / "log.txt", limit);
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find(dir / "o_conversation_document"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("write failed"), std::string::npos) << r.output;
  EXPECT_EQ(test::entries_of(dir.str()), (std::set<std::string>{"in.jsonl", "log.txt"})) << r.output;
}
