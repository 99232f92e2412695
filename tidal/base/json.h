#pragma once
// JSON from files we did not write (config.json, tokenizer.json, safetensors headers, checkpoint
// state): parsed with a nesting limit, read field by field with errors that name the file and the
// field and never echo the file's contents (a shard path pointing at /etc/passwd must not print it).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tidal {

// Documents nested deeper than this are refused before parsing: every recursive walk over a parsed
// value (serializing, comparing, our own readers) then stays far from the stack's end.
inline constexpr int kMaxJsonDepth = 512;

// Parses `text`; `source` names it in errors ("[config] models/x/config.json"). A syntax error
// reports the byte offset, a document nested deeper than kMaxJsonDepth says so.
nlohmann::json parse_json(std::string_view text, std::string_view source);

// What a value is, for messages: "a string", "an object", "an array", "a number", ... never its text.
std::string json_kind(const nlohmann::json& v);

// `v` as T, or an Error "<where> must be <T>, found <kind>". Integers must be whole numbers that fit
// in int64 (a float or 2^64-1 is refused, not wrapped). `where` names file and field.
int64_t json_int(const nlohmann::json& v, std::string_view where);
double json_number(const nlohmann::json& v, std::string_view where);
bool json_bool(const nlohmann::json& v, std::string_view where);
std::string json_string(const nlohmann::json& v, std::string_view where);
std::vector<int64_t> json_int_array(const nlohmann::json& v, std::string_view where, size_t max_size);

// An object's field: absent or null → nullptr; `obj` not an object → Error naming `where`.
const nlohmann::json* json_find(const nlohmann::json& obj, std::string_view key, std::string_view where);

}  // namespace tidal
