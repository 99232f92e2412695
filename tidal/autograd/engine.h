#pragma once
// Runs backward: walks the graph from the roots in reverse creation order (highest sequence number
// first), sums the gradients arriving at each node, calls its backward once all have arrived, and
// drops its saved tensors right after (unless retain_graph).
#include <vector>

#include "tidal/tensor.h"

namespace tidal::autograd {

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

}  // namespace tidal::autograd
