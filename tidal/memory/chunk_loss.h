#pragma once
// The loss of a causal LM in Megatron-LM / MindSpeed-LLM's two loss compute modes: `default`
// materializes the (B, T, V) logits (as CausalLM::forward + causal_lm_loss do); `chunk` runs
// forward_hidden and the fused chunked_lm_loss (tidal/ops/chunked_loss.h) over lm_head_weight(), so
// at most one (chunk, V) block of logits exists. Same value, same gradients (docs/memory.md,
// "Chunked loss"); the trainer and its evaluation call lm_loss.
#include <vector>

#include "tidal/memory/memory_config.h"
#include "tidal/ops/documents.h"
#include "tidal/tensor.h"

namespace tidal::models {
class CausalLM;
}

namespace tidal::memory {

// Mean next-token cross-entropy of ids (B, T) against targets (B, T) (ignore_index -100), plus
// aux_coef * the MoE auxiliary loss when the model makes one. docs: packed sequences (CausalLM::forward_hidden).
Tensor lm_loss(const models::CausalLM& model, const Tensor& ids, const Tensor& targets, const LossComputeConfig& c,
               double aux_coef, const DocumentLayout& docs = {});

// Multi-token prediction's inputs for one micro-batch (models/mtp.h; train/mtp_batch.h makes them).
struct MtpInputs {
  std::vector<Tensor> ids;      // depth k: the ids rolled left by k, (B, T) i64 (0 rolled in)
  std::vector<Tensor> targets;  // depth k: the targets rolled left by k, (B, T) i64 (-100 rolled in)
  // depth k: this rank's share of the depth's mean over the micro-batch: its trained targets over all of the
  // micro-batch's (context parallelism splits them), 0 where it has none (then one target is 0, so that its
  // local mean stays finite).
  std::vector<double> weights;
  bool empty() const { return ids.empty(); }
};

struct LmLosses {
  Tensor loss;                     // lm_loss's: the main next-token loss (+ aux_coef x the MoE auxiliary loss)
  Tensor mtp;                      // sum over the depths of weight_k x CE_k (0-dim); undefined without MTP
  std::vector<Tensor> mtp_depths;  // CE_k, depth k's mean cross-entropy on this rank (0-dim), for the log
};
// lm_loss and, with `mtp`, the multi-token-prediction depths' losses through the same shared LM head in the same
// loss compute mode (Megatron-LM's MTP: each depth's mean cross-entropy against its rolled targets).
LmLosses lm_losses(const models::CausalLM& model, const Tensor& ids, const Tensor& targets, const LossComputeConfig& c,
                   double aux_coef, const DocumentLayout& docs, const MtpInputs& mtp);

}  // namespace tidal::memory
