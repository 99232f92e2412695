#pragma once
// Tool use in instruction data (LLaMA-Factory's ShareGPT format, which MindSpeed-LLM reads): a record's `tools`
// column (a JSON string: a list of function definitions), `function_call` turns (the assistant calling a tool:
// {"name": ..., "arguments": {...}}, or a list of them) and `observation` turns (the tool's answer, plain text).
// Rendered as LLaMA-Factory's formatters write them: the "default" tool format (ReAct-style "Action:" lines,
// MindSpeed's qwen/chatml templates) and the "qwen" format (<tools> / <tool_call> XML, Qwen2.5's
// chat_template). JSON inside the text is Python's json.dumps(ensure_ascii=False): key order kept, ", " and
// ": " separators, non-ASCII written as is.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tidal::data {

struct FunctionCall {
  std::string name;
  nlohmann::ordered_json arguments;  // as the record wrote it (key order kept)
};

// A function_call turn's content into `out`: "" when it is a JSON object with a string "name" (and
// "arguments", default {}), or a non-empty list of such objects; else what is wrong, for --on-bad-line.
std::string parse_function_calls(std::string_view content, std::vector<FunctionCall>& out);

// A record's tools text into `out`: "" when it is empty (no tools) or a JSON list of objects; else what is wrong.
std::string parse_tools(std::string_view text, std::vector<nlohmann::ordered_json>& out);

// Python's json.dumps(value, ensure_ascii=False) (and transformers' `tojson` filter).
std::string python_json(const nlohmann::ordered_json& value);

// LLaMA-Factory's default_tool_formatter: "You have access to the following tools:\n> Tool Name: ..." with
// each tool's parameters; a tool without a string "name" or a "parameters" object with "properties" throws
// tidal::Error naming it.
std::string default_tools_text(const std::vector<nlohmann::ordered_json>& tools);
// LLaMA-Factory's QwenToolUtils.tool_formatter (Qwen2.5's chat_template writes the same after the system text):
// "\n\n# Tools\n\n...<tools>\n{tool}...\n</tools>...". A tool that is not {"type": "function", ...} is wrapped
// as {"type": "function", "function": tool}.
std::string qwen_tools_text(const std::vector<nlohmann::ordered_json>& tools);

// The default format's {{name}} and {{arguments}} (LLaMA-Factory's FunctionFormatter: the name and the
// arguments as JSON) of a turn's one call; several calls throw tidal::Error (the format calls one per turn).
std::pair<std::string, std::string> name_and_arguments(const std::vector<FunctionCall>& calls);
// Qwen2.5's "<tool_call>\n{\"name\": \"NAME\", \"arguments\": ARGUMENTS}\n</tool_call>", joined by "\n".
std::string qwen_function_text(const std::vector<FunctionCall>& calls);

}  // namespace tidal::data
