#pragma once
// CPU kernels of the eager attention path: the fused scale + causal mask + softmax over scores that
// the eager path materializes (Megatron's FusedScaleMaskSoftmax). Both attention kernels take their
// exp from vec_math.h, so eager and flash round alike.
#include <bit>
#include <cmath>
#include <cstdint>

#include "tidal/backend/cpu/vec_math.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

// Keys a query row sees: all S, or under the bottom-right-aligned causal mask those j <= i + S - T
// (flash-attention's convention; rows with i < T - S see none and get probability 0).
inline int64_t visible_keys(bool causal, int64_t i, int64_t t, int64_t s) {
  if (!causal) return s;
  const int64_t n = i + s - t + 1;
  return n < 0 ? 0 : (n > s ? s : n);
}

}  // namespace tidal::cpu
