#pragma once
// JSON Lines input (Megatron-LM's tools/preprocess_data.py --json-keys): one JSON object per line, each
// key's string one document of that key's dataset. Plain or gzip-compressed (a name ending in .gz), read
// a line at a time, so a file larger than memory streams.
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace tidal::data {

// What a line that is not a JSON object with a string under every key does: stop with an error naming
// the file, the line and what is wrong, or be skipped and counted.
enum class BadLine { fail, skip };

struct JsonlCounts {
  int64_t records = 0;  // lines handed on
  int64_t bad = 0;      // skipped as malformed (BadLine::skip)
  int64_t blank = 0;    // empty or whitespace-only lines, skipped
  // The first bad line, for the summary: "FILE:LINE: what".
  std::string first_bad;
};

// Whether `path` is read as JSON Lines: it ends in .jsonl, .json, .jsonl.gz or .json.gz.
bool is_json_lines(const std::string& path);

// Calls f(values) for each record of `path`, values[i] the string under keys[i]; counts into `counts`.
// Throws tidal::Error for a file that cannot be read (or a corrupt gzip stream) and, under
// BadLine::fail, for the first malformed line.
void for_each_json_record(const std::string& path, const std::vector<std::string>& keys, BadLine policy,
                          JsonlCounts& counts, const std::function<void(std::vector<std::string>&&)>& f);

// Calls f(record) for each line of `path` that is a JSON object; f returns "" when it took the record, else
// what is wrong with it ("no key 'output'"), which `policy` then treats as it treats a malformed line (the
// error or the count names the file and the line). Instruction data (Alpaca, ShareGPT) reads records this way.
void for_each_json_object(const std::string& path, BadLine policy, JsonlCounts& counts,
                          const std::function<std::string(const nlohmann::json&)>& f);

}  // namespace tidal::data
