#pragma once
// The loss of a causal LM in Megatron-LM / MindSpeed-LLM's two loss compute modes: `default`
// materializes the (B, T, V) logits (CausalLM::forward + causal_lm_loss); `chunk` runs
// forward_hidden and the fused chunked_lm_loss (tidal/ops/chunked_loss.h) over lm_head_weight(), so
// at most one (chunk, V) block of logits exists. Same value, same gradients (docs/memory.md,
// "Chunked loss"); the trainer and its evaluation call lm_loss.
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

}  // namespace tidal::memory
