#pragma once
// Training samples from an indexed dataset, Megatron GPTDataset semantics simplified:
// the documents of a split are concatenated and cut into samples of seq_length + 1 tokens, sample k
// covering tokens [k * seq_length, (k + 1) * seq_length + 1) (consecutive samples share one token:
// the last target of one is the first input of the next). Each epoch visits every sample once in an
// order drawn from (seed, epoch). Sample i of the endless stream is a pure function of i, so a
// loader's position is one integer: save it, set it back, and the same batches follow.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tidal/data/indexed_dataset.h"
#include "tidal/tensor.h"

namespace tidal::data {

struct DocumentRange {
  int64_t begin = 0, end = 0;  // documents [begin, end)
  int64_t size() const { return end - begin; }
};

// Megatron's --split ("969,30,1", "98,2"): weights for train / validation / test, normalized, turned
// into contiguous document ranges with Megatron's rounding (missing weights are 0).
std::array<DocumentRange, 3> split_documents(const std::string& split, int64_t num_documents);

struct Sample {
  std::vector<int64_t> tokens;  // seq_length + 1 ids
  int64_t epoch = 0;
  int64_t index = 0;  // the sample's place in the unshuffled epoch
};

// What a loader draws from: sample i of an endless, deterministic stream.
class TokenDataset {
 public:
  virtual ~TokenDataset() = default;
  virtual int64_t seq_length() const = 0;
  // Writes the seq_length + 1 tokens of stream sample i (i >= 0) to out.
  virtual void sample(int64_t i, int64_t* out) const = 0;
  Sample get(int64_t i) const;
  // Stream sample i is (epoch, unshuffled index).
  virtual std::pair<int64_t, int64_t> locate(int64_t i) const = 0;
  // Instruction data (data/instruction_dataset.h) has labels beside the tokens: -100 where a token is not
  // trained. Writes the seq_length + 1 labels of stream sample i; a dataset without labels throws.
  virtual bool has_labels() const { return false; }
  virtual void sample_labels(int64_t i, int64_t* out) const;
  // A neat pack (MindSpeed-LLM's --neat-pack) says which sample each token belongs to: 1, 2, ... and 0 for the
  // padding. Writes the seq_length + 1 indices of stream sample i; a dataset without them throws.
  virtual bool has_pack_samples() const { return false; }
  virtual void sample_pack_samples(int64_t i, int64_t* out) const;
  // The tokens of sample i before padding (at most seq_length + 1): what --variable-seq-lengths pads a batch to.
  virtual int64_t sample_length(int64_t /*i*/) const { return seq_length() + 1; }
};

class GPTDataset : public TokenDataset {
 public:
  // `name` ("train", "valid", "test") only labels errors.
  GPTDataset(std::shared_ptr<const IndexedDataset> data, DocumentRange documents, int64_t seq_length, uint64_t seed,
             std::string name = "train");
  // The split'th range (0 train, 1 validation, 2 test) of split_documents(split, ...).
  static std::shared_ptr<GPTDataset> from_split(std::shared_ptr<const IndexedDataset> data, const std::string& split,
                                                int which, int64_t seq_length, uint64_t seed);

  int64_t seq_length() const override { return seq_length_; }
  void sample(int64_t i, int64_t* out) const override;
  std::pair<int64_t, int64_t> locate(int64_t i) const override;
  int64_t samples_per_epoch() const { return samples_; }
  int64_t num_tokens() const { return end_token_ - first_token_; }
  const DocumentRange& documents() const { return documents_; }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  DocumentRange documents_;
  int64_t seq_length_, first_token_ = 0, end_token_ = 0, samples_ = 0;
  uint64_t seed_;
};

// Megatron's --mock-data: seeded random ids in [0, vocab_size), a pure function of (seed, i).
class MockDataset : public TokenDataset {
 public:
  MockDataset(int64_t vocab_size, int64_t seq_length, uint64_t seed);
  int64_t seq_length() const override { return seq_length_; }
  void sample(int64_t i, int64_t* out) const override;
  std::pair<int64_t, int64_t> locate(int64_t i) const override { return {0, i}; }
  int64_t vocab_size() const { return vocab_size_; }

 private:
  int64_t vocab_size_, seq_length_;
  uint64_t seed_;
};

struct Batch {
  Tensor tokens;             // (B, T + 1) i64: inputs tokens[:, :-1], targets tokens[:, 1:]
  Tensor labels;             // (B, T + 1) i64 when the dataset has labels (targets labels[:, 1:], -100 ignored)
  Tensor pack_samples;       // (B, T + 1) i64 for neat packs: each token's sample in its pack (0: padding)
  int64_t first_sample = 0;  // stream index of row 0
};

// Batches of consecutive stream samples. position() is the next sample; set_position() resumes.
// With variable lengths (MindSpeed-LLM's --variable-seq-lengths) a batch is (B, T + 1) with T the longest
// sample's length - 1 rounded up to a multiple of `variable_multiple` (at most seq_length); else T is seq_length.
class DataLoader {
 public:
  explicit DataLoader(std::shared_ptr<const TokenDataset> dataset, int64_t position = 0, int64_t variable_multiple = 0);
  Batch next(int64_t batch_size);
  int64_t position() const { return position_; }
  void set_position(int64_t position);
  const TokenDataset& dataset() const { return *dataset_; }

 private:
  std::shared_ptr<const TokenDataset> dataset_;
  int64_t position_ = 0;
  int64_t variable_multiple_ = 0;  // 0: every batch seq_length + 1 wide
};

// A bijection of [0, n) drawn from (seed, epoch): a 4-round Feistel network on Philox with cycle
// walking, so no permutation table is ever stored.
int64_t shuffle_index(int64_t i, int64_t n, uint64_t seed, uint64_t epoch);

}  // namespace tidal::data
