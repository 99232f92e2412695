#pragma once
// Pre-tokenization: splitting text into the pieces BPE encodes one at a time, with the regexes of
// Hugging Face tokenizer.json files run verbatim by PCRE2 (UTF + UCP, JIT). Supported steps: ByteLevel
// (add_prefix_space, use_regex with GPT-2's pattern), Split (Regex or String pattern; behaviors
// Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous; invert), and Sequence of those.
//
// Invalid UTF-8 never reaches a regex: before the first regex step each invalid byte is split out as a
// piece of its own (byte-level BPE still encodes it), so any byte string pre-tokenizes and round-trips.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tidal::data {

// GPT-2's pre-tokenization pattern (Hugging Face ByteLevel with use_regex).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A compiled PCRE2 pattern (UTF + UCP). Safe to share between threads.
class Regex {
 public:
  // `literal`: match the pattern's text as is (tokenizer.json {"String": ...} patterns). A pattern that
  // does not compile throws naming `where` (errors never echo the pattern: it comes from a file).
  explicit Regex(const std::string& pattern, bool literal = false, std::string_view where = "[tokenizer] a regex");
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  const std::string& pattern() const { return pattern_; }
  // Calls f(begin, end) for each non-empty match in `text` (valid UTF-8), left to right.
  void for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& f) const;

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8
};

class PreTokenizer {
 public:
  enum class Behavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };
  struct Step {
    enum class Kind { split, byte_level } kind = Kind::split;
    std::shared_ptr<const Regex> regex;  // null for ByteLevel without use_regex
    Behavior behavior = Behavior::isolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel only
  };
  using Sink = std::function<void(std::string_view piece)>;

  // GPT-2's: ByteLevel(add_prefix_space=false, use_regex=true).
  static PreTokenizer gpt2();
  // The "pre_tokenizer" object of a tokenizer.json (at most kMaxSteps steps, Sequences nested at most
  // kMaxSequenceDepth deep). Throws tidal::Error naming `source` ("[tokenizer] t.json") and the field
  // for steps not supported.
  static constexpr int kMaxSteps = 64;
  static constexpr int kMaxSequenceDepth = 16;
  static PreTokenizer from_json(const nlohmann::json& j, std::string_view source = "[tokenizer]");
  nlohmann::json to_json() const;

  // Calls sink for every piece of `text` (a segment free of added tokens), in order. Concatenated,
  // the pieces are `text` (plus any prefix spaces, less what a Removed behavior drops). A piece longer
  // than kMaxPieceBytes comes in chunks of at most that many bytes, cut at UTF-8 character boundaries
  // (Note [Bounded pieces]).
  static constexpr size_t kMaxPieceBytes = size_t(1) << 16;
  void split(std::string_view text, const Sink& sink) const;

  bool has_byte_level() const;
  const std::vector<Step>& steps() const { return steps_; }

 private:
  void run(size_t step, std::string_view piece, int flags, const Sink& sink) const;
  std::vector<Step> steps_;
};

}  // namespace tidal::data
