#pragma once
// Helpers shared by the data tests: corpus files, a scratch directory, and a hand-built tokenizer.json.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tidal/data/byte_level.h"

namespace tidal::data::testing {

// /work/shared/data/tinyshakespeare.txt, or $TIDAL_DATA_DIR/tinyshakespeare.txt, or shared/ beside the
// checkout; "" when none exists (tests that need it then skip).
inline std::string tinyshakespeare_path() {
  std::vector<std::string> dirs;
  if (const char* d = std::getenv("TIDAL_DATA_DIR")) dirs.push_back(d);
  dirs.push_back(std::string(TIDAL_SOURCE_DIR) + "/../shared/data");
  dirs.push_back("/work/shared/data");
  for (const std::string& d : dirs)
    if (std::filesystem::exists(d + "/tinyshakespeare.txt")) return d + "/tinyshakespeare.txt";
  return "";
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A fresh directory under the build tree for one test.
inline std::string scratch_dir(const std::string& name) {
  const std::string dir = std::string(TIDAL_BINARY_DIR) + "/test_scratch/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// JSON string literal of s (s is valid UTF-8 here).
inline std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A tokenizer.json with the 256 byte tokens in GPT-2's order (ids 0..255), then one token per merge
// (ids 256..), then the added tokens. `pre_tokenizer` and `normalizer` are JSON text; `pair_merges`
// writes merges as ["a", "b"] instead of "a b".
inline std::string make_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges,
                                       const std::vector<std::string>& added, const std::string& pre_tokenizer,
                                       const std::string& normalizer = "null", bool pair_merges = false) {
  std::vector<std::string> spell;
  for (int i = 0; i < 256; ++i) spell.push_back(byte_to_symbol(byte_rank_order()[i]));
  std::string vocab, merges_json;
  for (const auto& [a, b] : merges) {
    spell.push_back(a + b);
    merges_json += std::string(merges_json.empty() ? "" : ", ") +
                   (pair_merges ? "[" + quote(a) + ", " + quote(b) + "]" : quote(a + " " + b));
  }
  std::string added_json;
  for (size_t k = 0; k < added.size(); ++k) {
    const size_t id = spell.size();
    spell.push_back(added[k]);
    added_json += std::string(added_json.empty() ? "" : ", ") + "{\"id\": " + std::to_string(id) +
                  ", \"content\": " + quote(added[k]) +
                  ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
                  "\"special\": true}";
  }
  for (size_t id = 0; id < spell.size(); ++id)
    vocab += std::string(vocab.empty() ? "" : ", ") + quote(spell[id]) + ": " + std::to_string(id);
  return "{\"version\": \"1.0\", \"added_tokens\": [" + added_json + "], \"normalizer\": " + normalizer +
         ", \"pre_tokenizer\": " + pre_tokenizer +
         ", \"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", "
         "\"dropout\": null, \"unk_token\": null, \"vocab\": {" +
         vocab + "}, \"merges\": [" + merges_json + "]}}";
}

inline const char* kGpt2PreTokenizer =
    R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true})";
// Qwen2 / Qwen3's pre_tokenizer, verbatim.
inline const char* kQwenPreTokenizer =
    R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})";

}  // namespace tidal::data::testing
