#pragma once
// Losses. cross_entropy is fused: forward computes each row's log-sum-exp and the loss without any
// temporary of the logits' size; backward writes (softmax - onehot) * grad in one pass. It saves the
// logits by reference, the per-row log-sum-exp (accumulate dtype) and the targets.
#include <cstdint>

#include "tidal/tensor.h"

namespace tidal {

enum class Reduction { mean, sum, none };

// logits (..., V), targets (...) of class indices (i64 or i32). Rows whose target is ignore_index
// count for nothing: `mean` divides by the number of other rows (NaN when there are none, like
// PyTorch), `none` gives 0 for them. Any other target outside [0, V) throws tidal::Error.
// mean/sum return a 0-dim tensor in the accumulator's dtype (f32 for bf16 logits: the loss of mixed
// precision is f32), none a tensor of the targets' shape in the logits' dtype.
// Logits are read in place when their rows have a unit inner stride and one row stride (contiguous,
// or narrowed along V); other layouts (e.g. a (B, T, V) tensor narrowed along T) are copied.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::mean);

}  // namespace tidal
