#include "tidal/data/instruction_record.h"

#include <nlohmann/json.hpp>

#include "tidal/base/error.h"
#include "tidal/base/json.h"
#include "tidal/data/tool_calls.h"

namespace tidal::data {
namespace {

using json = nlohmann::json;

constexpr const char* kAlpaca = "AlpacaStyleInstructionHandler";
constexpr const char* kSharegpt = "SharegptStyleInstructionHandler";

// The string under `key` into `out`: "" when fine; `required` says whether a missing key is wrong (a missing
// optional key leaves `out` empty). `what` names the column for the message.
std::string string_at(const json& record, const std::string& key, const char* what, bool required, std::string& out) {
  out.clear();
  const auto it = record.find(key);
  if (it == record.end() || it->is_null())
    return required ? "no key '" + key + "' (the " + what + " column; --map-keys renames it)" : "";
  if (!it->is_string()) return "'" + key + "' is " + json_kind(*it) + ", not a string";
  out = it->get<std::string>();
  return "";
}

std::string alpaca(const json& record, const InstructionKeys& k, std::vector<ChatMessage>& out) {
  std::string prompt, query, response, system;
  for (std::string wrong :
       {string_at(record, k.prompt, "prompt", true, prompt), string_at(record, k.query, "query", false, query),
        string_at(record, k.response, "response", true, response)})
    if (!wrong.empty()) return wrong;
  if (!k.system.empty()) {
    if (std::string wrong = string_at(record, k.system, "system", false, system); !wrong.empty()) return wrong;
    if (!system.empty()) out.push_back({Role::system, system});
  }
  if (!k.history.empty()) {
    const auto it = record.find(k.history);
    if (it != record.end() && !it->is_null()) {
      if (!it->is_array()) return "'" + k.history + "' is " + json_kind(*it) + ", not a list of [query, response]";
      for (const json& pair : *it) {
        if (!pair.is_array() || pair.size() != 2 || !pair[0].is_string() || !pair[1].is_string())
          return "'" + k.history + "' holds " + json_kind(pair) + " where a [query, response] pair of strings belongs";
        out.push_back({Role::user, pair[0].get<std::string>()});
        out.push_back({Role::assistant, pair[1].get<std::string>()});
      }
    }
  }
  // LlamaFactory joins the non-empty prompt and query with a newline.
  std::string user = prompt;
  if (!query.empty()) user += (user.empty() ? "" : "\n") + query;
  out.push_back({Role::user, user});
  out.push_back({Role::assistant, response});
  return "";
}

std::string sharegpt(const json& record, const InstructionKeys& k, std::vector<ChatMessage>& out, std::string* tools) {
  const auto it = record.find(k.messages);
  if (it == record.end()) return "no key '" + k.messages + "' (the messages column; --map-keys renames it)";
  if (!it->is_array()) return "'" + k.messages + "' is " + json_kind(*it) + ", not a list of messages";
  std::string system;
  if (!k.system.empty())
    if (std::string wrong = string_at(record, k.system, "system", false, system); !wrong.empty()) return wrong;
  if (!k.tools.empty() && tools != nullptr) {
    if (std::string wrong = string_at(record, k.tools, "tools", false, *tools); !wrong.empty())
      return wrong + " (LLaMA-Factory's tools column is a string holding the functions' JSON list)";
    std::vector<nlohmann::ordered_json> parsed;
    if (std::string wrong = parse_tools(*tools, parsed); !wrong.empty()) return wrong;
  }
  size_t first = 0;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = "message " + std::to_string(i) + " of '" + k.messages + "'";
    if (!m.is_object()) return where + " is " + json_kind(m) + ", not an object";
    const auto role = m.find(k.role_tag), content = m.find(k.content_tag);
    if (role == m.end() || !role->is_string()) return where + " has no string '" + k.role_tag + "' (the role tag)";
    if (content == m.end() || !content->is_string())
      return where + " has no string '" + k.content_tag + "' (the content tag)";
    const std::string r = role->get<std::string>();
    if (i == 0 && r == k.system_tag) {
      system = content->get<std::string>();
      first = 1;
      continue;
    }
    const bool user_turn = (i - first) % 2 == 0;
    const std::string& want = user_turn ? k.user_tag : k.assistant_tag;
    const std::string& tool = user_turn ? k.observation_tag : k.function_tag;
    if (r != want && r != tool)
      return where + " is from '" + r + "' where '" + want + "' or '" + tool +
             "' belongs (turns alternate user and assistant, or observation and function_call, after an optional "
             "system message)";
    const Role turn =
        r == want ? (user_turn ? Role::user : Role::assistant) : (user_turn ? Role::observation : Role::function_call);
    if (turn == Role::function_call) {
      std::vector<FunctionCall> calls;
      if (std::string wrong = parse_function_calls(content->get<std::string>(), calls); !wrong.empty())
        return where + ": " + wrong;
    }
    out.push_back({turn, content->get<std::string>()});
  }
  if (out.empty() || (out.back().role != Role::assistant && out.back().role != Role::function_call))
    return "'" + k.messages + "' does not end with a reply from '" + k.assistant_tag + "' or '" + k.function_tag +
           "' (" + std::to_string(out.size()) + " turns after the system message)";
  if (!system.empty()) out.insert(out.begin(), {Role::system, system});
  return "";
}

}  // namespace

InstructionFormat parse_handler_name(std::string_view name) {
  if (name == kAlpaca) return InstructionFormat::alpaca;
  if (name == kSharegpt) return InstructionFormat::sharegpt;
  tidal::detail::throw_error(tidal::detail::str_cat(
      "[data] unknown --handler-name '", name, "': tidal prepares instruction data with ", kAlpaca, " or ", kSharegpt));
}

const char* handler_name(InstructionFormat format) { return format == InstructionFormat::alpaca ? kAlpaca : kSharegpt; }

InstructionKeys parse_map_keys(InstructionFormat format, std::string_view map_keys_json) {
  InstructionKeys k;
  k.format = format;
  if (map_keys_json.empty()) return k;
  const json j = parse_json(map_keys_json, "--map-keys");
  TIDAL_CHECK(j.is_object(), "--map-keys must be a JSON object such as '{\"prompt\": \"instruction\"}', found ",
              json_kind(j));
  const bool alpaca_format = format == InstructionFormat::alpaca;
  const char* columns = alpaca_format ? "prompt, query, response, history, system" : "messages, system, tools, tags";
  for (const auto& [name, value] : j.items()) {
    if (name == "tags" && !alpaca_format) {
      TIDAL_CHECK(value.is_object(), "--map-keys: 'tags' must be an object of tag names, found ", json_kind(value));
      for (const auto& [tag, spelled] : value.items()) {
        std::string* slot = tag == "role_tag"          ? &k.role_tag
                            : tag == "content_tag"     ? &k.content_tag
                            : tag == "user_tag"        ? &k.user_tag
                            : tag == "assistant_tag"   ? &k.assistant_tag
                            : tag == "observation_tag" ? &k.observation_tag
                            : tag == "function_tag"    ? &k.function_tag
                            : tag == "system_tag"      ? &k.system_tag
                                                       : nullptr;
        TIDAL_CHECK(slot != nullptr, "--map-keys: tag '", tag,
                    "' is not one tidal reads (role_tag, content_tag, user_tag, assistant_tag, observation_tag, ",
                    "function_tag, system_tag)");
        *slot = json_string(spelled, "--map-keys tags." + tag);
      }
      continue;
    }
    std::string* slot = nullptr;
    if (alpaca_format)
      slot = name == "prompt"     ? &k.prompt
             : name == "query"    ? &k.query
             : name == "response" ? &k.response
             : name == "history"  ? &k.history
             : name == "system"   ? &k.system
                                  : nullptr;
    else
      slot = name == "messages" ? &k.messages : name == "system" ? &k.system : name == "tools" ? &k.tools : nullptr;
    TIDAL_CHECK(slot != nullptr, "--map-keys: '", name, "' is not a column of ", handler_name(format), " (", columns,
                ")");
    *slot = json_string(value, "--map-keys " + name);
  }
  return k;
}

std::string conversation_of(const nlohmann::json& record, const InstructionKeys& keys, std::vector<ChatMessage>& out,
                            std::string* tools) {
  out.clear();
  if (tools != nullptr) tools->clear();
  std::string wrong =
      keys.format == InstructionFormat::alpaca ? alpaca(record, keys, out) : sharegpt(record, keys, out, tools);
  if (!wrong.empty()) {
    out.clear();
    if (tools != nullptr) tools->clear();
  }
  return wrong;
}

}  // namespace tidal::data
