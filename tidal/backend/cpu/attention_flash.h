#pragma once
// FlashAttention-2 style fused attention on the CPU (Dao, 2023): the forward walks key tiles with an
// online softmax and keeps only the output and the per-row log-sum-exp; the backward recomputes the
// probabilities tile by tile. No (T, S) buffer exists beyond one tile per thread.
#include <cstdint>

#include "tidal/backend/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

// q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv), out (B, Hq, T, Dv): any strides, one dtype.
// lse (B, Hq, T) contiguous in the accumulate type (f32, or f64 for f64), or undefined when not
// needed; rows that see no key get out = 0 and lse = +inf.
// Scratch the kernels need, in elements of the accumulate type (f32, or f64 for f64): per-thread
// tile buffers, and for the backward the per-row rowsum(dO * O). The op layer allocates it (a 1-D
// tensor), on meta tensors too, so a planner run accounts for it like a real one.
int64_t flash_forward_workspace(const Tensor& q, const Tensor& k, const Tensor& v);
int64_t flash_backward_workspace(const Tensor& dq, const Tensor& q, const Tensor& k, const Tensor& v);

// The tile sizes: forward query rows x keys, backward query rows x keys (a cost model counts the
// products of whole tiles, masked entries included: backend/meta/cost_kernels.h).
struct FlashTiles {
  int64_t fwd_q, fwd_k, bwd_q, bwd_k;
};
FlashTiles flash_tiles();

void flash_attention_forward(const FlashArgs& cfg, const Tensor& out, const Tensor& lse, const Tensor& q,
                             const Tensor& k, const Tensor& v, const Tensor& workspace);

// Gradients of the forward above. dq/dk/dv have the shapes of q/k/v, any strides, the inputs' dtype;
// an undefined one is not computed. Parallel over (batch, kv head): each task owns the dk/dv rows of
// its kv head and the dq rows of the query heads that share it, so no two threads write one row.
void flash_attention_backward(const FlashArgs& cfg, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                              const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& workspace);

}  // namespace tidal::cpu
