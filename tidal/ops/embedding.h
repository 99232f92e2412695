#pragma once
// Embedding lookup: rows of a (V, C) table picked by integer ids.
#include "tidal/tensor.h"

namespace tidal {

// weight (V, C), ids (...) i32/i64 -> (..., C). An id outside [0, V) throws before anything is
// written, naming the id, its position and V. Backward produces the dense (V, C) gradient by a
// deterministic scatter-add (independent of the thread count); it keeps only the ids, not the weight.
Tensor embedding(const Tensor& weight, const Tensor& ids);

}  // namespace tidal
