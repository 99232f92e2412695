#pragma once
// DeepSeek's multi-head latent attention (transformers' DeepseekV3Attention), with its names:
//   q = q_b_proj(q_a_layernorm(q_a_proj(h)))   (q_lora_rank 0: q_proj(h))       (B, T, H, nope + rope)
//   [kv_latent | k_rot] = kv_a_proj_with_mqa(h)                                   (B, T, kv_lora_rank + rope)
//   [k_nope | v] = kv_b_proj(kv_a_layernorm(kv_latent))                           (B, T, H, nope + v_head_dim)
//   attention of q = [q_nope | rope(q_rot)] and k = [k_nope | rope(k_rot) shared by every head] over v,
//   then o_proj. rope_interleave: the rotary dims come in (x0, x1) pairs, de-interleaved to Llama's
//   rotate_half layout before the rotation (the same values as transformers' interleaved rotation).
// q_a_layernorm and kv_a_layernorm use eps 1e-6 whatever rms_norm_eps says, as transformers builds them.
#include "tidal/models/attention_block.h"
#include "tidal/nn/layers.h"

namespace tidal::models {

class MlaAttention : public AttentionBlock {
 public:
  MlaAttention(const ModelConfig& c, const nn::Init& init);
  // h (B, T, C) -> {q_a_proj(h) (B, T, q_lora_rank) or q_proj(h) (B, T, H * qk), kv_a_proj_with_mqa(h)}.
  std::vector<Tensor> project(const Tensor& h, const ModelConfig& c) const override;
  // rc.mla_up_proj (Megatron's --recompute-modules mla_up_proj): the up-projections and RoPE, from the
  // two down-projections' outputs to the queries, keys and values, keep nothing but those inputs; the
  // queries, keys and values are freed once the core attention saved them and computed again before
  // its backward.
  Tensor attend(const std::vector<Tensor>& projected, const RopeTables& rope, const ModelConfig& c,
                const CoreAttention& attn, bool training, const LayerRecompute& rc) const override;

 private:
  // {q_a_proj or q_proj output, kv_a_proj_with_mqa output} -> {query (B, H, T, qk), key (B, H, T, qk),
  // kv_b_proj's output (B, T, H, nope + v), whose last v_head_dim of each head are the values}: whole
  // storages, which the recompute refills in place.
  std::vector<Tensor> up(const std::vector<Tensor>& projected, const RopeTables& rope, const ModelConfig& c) const;

  nn::Linear* q_proj_ = nullptr;  // q_lora_rank 0
  nn::Linear* q_a_proj_ = nullptr;
  nn::RMSNorm* q_a_layernorm_ = nullptr;
  nn::Linear* q_b_proj_ = nullptr;
  nn::Linear* kv_a_proj_with_mqa_;
  nn::RMSNorm* kv_a_layernorm_;
  nn::Linear* kv_b_proj_;
  nn::Linear* o_proj_;
};

}  // namespace tidal::models
