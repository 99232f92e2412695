#pragma once
// A micro-batch as a rank trains on it: its inputs and labels (this rank's tokens under context
// parallelism) and, for packed sequences, the document layout that Megatron-LM's
// --reset-position-ids, --reset-attention-mask and --eod-mask-loss derive from the EOD tokens, or for neat
// packs (MindSpeed-LLM's --neat-pack) from each token's sample index (ops/documents.h; docs/training.md,
// "Packed sequences").
#include <cstdint>

#include "tidal/device.h"
#include "tidal/ops/documents.h"
#include "tidal/tensor.h"

namespace tidal::train {

struct PackedSequences {
  bool reset_position_ids = false;    // positions restart after each EOD (RoPE, learned positions)
  bool reset_attention_mask = false;  // attention never crosses an EOD
  bool eod_mask_loss = false;         // no loss where the input token is EOD (its target opens the next document)
  bool neat_pack = false;             // the documents are the batch's pack_samples runs, not EOD-separated
  bool any() const { return reset_position_ids || reset_attention_mask || eod_mask_loss; }
};

struct RankBatch {
  Tensor inputs, labels;  // (B, T_local) i64 on the run's device; labels -100 where the loss is masked
  DocumentLayout docs;    // (B, T_local) i32 on the run's device, each undefined unless its flag is on
  int64_t targets = 0;    // this rank's labels that are not -100 (parallel::loss_share)
  // The whole (B, T + 1) batch on the device, kept while the batch lives: on a CPU run it is the loader's
  // own tensor, so a dry run (meta) must hold its copy as long to allocate what the real run does.
  Tensor tokens;
};

// tokens (B, T + 1) i64 on the host: inputs tokens[:, :-1], labels tokens[:, 1:], this rank's two
// chunks of each under context parallelism (cp_size > 1), moved to `device`. eod: the tokenizer's
// end-of-document id (read only when packing.any()). pack_samples (B, T + 1) i64 on the host: each token's
// sample in its neat pack (data::Batch::pack_samples), which packing.neat_pack needs.
RankBatch rank_batch(const Tensor& tokens, const PackedSequences& packing, int64_t eod, int cp_size, int cp_rank,
                     Device device, const Tensor& pack_samples = {});

}  // namespace tidal::train
