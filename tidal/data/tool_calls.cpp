#include "tidal/data/tool_calls.h"

#include <cstdio>

#include "tidal/base/error.h"
#include "tidal/base/json.h"

namespace tidal::data {
namespace {

using ojson = nlohmann::ordered_json;

// Parses `text` into an order-keeping document: tidal's parser first (nesting limit, a syntax error's
// offset), then nlohmann's ordered one on text known to be good. "" when fine, else what is wrong.
std::string parse_ordered(std::string_view text, const char* what, ojson& out) {
  try {
    (void)parse_json(text, what);
  } catch (const Error& e) {
    return e.what();
  }
  out = ojson::parse(text);
  return "";
}

std::string_view kind_of(const ojson& v) {
  return v.is_object() ? "an object" : v.is_array() ? "a list" : v.is_string() ? "a string" : "a scalar";
}

// str(value) of a Python value LLaMA-Factory formats into its tool prompt: a string as is; anything else
// refused (Python would print its repr, which tidal does not reproduce).
std::string field_text(const ojson& v, const std::string& where) {
  TIDAL_CHECK(v.is_string(), "[tools] ", where, " is ", kind_of(v), ", not a string");
  return v.get<std::string>();
}

const char* kToolSystemPrompt = "You have access to the following tools:\n";

}  // namespace

std::string parse_function_calls(std::string_view content, std::vector<FunctionCall>& out) {
  out.clear();
  ojson j;
  if (std::string wrong = parse_ordered(content, "a function_call turn", j); !wrong.empty())
    return "a function_call turn is not JSON {\"name\": ..., \"arguments\": {...}}: " + wrong;
  const bool list = j.is_array();
  if (list && j.empty()) return "a function_call turn holds an empty list of calls";
  for (const ojson& call : list ? j : ojson::array({j})) {
    if (!call.is_object() || !call.contains("name") || !call["name"].is_string())
      return "a function_call turn holds " + std::string(kind_of(call)) +
             " where {\"name\": string, \"arguments\": {...}} belongs";
    out.push_back({call["name"].get<std::string>(), call.value("arguments", ojson::object())});
  }
  return "";
}

std::string parse_tools(std::string_view text, std::vector<ojson>& out) {
  out.clear();
  if (text.empty()) return "";
  ojson j;
  if (std::string wrong = parse_ordered(text, "the tools column", j); !wrong.empty())
    return "the tools column is not a JSON list of functions: " + wrong;
  if (!j.is_array()) return "the tools column holds " + std::string(kind_of(j)) + ", not a list of functions";
  for (const ojson& tool : j) {
    if (!tool.is_object()) return "the tools column holds " + std::string(kind_of(tool)) + " where a function belongs";
    out.push_back(tool);
  }
  return "";
}

std::string python_json(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::object: {
      std::string s = "{";
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) s += ", ";
        first = false;
        s += python_json(ojson(k));
        s += ": ";
        s += python_json(x);
      }
      return s + "}";
    }
    case ojson::value_t::array: {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) s += ", ";
        s += python_json(v[i]);
      }
      return s + "]";
    }
    case ojson::value_t::string: {
      // json.dumps(ensure_ascii=False): only '"', '\\' and the control characters are escaped.
      std::string s = "\"";
      for (const char c : v.get_ref<const std::string&>()) {
        switch (c) {
          case '"': s += "\\\""; break;
          case '\\': s += "\\\\"; break;
          case '\n': s += "\\n"; break;
          case '\r': s += "\\r"; break;
          case '\t': s += "\\t"; break;
          case '\b': s += "\\b"; break;
          case '\f': s += "\\f"; break;
          default:
            if (static_cast<unsigned char>(c) < 0x20) {
              char buf[8];
              std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
              s += buf;
            } else {
              s += c;
            }
        }
      }
      return s + "\"";
    }
    case ojson::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case ojson::value_t::null: return "null";
    default: return v.dump();  // numbers: integers exactly; floats as the shortest round trip
  }
}

std::string default_tools_text(const std::vector<ojson>& tools) {
  std::string tool_text, names;
  for (size_t t = 0; t < tools.size(); ++t) {
    const ojson& tool = tools[t];
    const std::string where = "tool " + std::to_string(t);
    TIDAL_CHECK(tool.contains("name"), "[tools] ", where, " has no \"name\"");
    const std::string name = field_text(tool["name"], where + "'s name");
    TIDAL_CHECK(tool.contains("parameters") && tool["parameters"].is_object() &&
                    tool["parameters"].contains("properties") && tool["parameters"]["properties"].is_object(),
                "[tools] ", where, " (", name, ") has no \"parameters\": {\"properties\": {...}} object, which ",
                "the default tool format lists");
    const ojson& parameters = tool["parameters"];
    const ojson required = parameters.value("required", ojson::array());
    std::string params;
    for (const auto& [pname, param] : parameters["properties"].items()) {
      const std::string pwhere = where + "'s parameter " + pname;
      TIDAL_CHECK(param.is_object(), "[tools] ", pwhere, " is ", kind_of(param), ", not an object");
      bool is_required = false;
      for (const ojson& r : required) is_required = is_required || (r.is_string() && r.get<std::string>() == pname);
      // "  - {name} ({type}{required}): {desc}{enum}{items}\n"
      params += "  - ";
      params += pname;
      params += " (";
      if (param.contains("type")) params += field_text(param["type"], pwhere + "'s type");
      if (is_required) params += ", required";
      params += "): ";
      if (param.contains("description")) params += field_text(param["description"], pwhere + "'s description");
      if (param.contains("enum") && !param["enum"].empty() && !param["enum"].is_null()) {
        TIDAL_CHECK(param["enum"].is_array(), "[tools] ", pwhere, "'s enum is ", kind_of(param["enum"]),
                    ", not a list");
        params += ", should be one of [";
        for (size_t i = 0; i < param["enum"].size(); ++i) {
          if (i > 0) params += ", ";
          params += field_text(param["enum"][i], pwhere + "'s enum value");
        }
        params += "]";
      }
      if (param.contains("items") && !param["items"].empty() && !param["items"].is_null()) {
        const ojson& it = param["items"];
        TIDAL_CHECK(it.is_object(), "[tools] ", pwhere, "'s items is ", kind_of(it), ", not an object");
        params += ", where each item should be ";
        if (it.contains("type")) params += field_text(it["type"], pwhere + "'s items type");
      }
      params += '\n';
    }
    // "> Tool Name: {name}\nTool Description: {desc}\nTool Args:\n{args}\n"
    tool_text += "> Tool Name: ";
    tool_text += name;
    tool_text += "\nTool Description: ";
    if (tool.contains("description")) tool_text += field_text(tool["description"], where + "'s description");
    tool_text += "\nTool Args:\n";
    tool_text += params;
    tool_text += '\n';
    if (t > 0) names += ", ";
    names += name;
  }
  std::string text = kToolSystemPrompt;
  text += tool_text;
  text += "Use the following format if using a tool:\n```\nAction: tool name (one of [";
  text += names;
  text +=
      "]).\nAction Input: the input to the tool, in a JSON format representing the kwargs (e.g. ```{\"input\": "
      "\"hello world\", \"num_beams\": 5}```).\n```\n";
  return text;
}

std::string qwen_tools_text(const std::vector<ojson>& tools) {
  std::string text =
      "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
      "with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const ojson& tool : tools) {
    const bool wrapped = tool.contains("type") && tool["type"] == "function";
    text += '\n';
    text += python_json(wrapped ? tool : ojson{{"type", "function"}, {"function", tool}});
  }
  text +=
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call>";
  return text;
}

std::pair<std::string, std::string> name_and_arguments(const std::vector<FunctionCall>& calls) {
  TIDAL_CHECK(calls.size() == 1, "[tools] a function_call turn holds ", calls.size(), " calls; this template's ",
              "function format writes one per turn (the qwen tool format writes several)");
  return {calls[0].name, python_json(calls[0].arguments)};
}

std::string qwen_function_text(const std::vector<FunctionCall>& calls) {
  std::string text;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) text += '\n';
    text += "<tool_call>\n{\"name\": \"";
    text += calls[i].name;
    text += "\", \"arguments\": ";
    text += python_json(calls[i].arguments);
    text += "}\n</tool_call>";
  }
  return text;
}

}  // namespace tidal::data
