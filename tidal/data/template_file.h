#pragma once
// MindSpeed-LLM's --prompt-type-path: a JSON file of chat templates (its configs/finetune/templates.json) from
// which --prompt-type NAME is taken instead of tidal's built-in table. The file is a list of objects, each
// {"name": ..., "format_user": {"slots": [...]}, "format_assistant", "format_system", "format_function",
// "format_observation", "format_tools": {"tool_format": ...}, "format_separator", "format_prefix",
// "default_system", "stop_words", "efficient_eos", "replace_eos", "force_system", "template_class",
// "thought_words"}, as MindSpeed's register_custom_template reads it; a slot is a string, {"token": "..."} or
// ["bos_token"] / ["eos_token"]. What tidal does not render (efficient_eos, the reasoning and DeepSeek-V4
// template classes, tool formats other than "default" and "qwen") is refused by name, never dropped.
#include <nlohmann/json.hpp>
#include <string>

#include "tidal/data/slot_template.h"

namespace tidal::data {

// The template `name` of the file at `path`. A missing or unreadable file, bad JSON, an unknown name (the
// message lists the file's), an unknown or ill-typed field throws tidal::Error naming the file, the template
// and the field.
SlotTemplate load_template_file(const std::string& path, const std::string& name);
// The same from the file's parsed document `doc` (`path` names it in messages).
SlotTemplate template_of(const nlohmann::json& doc, const std::string& path, const std::string& name);

}  // namespace tidal::data
