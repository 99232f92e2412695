#pragma once
// Embedding lookup: rows of a (V, C) table picked by integer ids.
#include "tidal/tensor.h"

namespace tidal {

// weight (V, C), ids (...) i32/i64 -> (..., C). An id outside [0, V) throws before anything is
// written, naming the id, its position and V. Backward produces the dense (V, C) gradient by a
// deterministic scatter-add (independent of the thread count); it keeps only the ids, not the weight.
// padding_idx >= 0 (PyTorch's nn.Embedding padding_idx, Hugging Face's pad_token_id): that row's
// gradient is 0, whatever the ids.
Tensor embedding(const Tensor& weight, const Tensor& ids, int64_t padding_idx = -1);

}  // namespace tidal
