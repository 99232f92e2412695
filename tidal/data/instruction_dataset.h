#pragma once
// Instruction data for training (`tidal train --is-instruction-dataset`, MindSpeed-LLM's): the pair
// PREFIX_packed_input_ids_document / PREFIX_packed_labels_document that `tidal prepare --handler-name` (or
// MindSpeed's preprocess_data.py) writes. A sample is one record, or one packed sequence: its tokens and labels
// truncated to seq_length + 1, or padded to it with the pad id and label -100 (the loss ignores -100). The
// records of a --split range are visited in a per-epoch order drawn from (seed, epoch), as GPTDataset's
// samples are, so stream sample i is a pure function of i and a loader's position resumes exactly.
#include <cstdint>
#include <memory>
#include <string>

#include "tidal/data/gpt_dataset.h"
#include "tidal/data/indexed_dataset.h"

namespace tidal::data {

struct InstructionFiles {
  std::shared_ptr<const IndexedDataset> input_ids, labels;  // one record per document, the same sizes
  // Neat packs only (--neat-pack): PREFIX_packed_attention_mask_document, each token's sample in its pack.
  std::shared_ptr<const IndexedDataset> attention_mask;
};

// Opens PREFIX_packed_input_ids_document and PREFIX_packed_labels_document (and, for `neat_pack`,
// PREFIX_packed_attention_mask_document) and checks them against each other (record counts and lengths, an
// integer token type, signed labels); each fault throws tidal::Error naming the file and what to do.
InstructionFiles open_instruction_files(const std::string& prefix, bool neat_pack = false);

class InstructionDataset : public TokenDataset {
 public:
  // `name` ("train", "valid") only labels errors; `pad_id` fills the tokens past a record's end.
  InstructionDataset(InstructionFiles files, DocumentRange records, int64_t seq_length, uint64_t seed, int64_t pad_id,
                     std::string name = "train");
  // The split'th range (0 train, 1 validation, 2 test) of split_documents(split, records).
  static std::shared_ptr<InstructionDataset> from_split(const InstructionFiles& files, const std::string& split,
                                                        int which, int64_t seq_length, uint64_t seed, int64_t pad_id);

  int64_t seq_length() const override { return seq_length_; }
  void sample(int64_t i, int64_t* out) const override;
  bool has_labels() const override { return true; }
  void sample_labels(int64_t i, int64_t* out) const override;
  bool has_pack_samples() const override { return files_.attention_mask != nullptr; }
  void sample_pack_samples(int64_t i, int64_t* out) const override;  // padded with 0, the padding's index
  int64_t sample_length(int64_t i) const override;
  std::pair<int64_t, int64_t> locate(int64_t i) const override;
  int64_t samples_per_epoch() const { return records_.size(); }

 private:
  // Record of stream sample i, read from `d` into out[0, seq_length + 1), padded with `pad`.
  void read(const IndexedDataset& d, int64_t i, int64_t pad, int64_t* out) const;

  InstructionFiles files_;
  DocumentRange records_;
  int64_t seq_length_, pad_id_;
  uint64_t seed_;
};

}  // namespace tidal::data
