#pragma once
// Byte-level BPE tokenizer (GPT-2, Qwen2/Qwen3 and other Hugging Face tokenizer.json files).
//
// encode: split the text on added tokens ("<|endoftext|>"), normalize each other segment (none or NFC),
// pre-tokenize it (pretokenizer.h), and BPE-merge each piece's bytes, lowest merge rank first, exactly
// as Hugging Face tokenizers' BPE model does. Pieces are cached, so running text costs one hash lookup
// per piece. decode: concatenate each token's bytes. Without a normalizer or add_prefix_space,
// decode(encode(s)) == s for every byte string s, invalid UTF-8 included (Hugging Face would have
// replaced invalid bytes with U+FFFD on decode; we keep them).
//
// A Tokenizer is immutable after load/train and safe to share between threads; copies share data.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tidal::data {

struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = true;
};

struct TrainOptions {
  int64_t vocab_size = 8192;  // 256 byte tokens + merges + special tokens
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
  int64_t min_frequency = 2;  // a pair seen fewer times is never merged (training may stop early)
};

struct TrainStats {
  int64_t bytes = 0, words = 0, unique_words = 0, merges = 0;
  double seconds = 0;
};

class Tokenizer {
 public:
  Tokenizer();
  ~Tokenizer();
  Tokenizer(const Tokenizer&);
  Tokenizer& operator=(const Tokenizer&);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Hugging Face tokenizer.json (model.type "BPE", byte-level). Throws tidal::Error naming the file
  // and the field for anything malformed or unsupported.
  static Tokenizer load(const std::string& path);
  static Tokenizer from_json_string(const std::string& text, const std::string& origin = "<string>");
  void save(const std::string& path) const;
  std::string to_json_string() const;

  // GPT-2-style byte-level BPE training on texts (train) or the contents of files (train_files).
  // Deterministic: ties between equally frequent pairs go to the smaller pair of token ids.
  static Tokenizer train(const std::vector<std::string>& texts, const TrainOptions& options,
                         TrainStats* stats = nullptr);
  static Tokenizer train_files(const std::vector<std::string>& paths, const TrainOptions& options,
                               TrainStats* stats = nullptr);
  static Tokenizer train(const std::vector<std::string>& texts, int64_t vocab_size,
                         const std::vector<std::string>& special_tokens = {"<|endoftext|>"});

  // Added tokens in the text become their ids (as Hugging Face does); encode_ordinary treats them
  // as plain text.
  std::vector<int64_t> encode(std::string_view text) const;
  std::vector<int64_t> encode_ordinary(std::string_view text) const;
  // Appends to `out` (no reallocation of a caller's buffer per call).
  void encode_into(std::string_view text, std::vector<int64_t>& out, bool allow_added = true) const;
  // Many texts at once, in parallel over the kernel threads (TIDAL_NUM_THREADS); out[i] = encode(texts[i]).
  std::vector<std::vector<int64_t>> encode_batch(const std::vector<std::string_view>& texts,
                                                 bool allow_added = true) const;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special = false) const;

  // 1 + the largest id (model vocabulary and added tokens): the embedding table's row count.
  int64_t vocab_size() const;
  int64_t num_merges() const;
  // The end-of-document id: the first of "<|endoftext|>" (GPT-2, Qwen, tidal's), "<|end_of_text|>"
  // (Llama 3), "</s>" (Llama 2, Mistral), "<eos>" (Gemma), "<｜end▁of▁sentence｜>" (DeepSeek-V3) the
  // tokenizer has; throws when it has none.
  int64_t eod_id() const;
  std::optional<int64_t> token_to_id(std::string_view token) const;  // vocabulary spelling
  std::string id_to_token(int64_t id) const;                         // "" for an unused id
  const std::vector<AddedToken>& added_tokens() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
  explicit Tokenizer(std::shared_ptr<const Impl> impl);
  friend struct TokenizerBuilder;
};

}  // namespace tidal::data
