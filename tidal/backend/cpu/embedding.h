#pragma once
// CPU kernels of the embedding lookup. ids are contiguous i32/i64, already checked to lie in [0, V).
#include "tidal/tensor.h"

namespace tidal::cpu {

// out (N, C) contiguous = weight (V, C) rows ids[n]; the weight may have any strides.
void embedding_forward(const Tensor& out, const Tensor& weight, const Tensor& ids);
// grad_weight (V, C) contiguous, every row written: row v = the sum of g (N, C) rows n with
// ids[n] == v, added in increasing n (zeros when v does not occur). A counting sort of the ids
// makes the rows independent, so they run in parallel without atomics and the result does not
// depend on the number of threads. bf16 rows accumulate in f32 and round once.
void embedding_backward(const Tensor& grad_weight, const Tensor& g, const Tensor& ids);

}  // namespace tidal::cpu
