#pragma once
// A decoder layer's attention as the layer drives it: first the projections that read the normalized input
// (a norm recompute frees that input once they have saved it), then the rest (the core attention, which a
// selective recompute may checkpoint, and the output projection). LlamaAttention (models/llama.h) and
// DeepSeek's multi-head latent attention (models/mla.h) implement it.
#include <vector>

#include "tidal/models/config.h"
#include "tidal/models/core_attention.h"
#include "tidal/models/layer_recompute.h"
#include "tidal/nn/module.h"
#include "tidal/ops/rope.h"

namespace tidal::models {

class AttentionBlock : public nn::Module {
 public:
  // h (B, T, C) normalized -> the projections of it the block keeps (their shapes are the block's own).
  virtual std::vector<Tensor> project(const Tensor& h, const ModelConfig& c) const = 0;
  // The rest -> (B, T, C), under the layer's recompute policies: rc.core_attn checkpoints the core attention
  // (eager kernel), rc.mla_up_proj MLA's up-projections.
  virtual Tensor attend(const std::vector<Tensor>& projected, const RopeTables& rope, const ModelConfig& c,
                        const CoreAttention& attn, bool training, const LayerRecompute& rc) const = 0;
};

// The core attention of q (B, H, T, D), k (B, Hkv, T, D), v (B, Hkv, T, Dv) under module `module`'s scope,
// checkpointed when `recompute_core` and the kernel is eager (flash keeps no (T, T) tensor to drop):
// (B, H, T, Dv).
Tensor run_core_attention(const std::vector<Tensor>& qkv, const AttentionOptions& opt, const CoreAttention& attn,
                          bool recompute_core, const char* module);

}  // namespace tidal::models
