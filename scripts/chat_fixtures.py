#!/usr/bin/env python3
"""Writes the chat-template golden files of tests/fixtures/chat/ (issue 31) with transformers itself.

Run from a virtual environment outside the repo (tests never need it: the goldens are committed):

  python3 -m venv /work/venv-hf && /work/venv-hf/bin/pip install transformers jinja2 tokenizers
  /work/venv-hf/bin/python scripts/chat_fixtures.py

tests/fixtures/chat/<prompt-type>/chat_template.jinja is the chat_template of a published model's
tokenizer_config.json (see tests/fixtures/chat/README.md for which); alpaca/ and empty/ are LlamaFactory's
templates of those names written as jinja (no published model has them). Each is rendered here the way
tokenizer.apply_chat_template(messages, tokenize=False) renders it (transformers' render_jinja_template: the
same sandboxed jinja2 environment, trim_blocks and lstrip_blocks, the tokenizer's bos/eos tokens as
variables, add_generation_prompt=False) for every conversation of CONVERSATIONS, into
<prompt-type>/rendered.json: [{"name", "messages", "text"}]. tests/unit/instruction_template_test.cpp
renders the same messages with tidal/data/chat_template.h and compares byte for byte.
"""
import json
import os

from transformers.utils.chat_template_utils import render_jinja_template

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "chat")

# The tokenizer's special tokens each template sees (its tokenizer_config.json's bos_token / eos_token).
TOKENS = {
    "qwen": {"bos_token": None, "eos_token": "<|im_end|>"},
    "chatml": {"bos_token": "<s>", "eos_token": "<|im_end|>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "deepseek3": {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
    "alpaca": {"bos_token": None, "eos_token": "<|endoftext|>"},
    "empty": {"bos_token": None, "eos_token": "<|endoftext|>"},
}


def msg(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = [
    ("single_turn", [msg("user", "Give three tips for staying healthy."),
                     msg("assistant", "Eat well, sleep enough and exercise.")]),
    ("with_system", [msg("system", "You are a pirate."), msg("user", "Hello there"),
                     msg("assistant", "Ahoy, matey!")]),
    ("multi_turn", [msg("system", "  Answer briefly.  "), msg("user", "What is 2+2?"), msg("assistant", "4"),
                    msg("user", " And 3+3? "), msg("assistant", "   6   "), msg("user", "Thanks\n"),
                    msg("assistant", "You're welcome!\n")]),
    ("empty_input", [msg("user", "Name a colour."), msg("assistant", "Blue.")]),
    ("empty_strings", [msg("user", ""), msg("assistant", "")]),
    ("unicode_and_think", [msg("user", "Übersetze: 你好"), msg("assistant", "<think>easy</think>Hallo 😀")]),
]


# Tool use (issue 31), rendered for qwen only: Qwen2.5's chat_template is the one of tidal's prompt types that
# defines tools and tool calls. Each conversation is written as a ShareGPT record gives it to tidal (roles
# function_call and observation, a call's JSON as text, the tools column as a JSON string) and handed to
# transformers as apply_chat_template takes it: a call as an assistant message with tool_calls, an observation as
# a "tool" message, each tool wrapped as {"type": "function", "function": ...} (LLaMA-Factory's QwenToolUtils).
WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"},
                                                           "unit": {"type": "string", "enum": ["C", "F"]}},
                          "required": ["city"]}}
CLOCK = {"type": "function", "function": {"name": "now", "description": "Zeit: ÜTC", "parameters": {}}}
TOOL_CONVERSATIONS = [
    ("call_and_answer", [WEATHER],
     [msg("user", "Weather in Paris?"),
      msg("function_call", '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}'),
      msg("observation", '{"temp": 21, "sky": "clear"}'), msg("assistant", "21 °C and clear.")]),
    ("system_two_calls", [WEATHER, CLOCK],
     [msg("system", "Be terse."), msg("user", "Time and weather in Köln"),
      msg("function_call", '[{"name": "now", "arguments": {}}, '
                           '{"name": "get_weather", "arguments": {"city": "Köln", "unit": "C"}}]'),
      msg("observation", "12:00\n\"quoted\""), msg("assistant", "Noon, 9 °C.")]),
    ("tools_no_call", [WEATHER], [msg("user", "Hi"), msg("assistant", "Hello!")]),
]


def as_transformers(message):
    if message["role"] == "observation":
        return {"role": "tool", "content": message["content"]}
    if message["role"] != "function_call":
        return message
    calls = json.loads(message["content"])
    calls = calls if isinstance(calls, list) else [calls]
    return {"role": "assistant", "content": "",
            "tool_calls": [{"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                           for c in calls]}


def write_tool_fixtures():
    folder = os.path.join(OUT, "qwen")
    with open(os.path.join(folder, "chat_template.jinja"), encoding="utf-8") as f:
        template = f.read()
    rows = []
    for name, tools, messages in TOOL_CONVERSATIONS:
        wrapped = [t if t.get("type") == "function" else {"type": "function", "function": t} for t in tools]
        text = render_jinja_template(conversations=[[as_transformers(m) for m in messages]], tools=wrapped,
                                     chat_template=template, add_generation_prompt=False,
                                     eos_token=TOKENS["qwen"]["eos_token"])
        text = text[0] if isinstance(text, tuple) else text
        text = text[0] if isinstance(text, list) else text
        rows.append({"name": name, "tools": json.dumps(tools, ensure_ascii=False), "messages": messages,
                     "text": text})
    with open(os.path.join(folder, "tools_rendered.json"), "w", encoding="utf-8") as f:
        json.dump(rows, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"qwen tools: {len(rows)} conversations")


def main():
    for prompt_type, tokens in TOKENS.items():
        folder = os.path.join(OUT, prompt_type)
        with open(os.path.join(folder, "chat_template.jinja"), encoding="utf-8") as f:
            template = f.read()
        special = {k: v for k, v in tokens.items() if v is not None}
        rows = []
        for name, messages in CONVERSATIONS:
            text = render_jinja_template(conversations=[messages], chat_template=template,
                                         add_generation_prompt=False, **special)
            text = text[0] if isinstance(text, tuple) else text
            text = text[0] if isinstance(text, list) else text
            rows.append({"name": name, "messages": messages, "text": text})
        with open(os.path.join(folder, "rendered.json"), "w", encoding="utf-8") as f:
            json.dump(rows, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"{prompt_type}: {len(rows)} conversations")
    write_tool_fixtures()


if __name__ == "__main__":
    main()
