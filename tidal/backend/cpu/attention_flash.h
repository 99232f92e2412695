#pragma once
// FlashAttention-2 style fused attention on the CPU (Dao, 2023): the forward walks key tiles with an
// online softmax and keeps only the output and the per-row log-sum-exp; the backward recomputes the
// probabilities tile by tile. No (T, S) buffer exists beyond one tile per thread.
#include <cstdint>

#include "tidal/seam/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

// The tile sizes: forward query rows x keys, backward query rows x keys (a cost model counts the
// products of whole tiles, masked entries included: backend/meta/cost_kernels.cpp).
struct FlashTiles {
  int64_t fwd_q, fwd_k, bwd_q, bwd_k;
};
FlashTiles flash_tiles();

}  // namespace tidal::cpu
