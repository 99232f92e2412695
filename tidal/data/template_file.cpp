#include "tidal/data/template_file.h"

#include <filesystem>
#include <string_view>

#include "tidal/base/error.h"
#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"

namespace tidal::data {
namespace {

using json = nlohmann::json;

// Where a field is, for messages: "[template] FILE: template 'NAME', format_user".
struct Where {
  std::string path, name;
  std::string at(std::string_view field) const {
    return detail::str_cat("[template] ", path, ": template '", name, "', ", field);
  }
};

// A "{{name}}" placeholder in `text`: an identifier ([a-zA-Z_][a-zA-Z0-9_]*) between double braces.
bool has_placeholder(std::string_view text) {
  auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  for (size_t at = text.find("{{"); at != std::string_view::npos; at = text.find("{{", at + 1)) {
    size_t i = at + 2;
    if (i >= text.size() || !alpha(text[i])) continue;
    while (i < text.size() && (alpha(text[i]) || (text[i] >= '0' && text[i] <= '9'))) ++i;
    if (text.substr(i, 2) == "}}") return true;
  }
  return false;
}

bool has_placeholder(const Formatter& f) {
  for (const Slot& s : f)
    if (s.kind == Slot::Kind::text && has_placeholder(s.text)) return true;
  return false;
}

bool mentions(const Formatter& f, std::string_view key) {
  for (const Slot& s : f)
    if (s.kind == Slot::Kind::text && s.text.find(key) != std::string::npos) return true;
  return false;
}

Slot slot_of(const json& v, const Where& w, const std::string& field) {
  if (v.is_string()) return {Slot::Kind::text, v.get<std::string>()};
  if (v.is_object()) {
    TIDAL_CHECK(v.size() == 1 && v.contains("token") && v["token"].is_string(), w.at(field),
                ": an object slot must be {\"token\": \"<special token>\"}");
    return {Slot::Kind::token, v["token"].get<std::string>()};
  }
  if (v.is_array()) {  // MindSpeed turns a list into a set: {"bos_token"} or {"eos_token"}
    TIDAL_CHECK(v.size() == 1 && v[0].is_string() &&
                    (v[0].get<std::string>() == "bos_token" || v[0].get<std::string>() == "eos_token"),
                w.at(field), ": a list slot must be [\"bos_token\"] or [\"eos_token\"]");
    return {v[0].get<std::string>() == "bos_token" ? Slot::Kind::bos : Slot::Kind::eos, ""};
  }
  detail::throw_error(detail::str_cat(w.at(field), ": a slot is ", json_kind(v),
                                      "; slots are strings, {\"token\": ...} or [\"bos_token\"] / [\"eos_token\"]"));
}

ToolFormat tool_format_of(const json& v, const Where& w, const std::string& field) {
  const std::string f = json_string(v, w.at(field + ".tool_format"));
  TIDAL_CHECK(f == "default" || f == "qwen", w.at(field + ".tool_format"), ": '", f,
              "' is not a tool format tidal renders (default, qwen)");
  return f == "default" ? ToolFormat::default_ : ToolFormat::qwen;
}

// A formatter object {"slots": [...], "tool_format": ...}: its slots (empty when absent), and its tool format
// into `format` when given (only function and tools formatters take one).
Formatter formatter_of(const json& v, const Where& w, const std::string& field, ToolFormat* format) {
  TIDAL_CHECK(v.is_object(), w.at(field), " is ", json_kind(v), ", not an object such as {\"slots\": [...]}");
  Formatter f;
  for (const auto& [key, value] : v.items()) {
    if (key == "slots") {
      TIDAL_CHECK(value.is_array(), w.at(field + ".slots"), " is ", json_kind(value), ", not a list");
      for (const json& s : value) f.push_back(slot_of(s, w, field + ".slots"));
    } else if (key == "tool_format" && format != nullptr) {
      *format = tool_format_of(value, w, field);
    } else {
      detail::throw_error(detail::str_cat(w.at(field), ": unknown key '", key, "' (a formatter has slots",
                                          format != nullptr ? " and tool_format" : "", ")"));
    }
  }
  return f;
}

bool bool_of(const json& v, const Where& w, const char* field) { return json_bool(v, w.at(field)); }

}  // namespace

SlotTemplate load_template_file(const std::string& path, const std::string& name) {
  TIDAL_CHECK(std::filesystem::is_regular_file(path), "[template] --prompt-type-path ", path,
              " is not a file: give MindSpeed-LLM's templates.json (configs/finetune/templates.json) or a file in "
              "its format");
  return template_of(parse_json(io::read_file(path), "[template] " + path), path, name);
}

SlotTemplate template_of(const nlohmann::json& doc, const std::string& path, const std::string& name) {
  TIDAL_CHECK(doc.is_array(), "[template] ", path, " holds ", json_kind(doc),
              ": a template file is a list of templates [{\"name\": ..., \"format_user\": ...}, ...]");
  const json* entry = nullptr;
  std::string names;
  for (size_t i = 0; i < doc.size(); ++i) {
    const json& t = doc[i];
    TIDAL_CHECK(t.is_object() && t.contains("name") && t["name"].is_string(), "[template] ", path, ": entry ", i,
                " is not an object with a string \"name\"");
    const std::string n = t["name"].get<std::string>();
    names += (names.empty() ? "" : ", ") + n;
    if (n == name) entry = &t;  // a later entry of the same name wins, as MindSpeed's dict does
  }
  TIDAL_CHECK(entry != nullptr, "[template] --prompt-type '", name, "' is not a template of ", path, " (it has ",
              names.empty() ? std::string("none") : names, ")");
  const Where w{path, name};
  SlotTemplate t = slot_template_defaults(name);
  bool has_user = false, has_assistant = false, has_observation = false, efficient_eos = false;
  for (const auto& [key, value] : entry->items()) {
    if (key == "name" || value.is_null()) continue;  // null: MindSpeed's config.get default
    if (key == "format_user") {
      t.user = formatter_of(value, w, key, nullptr);
      has_user = true;
    } else if (key == "format_assistant") {
      t.assistant = formatter_of(value, w, key, nullptr);
      has_assistant = true;
    } else if (key == "format_system") {
      t.system = formatter_of(value, w, key, nullptr);
    } else if (key == "format_function") {
      t.function = formatter_of(value, w, key, &t.function_format);
    } else if (key == "format_observation") {
      t.observation = formatter_of(value, w, key, nullptr);
      has_observation = true;
    } else if (key == "format_tools") {
      const Formatter unused = formatter_of(value, w, key, &t.tools_format);
      TIDAL_CHECK(unused.empty(), w.at(key), ": a tools formatter takes a tool_format, not slots");
    } else if (key == "format_separator") {
      t.separator = formatter_of(value, w, key, nullptr);
    } else if (key == "format_prefix") {
      t.prefix = formatter_of(value, w, key, nullptr);
    } else if (key == "default_system") {
      if (value.is_array()) {  // MindSpeed joins a list of strings
        t.default_system.clear();
        for (const json& part : value) t.default_system += json_string(part, w.at("default_system's parts"));
      } else {
        t.default_system = json_string(value, w.at(key));
      }
    } else if (key == "stop_words") {
      TIDAL_CHECK(value.is_array(), w.at(key), " is ", json_kind(value), ", not a list of strings");
      for (const json& s : value) t.stop_words.push_back(json_string(s, w.at("stop_words' entries")));
    } else if (key == "efficient_eos") {
      efficient_eos = bool_of(value, w, "efficient_eos");
    } else if (key == "replace_eos") {
      t.replace_eos = bool_of(value, w, "replace_eos");
    } else if (key == "force_system") {
      (void)bool_of(value, w, "force_system");  // MindSpeed's templates read it nowhere
    } else if (key == "thought_words") {
      TIDAL_CHECK(value.is_array() && value.size() == 2 && value[0].is_string() && value[1].is_string(), w.at(key),
                  " must be two strings [start, end]");  // only ReasoningTemplate reads them
    } else if (key == "template_class") {
      const std::string c = json_string(value, w.at(key));
      TIDAL_CHECK(c == "Template" || c == "LFDefaultTemplate" || c == "Llama2Template", w.at(key), ": '", c,
                  "' is not a template class tidal renders (Template, LFDefaultTemplate, Llama2Template; the ",
                  "reasoning and DeepSeek-V4 classes rewrite the conversation in Python)");
      t.template_class = c == "LFDefaultTemplate" ? TemplateClass::lf_default
                         : c == "Llama2Template"  ? TemplateClass::llama2
                                                  : TemplateClass::base;
    } else {
      detail::throw_error(detail::str_cat(
          w.at(key), ": unknown field (a template has format_user, format_assistant, format_system, ",
          "format_function, format_observation, format_tools, format_separator, format_prefix, default_system, ",
          "stop_words, efficient_eos, replace_eos, force_system, template_class, thought_words)"));
    }
  }
  // MindSpeed's defaults: the observation formatter is the user one when not given.
  if (has_user && !has_observation) t.observation = t.user;
  (void)has_assistant;
  TIDAL_CHECK(!efficient_eos, w.at("efficient_eos"), ": true is not supported: LLaMA-Factory then labels each ",
              "reply's end with the next turn's first token (and appends an EOS), which tidal's segments cannot ",
              "express; write the end-of-turn text into format_assistant instead");
  TIDAL_CHECK(!t.replace_eos || !t.stop_words.empty(), w.at("replace_eos"), ": needs stop_words (the first ",
              "replaces the EOS token)");
  // The formatters' placeholders, as MindSpeed's formatters check them when built.
  for (const auto& [field, f] : {std::pair<const char*, const Formatter*>{"format_user", &t.user},
                                 {"format_assistant", &t.assistant},
                                 {"format_system", &t.system},
                                 {"format_observation", &t.observation}})
    TIDAL_CHECK(has_placeholder(*f), w.at(field), ": a placeholder such as {{content}} is required");
  for (const auto& [field, f] :
       {std::pair<const char*, const Formatter*>{"format_separator", &t.separator}, {"format_prefix", &t.prefix}})
    TIDAL_CHECK(!has_placeholder(*f), w.at(field), ": takes no placeholder");
  if (t.function_format == ToolFormat::qwen)
    TIDAL_CHECK(mentions(t.function, "{{content}}"), w.at("format_function"),
                ": the qwen tool format writes its <tool_call> blocks into {{content}}");
  else
    TIDAL_CHECK(mentions(t.function, "{{name}}") && mentions(t.function, "{{arguments}}"), w.at("format_function"),
                ": the {{name}} and {{arguments}} placeholders are required");
  return t;
}

}  // namespace tidal::data
