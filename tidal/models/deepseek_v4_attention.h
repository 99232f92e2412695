#pragma once
// DeepSeek-V4's sliding-window attention (transformers' DeepseekV4Attention for layer type sliding_attention),
// with its names:
//   q = rms(q_b_proj(q_a_norm(q_a_proj(h))))                 (B, T, H, hd)  rms: per head, without weight
//   kv = kv_norm(kv_proj(h))                                 (B, T, 1, hd)  one head, the keys and the values
//   the trailing rope_dim channels of q and kv rotated (interleaved pairs, rope_theta), attention of q over
//   kv with a learned sink logit per head (`sinks` (H): softmax over [scores, sink], the sink's share
//   dropped), within the causal window of sliding_window keys; the output's rotary channels rotated back
//   (by -position), then the grouped output projection: o_a_proj (o_groups x o_lora_rank,
//   H hd / o_groups) maps each group of heads on its own, o_b_proj mixes the groups to hidden.
// A heavily_compressed_attention layer adds its compressor's entries (models/deepseek_v4_compressor.h) after the
// window's keys, a compressed_sparse_attention layer those its indexer keeps for each query
// (models/deepseek_v4_sparse.h); their RoPE is the compressed layers' (compress_rope_theta).
// The core, two ways (--attention-kernel):
//  - flash (the default): the window's keys through the flash kernel (attention_with_lse: its output and its
//    log-sum-exp), HCA's entries through it too (compressed keys: AttentionOptions::key_rate), CSA's kept entries
//    read by index (ops/sparse_attention.h: no (B, T, k, hd) gather); one softmax over the two parts' log-sum-exps
//    and the sink weighs their outputs. Memory O(T) per head, whatever the length.
//  - eager: composed ops over every key, scores (B, H, T, T + W) kept, as transformers computes it.
// Interleaved pairs are de-interleaved for tidal's rotate_half RoPE and interleaved back after the inverse
// rotation, so the values' channels reach o_a_proj in transformers' order.
#include "tidal/models/config.h"
#include "tidal/models/deepseek_v4_compressor.h"
#include "tidal/models/deepseek_v4_sparse.h"
#include "tidal/nn/layers.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/rope.h"

namespace tidal::models {

class DeepseekV4Attention : public nn::Module {
 public:
  DeepseekV4Attention(const ModelConfig& c, int64_t layer, const nn::Init& init);
  // h (B, T, C) normalized, the layer's RoPE tables (T, rope_dim) and the window's additive mask (T, T) -> (B, T, C).
  // recompute_core: the core (scores, softmax with the sinks, @ values) under a checkpoint, keeping q and kv only.
  // recompute_compressed (--recompute-csa-attention), in an HCA or CSA layer: the compressor, CSA's indexer and the
  // core under one checkpoint, keeping h, q_residual, q and the window's kv only (sliding layers: no effect).
  // mask: the eager core's; undefined for flash.
  Tensor forward(const Tensor& h, const RopeTables& rope, const Tensor& mask, AttentionKernel kernel,
                 const ModelConfig& c, bool recompute_core = false, bool recompute_compressed = false) const;

 private:
  // x = {q (B, H, T, hd), the window's kv (B, 1, T, hd), sinks (H), [entries (B, 1, W, hd), [kept (B, T, k) i32]]}
  // -> (B, H, T, hd). composed: the window's mask (T, T) and the entries' (HCA (T, W), CSA (B, 1, T, W)).
  Tensor composed_core(const std::vector<Tensor>& x, const Tensor& mask, const Tensor& entries_mask) const;
  Tensor flash_core(const std::vector<Tensor>& x, const ModelConfig& c) const;

  nn::Linear* q_a_proj_;
  nn::RMSNorm* q_a_norm_;
  nn::Linear* q_b_proj_;
  nn::Linear* kv_proj_;
  nn::RMSNorm* kv_norm_;
  nn::Linear* o_a_proj_;  // (G R, H hd / G), applied per group
  nn::Linear* o_b_proj_;
  Tensor sinks_;                         // (H)
  HcaCompressor* compressor_ = nullptr;  // heavily_compressed_attention layers
  CsaCompressor* sparse_ = nullptr;      // compressed_sparse_attention layers (also named "compressor")
};

// The additive mask (T, T) of DeepSeek-V4's sliding layers: 0 where key j is visible from query i
// (j <= i and i - j < window), -inf elsewhere; on `device`.
Tensor sliding_window_mask(int64_t seq_len, int64_t window, DType dtype, const Device& device);

}  // namespace tidal::models
