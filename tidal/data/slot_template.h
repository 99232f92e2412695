#pragma once
// A chat template as MindSpeed-LLM's --prompt-type-path file defines one (configs/finetune/templates.json, its
// Template class, aligned with LLaMA-Factory 0.8.2): formatters made of slots, rendered turn by turn.
//
//   message 0:       format_prefix + (system or tools: format_system(system + tools text)) + its formatter
//   message 2k > 0:  format_separator + format_user / format_observation      (masked)
//   message 2k + 1:  format_assistant / format_function                       (trained)
//
// A slot is text (with {{content}}, {{idx}}, or {{name}} and {{arguments}} in function formats), a special
// token by name ({"token": "<|x|>"}), or the tokenizer's bos / eos token. "LFDefaultTemplate" writes no
// separator; "Llama2Template" puts the system text at the start of the first user turn's content. The file's
// parser is tidal/data/template_file.h.
#include <string>
#include <string_view>
#include <vector>

#include "tidal/data/chat_template.h"

namespace tidal::data {

struct Slot {
  enum class Kind { text, token, bos, eos };
  Kind kind = Kind::text;
  std::string text;  // the text (kind text) or the token's spelling (kind token)
};

using Formatter = std::vector<Slot>;

enum class ToolFormat { default_, qwen };               // LLaMA-Factory's tool_format names "default" and "qwen"
enum class TemplateClass { base, lf_default, llama2 };  // MindSpeed's Template, LFDefaultTemplate, Llama2Template

struct SlotTemplate {
  std::string name;
  Formatter user, assistant, system, function, observation, separator, prefix;
  ToolFormat function_format = ToolFormat::default_;  // qwen: {{content}} is the <tool_call> blocks
  ToolFormat tools_format = ToolFormat::default_;
  std::string default_system;
  std::vector<std::string> stop_words;
  bool replace_eos = false;  // the eos slot writes stop_words[0], not the tokenizer's eos token
  TemplateClass template_class = TemplateClass::base;
};

// The defaults MindSpeed's _register_template fills in for a missing formatter: user and system "{{content}}",
// assistant "{{content}}" + eos, function "Action: {{name}}\nAction Input: {{arguments}}" + eos, observation
// the user formatter, separator and prefix nothing.
SlotTemplate slot_template_defaults(std::string name);

// The text each special slot writes: the bos token ("" when the tokenizer has none) and the eos token
// (stop_words[0] when replace_eos).
struct SpecialTexts {
  std::string bos, eos;
};

// Renders `messages` (as render_chat checks them) with the record's `tools` text. One segment per slot, as
// MindSpeed encodes each slot on its own (Template._convert_elements_to_ids); concatenated, the segments are
// the rendering.
std::vector<ChatSegment> render_slots(const SlotTemplate& t, const std::vector<ChatMessage>& messages,
                                      const SpecialTexts& special, std::string_view tools = {});

// The special tokens the template writes by name, its stop words and the bos / eos it writes: each must be an
// added token of the tokenizer.
std::vector<std::string> slot_template_tokens(const SlotTemplate& t, const SpecialTexts& special);

}  // namespace tidal::data
