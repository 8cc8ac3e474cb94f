#pragma once
// Conversation data for supervised fine-tuning: a conversation (`messages`: [{role, content}], roles
// system | user | assistant; LLaVA's `conversations`: [{from, value}]; or the plain {"prompt",
// "response"}, one user turn and one assistant turn)
// rendered with a model's chat template as pieces of text, each marked prompt or response, and
// tokenized into ids with a loss mask (1 = response).
//
// The built-in templates render exactly what transformers' apply_chat_template(tokenize=False) renders
// with the Jinja source of chat_template_jinja() (tests/data/fixtures/chat_templates.json, made by
// tools/reference/chat_template_fixture.py, checks it):
//   chatml  <|im_start|>{role}\n{content}<|im_end|>\n per message
//   llama3  <|begin_of_text|>, then <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>
//           per message (trim: Python's str.strip(), Unicode whitespace included)
//   qwen    Qwen2.5's: ChatML, with its default system message first when the conversation has none
// The response covers each assistant message's content and its end-of-turn marker (<|im_end|>,
// <|eot_id|>), as HF templates' {% generation %} blocks mark it; everything else is prompt.
//
// Beyond the templates, a conversation must be non-empty, have an assistant turn, and have a system
// message only first (the built-ins would render a later one as one more turn; in training data it is
// almost always a fault).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/jsonl.h"
#include "data/loss_mask.h"
#include "tokenizers/tokenizer.h"

namespace megadlm {

enum class ChatTemplate { ChatML, Llama3, Qwen };

const char* chat_template_name(ChatTemplate t);  // "chatml", "llama3", "qwen"
// The template's Jinja source, as the model's tokenizer_config.json holds it.
const std::string& chat_template_jinja(ChatTemplate t);
// The template's markers (<|im_start|>, ...), each a single token id when the tokenizer has it.
const std::vector<std::string>& chat_template_markers(ChatTemplate t);

// --chat-template's value: a built-in's name, or a file whose chat template is a built-in's Jinja
// source (a HuggingFace tokenizer_config.json with a "chat_template" string, or a chat_template.jinja).
// Sources are compared by normalize_jinja. Throws Error naming the flag or the file and what is wrong.
ChatTemplate resolve_chat_template(const std::string& value);
// A Jinja source with the whitespace outside its quoted strings removed and the escapes inside them
// decoded, so that sources differing only in layout (or in '\n' written as an escape or as a newline
// inside a string) compare equal.
std::string normalize_jinja(std::string_view source);

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

// The conversation of one .jsonl object: its "messages", LLaVA's "conversations" ([{"from": human | gpt
// | system, "value"}], as user / assistant / system), or its "prompt" and "response". Throws Error
// saying what is wrong (messages not a list, a message not an object, an unknown role, a content that
// is not a string, more than one form or none present).
std::vector<ChatMessage> conversation_of(const nlohmann::json& object);

// One piece of a rendered conversation; the pieces' texts back to back are the rendered text.
struct ChatPiece {
  std::string text;
  bool marker = false;    // a template marker: one token id when the tokenizer has it
  bool response = false;  // in the loss mask
};

// Renders the conversation (add_generation_prompt: ends with the assistant header, as for generation).
// Throws Error when the conversation is empty, has no assistant turn, or has a system message that is
// not the first.
std::vector<ChatPiece> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt = false);
std::string chat_text(const std::vector<ChatPiece>& pieces);  // the rendered text

// One .jsonl line as a rendered conversation: the line checks of parse_jsonl_line (blank, UTF-8, JSON,
// object), then conversation_of and render_chat, whose Error becomes status BadConversation.
struct ParsedConversation {
  LineStatus status = LineStatus::Ok;
  std::string error;  // what is wrong, for a bad line
  std::vector<ChatPiece> pieces;
};
ParsedConversation parse_conversation_line(std::string_view line, ChatTemplate t);

// Tokenizes rendered conversations with one tokenizer. The pieces are cut into segments where the loss
// mask changes; each segment is tokenized on its own (so a mask boundary is a token boundary), its
// markers as their single ids when the tokenizer has them and as text otherwise.
class ChatEncoder {
 public:
  ChatEncoder(ChatTemplate t, const Tokenizer& tok);
  // Appends the ids and their mask values (0 prompt, 1 response) of the conversation.
  void encode(const std::vector<ChatPiece>& pieces, std::vector<int32_t>& ids, std::vector<int32_t>& mask) const;
  // The template's markers that the tokenizer has no token for (tokenized as text).
  const std::vector<std::string>& markers_as_text() const { return markers_as_text_; }

 private:
  int32_t marker_id(const std::string& marker) const;  // -1: tokenized as text

  const Tokenizer& tok_;
  std::vector<std::pair<std::string, int32_t>> marker_ids_;
  std::vector<std::string> markers_as_text_;
};

}  // namespace megadlm
