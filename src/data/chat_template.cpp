#include "data/chat_template.h"

#include <algorithm>
#include <array>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"

namespace megadlm {

namespace {

constexpr std::array<ChatTemplate, 3> kTemplates = {ChatTemplate::ChatML, ChatTemplate::Llama3, ChatTemplate::Qwen};
constexpr const char* kBuiltInList = "chatml, llama3, qwen";
constexpr const char* kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// ChatML, as the HuggingFace chat-templating guide gives it.
const std::string kChatMLJinja =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
    " + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Meta-Llama-3-8B-Instruct's (its "\n\n" are newlines inside the Jinja strings).
const std::string kLlama3Jinja =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>'"
    " + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0"
    " == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if"
    " add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

// Qwen2.5-Instruct's.
const std::string kQwenJinja = R"JINJA({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)JINJA";

const std::vector<std::string> kChatMLMarkers = {"<|im_start|>", "<|im_end|>"};
const std::vector<std::string> kLlama3Markers = {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                                                 "<|eot_id|>"};

// ---- Python's str.strip() (Jinja's trim) ------------------------------------------------------------

// The code points Python's str.isspace() accepts.
bool python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The code point starting at s[i] (valid UTF-8) and its length in bytes.
uint32_t decode_at(std::string_view s, size_t i, size_t& len) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
  const uint32_t c = b(0);
  if (c < 0x80) return len = 1, c;
  if (c < 0xE0) return len = 2, ((c & 0x1F) << 6) | (b(1) & 0x3F);
  if (c < 0xF0) return len = 3, ((c & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return len = 4, ((c & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

std::string python_strip(std::string_view s) {
  size_t begin = 0, len = 0;
  while (begin < s.size() && python_space(decode_at(s, begin, len))) begin += len;
  size_t end = s.size();
  while (end > begin) {
    size_t start = end - 1;  // back to the first byte of the last code point
    while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    if (!python_space(decode_at(s, start, len))) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

// ---- rendering --------------------------------------------------------------------------------------

class Renderer {
 public:
  void marker(const char* m, bool response = false) { pieces_.push_back({m, true, response}); }
  void text(std::string t, bool response = false) {
    if (!t.empty()) pieces_.push_back({std::move(t), false, response});
  }
  std::vector<ChatPiece> take() { return std::move(pieces_); }

 private:
  std::vector<ChatPiece> pieces_;
};

// <|im_start|>{role}\n{content}<|im_end|>\n; an assistant's content and <|im_end|> are the response.
void render_chatml_message(Renderer& r, const ChatMessage& m) {
  const bool response = m.role == "assistant";
  r.marker("<|im_start|>");
  r.text(m.role + "\n");
  r.text(m.content, response);
  r.marker("<|im_end|>", response);
  r.text("\n");
}

void render_chatml(Renderer& r, const std::vector<ChatMessage>& messages, bool generation_prompt) {
  for (const ChatMessage& m : messages) render_chatml_message(r, m);
  if (generation_prompt) {
    r.marker("<|im_start|>");
    r.text("assistant\n");
  }
}

void render_qwen(Renderer& r, const std::vector<ChatMessage>& messages, bool generation_prompt) {
  const bool has_system = messages.front().role == "system";
  if (!has_system) render_chatml_message(r, {"system", kQwenDefaultSystem});
  render_chatml(r, messages, generation_prompt);
}

void render_llama3_header(Renderer& r, const std::string& role) {
  r.marker("<|start_header_id|>");
  r.text(role);
  r.marker("<|end_header_id|>");
  r.text("\n\n");
}

void render_llama3(Renderer& r, const std::vector<ChatMessage>& messages, bool generation_prompt) {
  r.marker("<|begin_of_text|>");
  for (const ChatMessage& m : messages) {
    const bool response = m.role == "assistant";
    render_llama3_header(r, m.role);
    r.text(python_strip(m.content), response);
    r.marker("<|eot_id|>", response);
  }
  if (generation_prompt) render_llama3_header(r, "assistant");
}

void check_renderable(const std::vector<ChatMessage>& messages) {
  MEGADLM_CHECK(!messages.empty(), "the conversation is empty (no messages)");
  for (size_t i = 1; i < messages.size(); ++i)
    MEGADLM_CHECK(messages[i].role != "system", "message ", i + 1,
                  " is a system message after the first message; a system message must come first");
  MEGADLM_CHECK(std::any_of(messages.begin(), messages.end(), [](const ChatMessage& m) { return m.role == "assistant"; }),
                "the conversation has no assistant message (nothing to train on)");
}

// ---- the .jsonl object ----------------------------------------------------------------------------

std::string string_field(const nlohmann::json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  MEGADLM_CHECK(it != object.end(), where, " has no '", key, "'");
  MEGADLM_CHECK(it->is_string(), where, "'s '", key, "' is not a string (a ", it->type_name(), ")");
  return it->get<std::string>();
}

ChatMessage message_of(const nlohmann::json& m, size_t index) {
  const std::string where = "message " + std::to_string(index + 1);
  MEGADLM_CHECK(m.is_object(), where, " is not an object (a ", m.type_name(), ")");
  ChatMessage out;
  out.role = string_field(m, "role", where);
  MEGADLM_CHECK(out.role == "system" || out.role == "user" || out.role == "assistant", where, " has the unknown role '",
                out.role, "' (roles: system, user, assistant)");
  out.content = string_field(m, "content", where);
  // Qwen's template renders tool calls in another form; these templates as built in render none.
  if (const auto tc = m.find("tool_calls"); tc != m.end())
    MEGADLM_CHECK(tc->is_null() || tc->empty(), where, " has tool_calls, which the built-in templates do not render");
  return out;
}

// LLaVA's (ShareGPT's) form: [{"from": "human" | "gpt" | "system", "value": ...}].
std::vector<ChatMessage> llava_turns_of(const nlohmann::json& list) {
  MEGADLM_CHECK(list.is_array(), "'conversations' is not a list (a ", list.type_name(), ")");
  std::vector<ChatMessage> out;
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "turn " + std::to_string(i + 1) + " of 'conversations'";
    MEGADLM_CHECK(list[i].is_object(), where, " is not an object (a ", list[i].type_name(), ")");
    const std::string from = string_field(list[i], "from", where);
    MEGADLM_CHECK(from == "human" || from == "gpt" || from == "system", where, " is from the unknown '", from,
                  "' (from: human, gpt, system)");
    out.push_back({from == "human" ? "user" : from == "gpt" ? "assistant" : "system", string_field(list[i], "value", where)});
  }
  return out;
}

// ---- normalize_jinja ------------------------------------------------------------------------------

bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Appends the string literal starting at s[i] (a quote) with its escapes decoded; returns the index
// after its closing quote.
size_t append_literal(std::string_view s, size_t i, std::string& out) {
  const char quote = s[i++];
  out += '\x01';  // one delimiter for both quote kinds
  for (; i < s.size() && s[i] != quote; ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char e = s[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      continue;
    }
    out += s[i];
  }
  out += '\x01';
  return i + 1;
}

bool tag_open(std::string_view s, size_t i) {
  return i + 1 < s.size() && s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#');
}
bool tag_close(std::string_view s, size_t i) {
  return i + 1 < s.size() && s[i + 1] == '}' && (s[i] == '}' || s[i] == '%' || s[i] == '#');
}

ChatTemplate template_of_source(const std::string& source, const std::string& path) {
  const std::string key = normalize_jinja(source);
  for (ChatTemplate t : kTemplates)
    if (normalize_jinja(chat_template_jinja(t)) == key) return t;
  fail(path, ": its chat_template is not one of the built-ins (", kBuiltInList,
       "); the built-ins are recognised by their Jinja source, compared with whitespace outside quoted strings "
       "ignored");
}

// The "chat_template" of a tokenizer_config.json: a string, or a list of {name, template} where the one
// named "default" is used (as transformers does).
std::string chat_template_of_config(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": invalid JSON (", e.what(), ")");
  }
  MEGADLM_CHECK(j.is_object(), path, ": not a JSON object (a ", j.type_name(), "); expected a tokenizer_config.json");
  const auto it = j.find("chat_template");
  MEGADLM_CHECK(it != j.end() && !it->is_null(), path, ": has no \"chat_template\"");
  if (it->is_string()) return it->get<std::string>();
  MEGADLM_CHECK(it->is_array(), path, ": \"chat_template\" is neither a string nor a list (a ", it->type_name(), ")");
  for (const auto& e : *it)
    if (e.is_object() && e.contains("name") && e["name"] == "default" && e.contains("template") &&
        e["template"].is_string())
      return e["template"].get<std::string>();
  fail(path, ": \"chat_template\" is a list without a template named \"default\"");
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::ChatML: return "chatml";
    case ChatTemplate::Llama3: return "llama3";
    case ChatTemplate::Qwen: return "qwen";
  }
  return "unknown";
}

const std::string& chat_template_jinja(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::Llama3: return kLlama3Jinja;
    case ChatTemplate::Qwen: return kQwenJinja;
    case ChatTemplate::ChatML: break;
  }
  return kChatMLJinja;
}

const std::vector<std::string>& chat_template_markers(ChatTemplate t) {
  return t == ChatTemplate::Llama3 ? kLlama3Markers : kChatMLMarkers;
}

std::string normalize_jinja(std::string_view s) {
  std::string out;
  bool in_tag = false;
  for (size_t i = 0; i < s.size();) {
    if (!in_tag && tag_open(s, i)) {
      in_tag = true;
      out.append(s.substr(i, 2));
      i += 2;
    } else if (in_tag && tag_close(s, i)) {
      in_tag = false;
      out.append(s.substr(i, 2));
      i += 2;
    } else if (in_tag && (s[i] == '\'' || s[i] == '"')) {
      i = append_literal(s, i, out);
    } else {
      if (!space(s[i])) out += s[i];
      ++i;
    }
  }
  return out;
}

ChatTemplate resolve_chat_template(const std::string& value) {
  for (ChatTemplate t : kTemplates)
    if (value == chat_template_name(t)) return t;
  MEGADLM_CHECK(std::filesystem::exists(value), "--chat-template '", value, "' is neither a built-in template (",
                kBuiltInList, ") nor an existing file (a tokenizer_config.json)");
  const std::string text = read_file(value, "--chat-template");
  const std::string source = ends_with(value, ".jinja") ? text : chat_template_of_config(text, value);
  return template_of_source(source, value);
}

std::vector<ChatMessage> conversation_of(const nlohmann::json& object) {
  const bool has_messages = object.contains("messages");
  const bool has_prompt = object.contains("prompt") || object.contains("response");
  const bool has_turns = object.contains("conversations");
  MEGADLM_CHECK(has_messages || has_prompt || has_turns,
                "has neither 'messages', 'conversations' nor 'prompt' and 'response'");
  MEGADLM_CHECK(int(has_messages) + int(has_prompt) + int(has_turns) == 1,
                "has more than one of 'messages', 'conversations' and 'prompt'/'response'; give one form");
  if (has_turns) return llava_turns_of(object["conversations"]);
  if (has_prompt)
    return {{"user", string_field(object, "prompt", "the line")},
            {"assistant", string_field(object, "response", "the line")}};
  const nlohmann::json& list = object["messages"];
  MEGADLM_CHECK(list.is_array(), "'messages' is not a list (a ", list.type_name(), ")");
  std::vector<ChatMessage> out;
  out.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) out.push_back(message_of(list[i], i));
  return out;
}

std::vector<ChatPiece> render_chat(ChatTemplate t, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt) {
  check_renderable(messages);
  Renderer r;
  switch (t) {
    case ChatTemplate::ChatML: render_chatml(r, messages, add_generation_prompt); break;
    case ChatTemplate::Llama3: render_llama3(r, messages, add_generation_prompt); break;
    case ChatTemplate::Qwen: render_qwen(r, messages, add_generation_prompt); break;
  }
  return r.take();
}

std::string chat_text(const std::vector<ChatPiece>& pieces) {
  std::string out;
  for (const ChatPiece& p : pieces) out += p.text;
  return out;
}

ParsedConversation parse_conversation_line(std::string_view line, ChatTemplate t) {
  ParsedConversation out;
  nlohmann::json j;
  out.status = parse_json_object_line(line, j, out.error);
  if (out.status != LineStatus::Ok) return out;
  try {
    out.pieces = render_chat(t, conversation_of(j));
  } catch (const Error& e) {
    out.status = LineStatus::BadConversation;
    out.error = e.what();
  }
  return out;
}

ChatEncoder::ChatEncoder(ChatTemplate t, const Tokenizer& tok) : tok_(tok) {
  for (const std::string& m : chat_template_markers(t)) {
    const int32_t id = tok.token_to_id(m);
    marker_ids_.emplace_back(m, id);
    if (id < 0) markers_as_text_.push_back(m);
  }
}

int32_t ChatEncoder::marker_id(const std::string& marker) const {
  for (const auto& [m, id] : marker_ids_)
    if (m == marker) return id;
  return -1;
}

void ChatEncoder::encode(const std::vector<ChatPiece>& pieces, std::vector<int32_t>& ids,
                         std::vector<int32_t>& mask) const {
  std::string pending;  // text of the current segment since its last single-id marker
  bool response = false;
  auto flush = [&] {
    if (pending.empty()) return;
    tok_.encode(pending, ids);
    mask.resize(ids.size(), response ? 1 : 0);
    pending.clear();
  };
  for (const ChatPiece& p : pieces) {
    if (p.response != response) {  // a segment ends: tokenized on its own
      flush();
      response = p.response;
    }
    const int32_t id = p.marker ? marker_id(p.text) : -1;
    if (id < 0) {
      pending += p.text;
      continue;
    }
    flush();
    ids.push_back(id);
    mask.push_back(response ? 1 : 0);
  }
  flush();
}

}  // namespace megadlm
