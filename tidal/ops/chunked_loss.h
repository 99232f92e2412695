#pragma once
// Chunked LM loss: the LM head and the cross-entropy fused and run chunk by chunk along the tokens,
// so that the (tokens, V) logits never exist — at most one (chunk, V) block of them does. Each
// chunk's loss AND its gradients with respect to the hidden rows and the LM-head weight are computed
// in the forward pass (the logits' gradient is written over the chunk's logits in place); backward
// only scales the stored gradients by the incoming one. Megatron-LM / MindSpeed-LLM's
// `--loss-compute-mode chunk`. See Note [Chunked loss memory] in chunked_loss.cpp and docs/memory.md.
#include <cstdint>

#include "tidal/tensor.h"

namespace tidal {

// mean over non-ignored rows of cross_entropy(hidden @ weight^T, targets), as one op.
//   hidden (B, T, C) or (N, C); weight (V, C) (the LM head; the embedding when tied); targets (B, T)
//   or (N) class indices (i32/i64), ignore_index rows count for nothing; chunk_size >= 1 rows.
// Returns a 0-dim tensor in the accumulator's dtype (f32 for bf16, f64 for f64): the same value as the unchunked path
// (the sum of the row losses in row order over the global count of non-ignored rows), NaN when every row is ignored.
// f32 and f64 natively; bf16 runs in f32 (weight and hidden converted once), stores bf16 gradients.
// A second backward through the same graph (retain_graph) works only with an incoming gradient of 1:
// any other scales the stored gradients in place (no copy of a (V, C) gradient).
Tensor chunked_lm_loss(const Tensor& hidden, const Tensor& weight, const Tensor& targets, int64_t chunk_size,
                       int64_t ignore_index = -100);

}  // namespace tidal
