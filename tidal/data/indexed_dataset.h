#pragma once
// Megatron-LM's MMapIndexedDataset: PREFIX.bin holds token arrays back to back, PREFIX.idx describes
// them. The layout (little-endian), exactly as megatron/core/datasets/indexed_dataset.py writes it:
//   "MMIDIDX\x00\x00"   9-byte magic
//   u64 version = 1
//   u8  dtype code      1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16
//   u64 sequence count  N
//   u64 document count  D = documents + 1 (the document index starts with 0)
//   int32[N] sizes      tokens per sequence
//   int64[N] pointers   byte offset of each sequence in .bin
//   int64[D] doc_idx    sequence index where each document starts, then the sequence count
// (Multimodal files append int8[N] sequence modes; they are accepted and ignored.)
// The reader memory-maps .bin; a corrupted or mismatched pair throws tidal::Error naming the file.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace tidal::data {

enum class TokenDType : uint8_t { u8 = 1, i8 = 2, i16 = 3, i32 = 4, i64 = 5, f64 = 6, f32 = 7, u16 = 8 };

int64_t token_dtype_size(TokenDType t);
const char* token_dtype_name(TokenDType t);  // numpy's names: "uint16", "int32", ...
TokenDType parse_token_dtype(const std::string& name);
// Megatron's choice: uint16 below 65500 tokens, else int32.
TokenDType optimal_token_dtype(int64_t vocab_size);

class IndexedDatasetWriter {
 public:
  // Writes PREFIX.bin and PREFIX.idx; until finish() they are PREFIX.*.tmp (removed if abandoned).
  IndexedDatasetWriter(std::string prefix, TokenDType dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One sequence; a token that does not fit the dtype throws.
  void add_sequence(const int64_t* tokens, int64_t n);
  void add_sequence(const std::vector<int64_t>& tokens) { add_sequence(tokens.data(), int64_t(tokens.size())); }
  // Ends the current document (the sequences added since the last end).
  void end_document();
  void add_document(const std::vector<int64_t>& tokens) {
    add_sequence(tokens);
    end_document();
  }
  // Writes the index and renames both files into place.
  void finish();

  int64_t num_sequences() const { return int64_t(sizes_.size()); }
  int64_t num_documents() const { return int64_t(doc_idx_.size()) - 1; }
  int64_t num_tokens() const { return tokens_; }

 private:
  std::string prefix_;
  TokenDType dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> doc_idx_{0};
  std::vector<char> buffer_;
  int64_t tokens_ = 0;
  bool finished_ = false;
};

class IndexedDataset {
 public:
  explicit IndexedDataset(std::string prefix);
  ~IndexedDataset();
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  const std::string& prefix() const { return prefix_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_sequences() const { return int64_t(sizes_.size()); }
  int64_t num_documents() const { return int64_t(doc_idx_.size()) - 1; }
  int64_t num_tokens() const { return num_tokens_; }

  int64_t sequence_length(int64_t i) const;
  int64_t sequence_offset(int64_t i) const;  // in tokens from the start of .bin
  std::vector<int64_t> sequence(int64_t i) const;
  // Document d is sequences [document_begin(d), document_begin(d + 1)).
  int64_t document_begin(int64_t d) const;
  int64_t document_token_offset(int64_t d) const;  // first token of document d; d == num_documents(): the end
  std::vector<int64_t> document(int64_t d) const;  // its sequences' tokens, concatenated

  // Tokens [first, first + count) of .bin, converted to int64: sequences are back to back, so a range
  // of documents is one range of tokens.
  void read_tokens(int64_t first, int64_t count, int64_t* out) const;

  const std::vector<int32_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& pointers() const { return pointers_; }
  const std::vector<int64_t>& document_indices() const { return doc_idx_; }

 private:
  // The index's arrays from the .idx file's bytes, checked against each other; returns .bin's expected bytes.
  int64_t read_index(const std::string& idx, const std::string& where);
  // Memory-maps .bin, checked to hold exactly `expected` bytes.
  void map_bin(const std::string& bin_path, const std::string& idx_path, int64_t expected);

  std::string prefix_;
  TokenDType dtype_ = TokenDType::u16;
  std::vector<int32_t> sizes_;
  std::vector<int64_t> pointers_, doc_idx_;
  int64_t num_tokens_ = 0;
  const uint8_t* bin_ = nullptr;  // mmap of .bin
  size_t bin_bytes_ = 0;
};

}  // namespace tidal::data
