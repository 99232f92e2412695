#pragma once
// Attention of every query over the keys kept for it (DeepSeek-V4's compressed sparse attention: each query's top-k
// compressed entries, models/deepseek_v4_sparse.h). No (B, T, k, D) gather of the kept keys is made or kept: the
// kernel reads them by index, and backward recomputes the probabilities from q, the keys and the saved log-sum-exp.
#include "tidal/ops/attention.h"

namespace tidal {

// q (B, Hq, T, D), keys (B, Hkv, W, D), values (B, Hkv, W, Dv) with Hq % Hkv == 0 (any strides; keys and values may
// be one tensor), kept (B, T, k) i32 on q's device: the keys query row (b, i) attends to among its sample's W, -1
// in an empty slot. scale 0: 1/sqrt(D). Returns attention_with_lse's pair:
//   out (B, Hq, T, Dv) in (B, T, Hq, Dv) memory order, lse (B, Hq, T) in f32 (f64 for f64),
// -inf (and out 0) for a row with no key kept, both differentiable. Saves q, keys, values, kept, out and lse.
// A kept index outside [-1, W) is refused by value and position.
AttentionWithLse sparse_attention_with_lse(const Tensor& q, const Tensor& keys, const Tensor& values,
                                           const Tensor& kept, double scale = 0);

}  // namespace tidal
