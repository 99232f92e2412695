#pragma once
// Instruction records (MindSpeed-LLM's --handler-name, LlamaFactory's formats) as conversations:
// AlpacaStyleInstructionHandler reads {instruction, input, output} (+ history [[q, a], ...] and system when
// --map-keys names them), SharegptStyleInstructionHandler reads {conversations: [{from, value}, ...]} (+ a
// system and tools keys when mapped). --map-keys renames the columns with MindSpeed's names: for Alpaca prompt,
// query, response, history, system; for ShareGPT messages, system, tools and tags ({"role_tag": "role",
// "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant", "observation_tag": "observation",
// "function_tag": "function_call", "system_tag": "system"}).
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tidal/data/chat_template.h"

namespace tidal::data {

enum class InstructionFormat { alpaca, sharegpt };

// "AlpacaStyleInstructionHandler" or "SharegptStyleInstructionHandler"; anything else throws naming both.
InstructionFormat parse_handler_name(std::string_view name);
const char* handler_name(InstructionFormat format);

// Which record keys hold what (LlamaFactory's InstructionDatasetAttr defaults; empty: not read).
struct InstructionKeys {
  InstructionFormat format = InstructionFormat::alpaca;
  std::string prompt = "instruction", query = "input", response = "output", history, system;  // alpaca
  std::string messages = "conversations", tools;                                              // sharegpt
  std::string role_tag = "from", content_tag = "value", user_tag = "human", assistant_tag = "gpt",
              observation_tag = "observation", function_tag = "function_call", system_tag = "system";
};

// The defaults of `format` with --map-keys (a JSON object) applied; a key that is not one of the format's
// columns, or a value that is not a string, throws tidal::Error naming it and the valid names.
InstructionKeys parse_map_keys(InstructionFormat format, std::string_view map_keys_json);

// The conversation of one record into `out`: "" when the record is usable, else what is wrong with it ("no key
// 'output' (the response column; --map-keys)") for --on-bad-line to report or skip. Alpaca: the history's
// pairs, then one user turn of the prompt and the query joined by a newline (an empty or missing query adds
// nothing), then the response; a non-empty system value is the system message. ShareGPT: a first message
// from system_tag is the system message (else the system key's value, when mapped); the rest alternate
// user_tag (or observation_tag) and assistant_tag (or function_tag), ending with a reply, as LLaMA-Factory's
// converter checks them; a function_call's content must be a call's JSON. `tools` (when not null) gets the
// record's tools text (the mapped tools key: a JSON string of functions, checked), "" when none.
std::string conversation_of(const nlohmann::json& record, const InstructionKeys& keys, std::vector<ChatMessage>& out,
                            std::string* tools = nullptr);

}  // namespace tidal::data
