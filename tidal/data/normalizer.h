#pragma once
// Text normalization before pre-tokenization: none (GPT-2) or NFC (Qwen2/Qwen3), as the "normalizer"
// of a tokenizer.json says. NFC follows UAX #15 with the tables of nfc_tables.h; a quick check skips
// text that cannot change (all of ASCII and Latin-1, most text of any script). Invalid UTF-8 bytes are
// left as they are and separate the runs around them.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tidal::data {

// NFC of `text`.
std::string nfc(std::string_view text);
// True when nfc(text) == text, decided without building it when possible.
bool is_nfc_quick(std::string_view text);

class Normalizer {
 public:
  // null, {"type": "NFC"} or a Sequence of those (nested at most kMaxSequenceDepth deep); anything else
  // throws tidal::Error naming `source` ("[tokenizer] t.json") and the field.
  static constexpr int kMaxSequenceDepth = 16;
  static Normalizer from_json(const nlohmann::json& j, std::string_view source = "[tokenizer]");
  bool is_identity() const { return !nfc_; }
  // The normalized text: `text` itself when nothing changes, else a view of `scratch`.
  std::string_view apply(std::string_view text, std::string& scratch) const;

 private:
  bool nfc_ = false;
};

}  // namespace tidal::data
