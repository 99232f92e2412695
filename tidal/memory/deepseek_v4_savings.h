#pragma once
// What DeepSeek-V4's own recompute flags take off the activations a layer keeps from forward to backward, as
// formulas (docs/memory.md, "DeepSeek-V4 layer"): --recompute-csa-attention and --mhc-recompute. The out-of-memory
// advice quotes them beside the estimator's peak; tests/models/deepseek_v4_recompute_bytes_test.cpp checks them
// against the allocator to the byte, tests/models/estimator_deepseek_v4_test.cpp against the estimator's per-layer
// items (memory/estimator_deepseek_v4.h). Bytes; `dtype` is the activations' (f32, or bf16 under --bf16),
// the norms' statistics are f32 and CSA's kept choice i32 whatever it is.
#include <cstdint>
#include <vector>

#include "tidal/dtype.h"
#include "tidal/models/config.h"
#include "tidal/models/layer_recompute.h"
#include "tidal/ops/attention.h"

namespace tidal::memory {

// --recompute-csa-attention in compressed layer `layer` (0 for a sliding layer), micro-batch b x s tokens: with W
// entries of l slots each (CSA: W = s / m, l = 2m; HCA: W = s / m', l = m'), H heads of width d, k =
// min(index_topk, W) and p = dtype bytes, a = the statistics' (4; 8 for f64), the compressor's softmax and pooled
// values, the entries' norm input and statistics, p b W d (2 l + 1) + 4 b W, and the core's:
//   eager: p (b W d + b H s (s + W + 1)): the keys with the entries (less the window's, which stay as the
//     checkpoint's input) and the probabilities with the sink;
//   flash: the window's output and log-sum-exp, p b s H d + a b s H; with entries (W > 0) their keys, output and
//     log-sum-exp, p b W d + p b s H d + a b s H, and for HCA its u8 mask of rows without entries, b s H; the merge
//     weights over P = 2 parts (the window, the sink; 3 with entries), a b s H P (+ p b s H P under bf16, their
//     cast) (CSA's kept indices stay: the sparse attention saves them without the flag, the checkpoint with it);
//   eager, for CSA, less its kept choice (its indices) staying instead: - 4 b s k.
int64_t csa_attention_saving(const models::ModelConfig& c, int64_t layer, int64_t batch, int64_t seq, DType dtype,
                             AttentionKernel kernel);

// --mhc-recompute in any layer, micro-batch b x s tokens, N = hc_mult streams of width C:
//   2 (p b s (N C + 3 N^2 + 5 N) + 4 b s) + p b s N C
// each of the two pre mappings' norm output and statistics, the projection's output (2 + N) N, two sigmoids, the
// softmax and Sinkhorn's input N^2 each and the pre weights; and the mid-layer streams (B, T, N, C).
int64_t mhc_saving(const models::ModelConfig& c, int64_t batch, int64_t seq, DType dtype);

// The sum over a recompute plan's layers (their csa_attention and mhc).
int64_t deepseek_v4_recompute_saving(const models::ModelConfig& c, const std::vector<models::LayerRecompute>& plan,
                                     int64_t batch, int64_t seq, DType dtype, AttentionKernel kernel);

}  // namespace tidal::memory
