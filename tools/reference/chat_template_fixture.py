#!/usr/bin/env python3
"""Expected renderings of conversations under the built-in chat templates, from transformers:
  tests/data/fixtures/chat_templates.json
    templates      name -> the template's Jinja source, as the model's tokenizer_config.json holds it
    conversations  the input lines (a "messages" list, or the plain "prompt" + "response" form)
    expected       name -> per conversation {"text": apply_chat_template(tokenize=False),
                                             "response": [[begin, end], ...] UTF-8 byte spans}

The texts come from transformers' apply_chat_template on a PreTrainedTokenizerFast built here (a tiny
word-level `tokenizers` object: rendering with tokenize=False does not use the vocabulary) whose
.chat_template is the Jinja source. The response spans come from a second version of each template
that wraps every assistant message's content and its end-of-turn marker in {% generation %} (what HF
templates mark for return_assistant_tokens_mask); that version must render the very same text.

Usage: python3 tools/reference/chat_template_fixture.py
"""
import json
import os

from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast
from transformers.utils.chat_template_utils import render_jinja_template

# ChatML, as the HuggingFace chat-templating guide gives it.
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
    " + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Meta-Llama-3-8B-Instruct's tokenizer_config.json (the "\n\n" are newlines inside the Jinja literals).
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>'"
    " + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0"
    " == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if"
    " add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# Qwen2.5-Instruct's tokenizer_config.json.
QWEN = r"""{%- if tools %}
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
"""

TEMPLATES = {"chatml": CHATML, "llama3": LLAMA3, "qwen": QWEN}

# The same renderings with each assistant message's content and end-of-turn marker in {% generation %}
# (for conversations without tools or tool calls, which is all the fixture has).
GENERATION = {
    "chatml": (
        "{% for message in messages %}{% if message['role'] == 'assistant' %}{{'<|im_start|>assistant\\n'}}"
        "{% generation %}{{message['content'] + '<|im_end|>'}}{% endgeneration %}{{'\\n'}}{% else %}"
        "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
    "llama3": (
        "{% for message in messages %}{% if loop.index0 == 0 %}{{ bos_token }}{% endif %}"
        "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
        "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}"
        "{% endgeneration %}{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
    ),
    "qwen": (
        "{% if messages[0]['role'] == 'system' %}{{ '<|im_start|>system\\n' + messages[0]['content'] + "
        "'<|im_end|>\\n' }}{% else %}{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
        "helpful assistant.<|im_end|>\\n' }}{% endif %}{% for message in messages %}{% if message['role'] == "
        "'assistant' %}{{'<|im_start|>assistant\\n'}}{% generation %}{{message['content'] + '<|im_end|>'}}"
        "{% endgeneration %}{{'\\n'}}{% elif not (message['role'] == 'system' and loop.first) %}"
        "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
}

BOS = "<|begin_of_text|>"


def m(role, content):
    return {"role": role, "content": content}


# Multi-turn, system prompts, empty contents, unicode, surrounding whitespace (llama3 trims it, with
# Python's notion of whitespace), template-like text inside a content, and the prompt/response form.
CONVERSATIONS = [
    {"messages": [m("user", "Hello!"), m("assistant", "Hi, how can I help?")]},
    {"messages": [m("system", "You are terse."), m("user", "2+2?"), m("assistant", "4")]},
    {"messages": [m("user", "Name a colour."), m("assistant", "Blue."), m("user", "Another?"),
                  m("assistant", "Green."), m("user", "One more."), m("assistant", "Red.")]},
    {"messages": [m("system", "Answer in French."), m("user", "Thanks"), m("assistant", "Merci"),
                  m("user", "Goodbye"), m("assistant", "Au revoir")]},
    {"messages": [m("user", "Say nothing."), m("assistant", "")]},
    {"messages": [m("user", ""), m("assistant", "You sent an empty message.")]},
    {"messages": [m("system", ""), m("user", "Empty system prompt."), m("assistant", "Noted.")]},
    {"messages": [m("user", "\u4f60\u597d\uff0c\u4e16\u754c \U0001f30d caf\u00e9 na\u00efve \u0645\u0631\u062d\u0628\u0627"),
                  m("assistant", "\u3053\u3093\u306b\u3061\u306f \U0001f600 \u00c5ngstr\u00f6m \u0394x")]},
    {"messages": [m("user", "  padded question \n\n"),
                  m("assistant", "\u3000\u00a0\r\n\tanswer with unicode spaces\u2028\u0085\x1f ")]},
    {"prompt": "What is the capital of France?", "response": "Paris."},
    {"prompt": "Translate 'cat' to German.", "response": "Katze \u2014 die Katze \U0001f408"},
    {"messages": [m("user", "First"), m("assistant", "Reply"), m("user", "A follow-up with no reply")]},
    {"messages": [m("user", "Tell me two things."), m("assistant", "One."), m("assistant", "Two.")]},
    {"messages": [m("user", "Part one,"), m("user", "part two."), m("assistant", "Both parts read.")]},
    {"messages": [m("user", "What does <|im_start|> mean? Or <|eot_id|>?"),
                  m("assistant", "They are <|im_end|> markers of chat formats.")]},
    {"messages": [m("user", "   \n\t "), m("assistant", "  \n ")]},
    {"messages": [m("user", "Quote: \"a\\b\"\ttab\nline two\n"),
                  m("assistant", "{\"json\": [1, 2, 3], \"s\": \"x\\ny\"}\n```\ncode()\n```")]},
    {"messages": [m("assistant", "I speak first."), m("user", "Then me."), m("assistant", "And me again.")]},
    {"messages": [m("system", "Be kind."), m("assistant", "Hello there.")]},
    {"prompt": "Respond with nothing.", "response": ""},
]


def as_messages(conv):
    if "messages" in conv:
        return conv["messages"]
    return [m("user", conv["prompt"]), m("assistant", conv["response"])]


def byte_offset(text, char_index):
    return len(text[:char_index].encode("utf-8"))


def make_tokenizer(template):
    vocab = {"[UNK]": 0, BOS: 1, "<|eot_id|>": 2, "<|im_end|>": 3}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")),
                                  bos_token=BOS, unk_token="[UNK]")
    tok.chat_template = template
    return tok


def render(name, conv):
    messages = as_messages(conv)
    text = make_tokenizer(TEMPLATES[name]).apply_chat_template(messages, tokenize=False)
    marked, spans = render_jinja_template([messages], chat_template=GENERATION[name],
                                          return_assistant_tokens_mask=True, bos_token=BOS)
    assert marked[0] == text, f"{name}: the generation-marked template renders differently:\n{marked[0]!r}\n{text!r}"
    return {"text": text, "response": [[byte_offset(text, a), byte_offset(text, b)] for a, b in spans[0]]}


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = os.path.join(root, "tests", "data", "fixtures", "chat_templates.json")
    fixture = {
        "templates": TEMPLATES,
        "conversations": CONVERSATIONS,
        "expected": {name: [render(name, c) for c in CONVERSATIONS] for name in TEMPLATES},
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, indent=1, ensure_ascii=True)
        f.write("\n")
    print(f"{out}: {len(CONVERSATIONS)} conversations x {len(TEMPLATES)} templates")


if __name__ == "__main__":
    main()
