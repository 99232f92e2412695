#include "tidal/data/slot_template.h"

#include "tidal/base/error.h"
#include "tidal/data/tool_calls.h"

namespace tidal::data {
namespace {

Slot text(std::string s) { return {Slot::Kind::text, std::move(s)}; }
Slot eos() { return {Slot::Kind::eos, ""}; }

// StringFormatter.apply: each text slot with its first "{{key}}" replaced, keys in the order given (content
// first, as MindSpeed passes them).
void apply_string(const Formatter& f, const std::vector<std::pair<std::string_view, std::string>>& values, bool trained,
                  const SpecialTexts& special, std::vector<ChatSegment>& out) {
  for (const Slot& slot : f) {
    std::string piece;
    switch (slot.kind) {
      case Slot::Kind::text:
        piece = slot.text;
        for (const auto& [key, value] : values) {
          const std::string placeholder = std::string("{{") + std::string(key) + "}}";
          if (const size_t at = piece.find(placeholder); at != std::string::npos)
            piece.replace(at, placeholder.size(), value);
        }
        break;
      case Slot::Kind::token: piece = slot.text; break;
      case Slot::Kind::bos: piece = special.bos; break;
      case Slot::Kind::eos: piece = special.eos; break;
    }
    if (!piece.empty()) out.push_back({std::move(piece), trained});  // MindSpeed skips empty texts
  }
}

// FunctionFormatter.apply: every "{{name}}" and "{{arguments}}" replaced (the default tool format), or, for the
// qwen format, "{{content}}" by the <tool_call> blocks.
void apply_function(const SlotTemplate& t, const ChatMessage& m, const SpecialTexts& special,
                    std::vector<ChatSegment>& out) {
  std::vector<FunctionCall> calls;
  const std::string wrong = parse_function_calls(m.content, calls);
  TIDAL_CHECK(wrong.empty(), "[chat] ", wrong);
  if (t.function_format == ToolFormat::qwen) {
    apply_string(t.function, {{"content", qwen_function_text(calls)}}, true, special, out);
    return;
  }
  const auto [name, arguments] = name_and_arguments(calls);
  Formatter f = t.function;
  for (Slot& slot : f) {
    if (slot.kind != Slot::Kind::text) continue;
    for (const auto& [key, value] : {std::pair<std::string, const std::string&>{"{{name}}", name},
                                     std::pair<std::string, const std::string&>{"{{arguments}}", arguments}})
      for (size_t at = slot.text.find(key); at != std::string::npos; at = slot.text.find(key, at + value.size()))
        slot.text.replace(at, key.size(), value);
  }
  apply_string(f, {}, true, special, out);
}

}  // namespace

SlotTemplate slot_template_defaults(std::string name) {
  SlotTemplate t;
  t.name = std::move(name);
  t.user = {text("{{content}}")};
  t.system = t.user;
  t.assistant = {text("{{content}}"), eos()};
  t.function = {text("Action: {{name}}\nAction Input: {{arguments}}"), eos()};
  t.observation = t.user;
  return t;
}

std::vector<ChatSegment> render_slots(const SlotTemplate& t, const std::vector<ChatMessage>& messages,
                                      const SpecialTexts& special, std::string_view tools_text) {
  const auto [system_message, turns] = split_turns(messages);
  std::vector<nlohmann::ordered_json> tools;
  const std::string wrong_tools = parse_tools(tools_text, tools);
  TIDAL_CHECK(wrong_tools.empty(), "[chat] ", wrong_tools);
  // Template._encode: system = system or default_system; the tools text follows it.
  const std::string system = system_message != nullptr && !system_message->empty() ? *system_message : t.default_system;
  std::string tool_text;
  if (!tools.empty())
    tool_text = t.tools_format == ToolFormat::qwen ? qwen_tools_text(tools) : default_tools_text(tools);
  std::vector<ChatSegment> out;
  for (size_t i = 0; i < turns.size(); ++i) {
    const ChatMessage& m = *turns[i];
    std::string llama2_system;  // Llama2Template: the formatted system text opens the first user content
    if (i == 0) {
      apply_string(t.prefix, {}, false, special, out);
      if (!system.empty() || !tools.empty()) {
        if (t.template_class == TemplateClass::llama2) {
          TIDAL_CHECK(!t.system.empty() && t.system[0].kind == Slot::Kind::text, "[chat] template '", t.name,
                      "': Llama2Template needs format_system's first slot to be text");
          std::vector<ChatSegment> first;
          apply_string({t.system[0]}, {{"content", system + tool_text}}, false, special, first);
          llama2_system = first.empty() ? "" : first[0].text;
        } else {
          apply_string(t.system, {{"content", system + tool_text}}, false, special, out);
        }
      }
    } else if (i % 2 == 0 && t.template_class != TemplateClass::lf_default) {
      apply_string(t.separator, {}, false, special, out);
    }
    switch (m.role) {
      case Role::user:
        apply_string(t.user, {{"content", llama2_system + m.content}, {"idx", std::to_string(i / 2)}}, false, special,
                     out);
        break;
      case Role::observation: apply_string(t.observation, {{"content", m.content}}, false, special, out); break;
      case Role::assistant: apply_string(t.assistant, {{"content", m.content}}, true, special, out); break;
      case Role::function_call: apply_function(t, m, special, out); break;
      case Role::system: TIDAL_ASSERT(false, "a system turn after split_turns"); break;
    }
  }
  return out;
}

std::vector<std::string> slot_template_tokens(const SlotTemplate& t, const SpecialTexts& special) {
  std::vector<std::string> tokens = t.stop_words;
  bool bos = false, eos = false;
  for (const Formatter* f : {&t.user, &t.assistant, &t.system, &t.function, &t.observation, &t.separator, &t.prefix})
    for (const Slot& slot : *f) {
      if (slot.kind == Slot::Kind::token) tokens.push_back(slot.text);
      bos = bos || slot.kind == Slot::Kind::bos;
      eos = eos || slot.kind == Slot::Kind::eos;
    }
  if (bos && !special.bos.empty()) tokens.push_back(special.bos);
  if (eos && !special.eos.empty()) tokens.push_back(special.eos);
  return tokens;
}

}  // namespace tidal::data
