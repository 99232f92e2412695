#pragma once
// DeepSeek-V4's heavily compressed attention (HCA) compressor (transformers' DeepseekV4HCACompressor, the whole
// sequence at once), with its names: each complete window of m' = compress_rates[heavily_compressed_attention]
// tokens becomes one entry
//   entry_w = kv_norm(sum_{j in window w} softmax_j(gate_proj(h_j) + position_bias[j - w m']) * kv_proj(h_j))
// (the softmax over the window's tokens, per channel), its trailing rotary channels rotated at position w m'
// (the compressed layers' RoPE). The attention then reads the sliding-window keys and these entries, entry w
// visible from query i once its window is complete: (w + 1) m' <= i + 1. Tokens after the last complete
// window make no entry.
#include "tidal/models/config.h"
#include "tidal/nn/layers.h"
#include "tidal/ops/rope.h"

namespace tidal::models {

struct CompressedEntries {
  Tensor kv;    // (B, 1, W, hd): the rotary channels de-interleaved, as the attention's keys are
  Tensor mask;  // the composed core's additive mask: HCA (T, W), CSA (B, 1, T, W); undefined for the flash core
  Tensor kept;  // CSA: (B, T, min(index_topk, W)) i32, the entries each query keeps, -1 in slots left empty
};

class HcaCompressor : public nn::Module {
 public:
  HcaCompressor(const ModelConfig& c, const nn::Init& init);
  // h (B, T, C) normalized, the compressed layers' RoPE tables (T, rope_dim) -> the entries (W = T / m' windows;
  // W 0: kv undefined) and, with `mask` (the composed core), their mask.
  CompressedEntries forward(const Tensor& h, const RopeTables& rope, const ModelConfig& c, bool mask) const;

 private:
  nn::Linear* kv_proj_;
  nn::Linear* gate_proj_;
  Tensor position_bias_;  // (m', hd)
  nn::RMSNorm* kv_norm_;
  int64_t rate_;
};

// The pieces CSA shares (models/deepseek_v4_sparse.h):
// kv_norm(sum over the window's slots of softmax(gate) * kv): kv, gate (B, W, L, D) -> (B, W, D).
Tensor pooled_entries(const Tensor& kv, const Tensor& gate, const nn::RMSNorm& kv_norm);
// CSA's overlapping windows: x (B, W, m, 2D) -> (B, W, 2m, D), window w's slots the first halves of window w - 1's
// tokens then the second halves of its own; window 0's first m slots `fill` (0 for values, -inf for gates).
Tensor overlapped(const Tensor& x, double fill);
// pooled (B, W, D) -> (B, 1, W, D) with entry w's trailing r channels rotated at position w m (de-interleaved).
Tensor rotated_entries(const Tensor& pooled, const RopeTables& rope, int64_t m, int64_t r);
// (T, W) additive: entry w visible from query i once its window is complete, (w + 1) m <= i + 1.
Tensor complete_windows_mask(int64_t t, int64_t w, int64_t m, DType dtype, const Device& device);

// x (B, T, N, hd) -> (B, N, T, hd) with its trailing r channels (interleaved pairs) de-interleaved and rotated.
Tensor rotate_tail(const Tensor& x, const RopeTables& rope, int64_t r);
// The interleaved layout again: (..., R) de-interleaved -> interleaved pairs.
Tensor interleave(const Tensor& x);

}  // namespace tidal::models
