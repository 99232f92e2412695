#pragma once
// Eager attention under context parallelism (docs/distributed.md, "Context parallel"), the
// all-gather way (Megatron's non-ring CP): every CP rank gathers the whole sequence's K and V, puts
// them in global order, and attends its own queries (its two chunks, ops/ring_attention.h's
// context_chunks) to them with the eager kernel. Chunk n of queries (global rows [n·L, (n+1)·L))
// sees keys [0, (n+1)·L) only, so each of the rank's two chunks is one eager call on that prefix of
// the keys, whose bottom-right causal mask is the mask by global positions: (2C+1)·L² scores a rank,
// the same on every rank, about half of (T/C)·T. With a sliding window W a chunk's call takes only
// the keys of its window, [n·L − W + 1, (n+1)·L), under the same bottom-right mask and window. Dropout
// draws what one call on the whole sequence draws (an AttentionDropoutFrame per chunk in the whole
// matrix's range). Backward is autograd's
// through the eager ops; the gather's own backward sums the gathered K/V's gradients back to their
// owners (a reduce-scatter in rank order over the chunk layout). Saved for backward, besides the
// eager kernel's probabilities (and dropout mask, dropped probabilities) of the two calls and the
// local q: the gathered K and V, (B, Hkv, T, D) each.
#include "tidal/dist/communicator.h"
#include "tidal/ops/attention.h"
#include "tidal/tensor.h"

namespace tidal {

// k (B, H, T_local, D), any strides, this rank's two chunks of every sequence -> (B, H, C·T_local, D)
// contiguous: every CP rank's chunks in global order. Differentiable: the gradient of the whole goes
// back to the ranks holding its chunks, summed over the ranks in rank order. A collective of `cp`
// (every rank calls it, forward and backward, in the same order); `cp` must outlive the backward.
Tensor context_all_gather(const Tensor& k, dist::Communicator& cp);

// q (B, Hq, T, D), k (B, Hkv, T, D), v (B, Hkv, T, Dv): this rank's two chunks, T = 2·chunk, as
// scaled_dot_product_attention takes them (GQA, any strides). Causal only (a sliding window too),
// with or without dropout
// (opt.dropout_p; no dropout_frame: it places the chunks itself); anything else is refused with a
// tidal::Error. Returns (B, Hq, T, Dv) contiguous, what eager attention of the whole sequence gives
// at this rank's rows. On one rank it is scaled_dot_product_attention with the eager kernel.
Tensor context_gather_attention(const Tensor& q, const Tensor& k, const Tensor& v, dist::Communicator& cp,
                                const AttentionOptions& opt = {});

}  // namespace tidal
