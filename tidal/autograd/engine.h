#pragma once
// Runs backward: walks the graph from the roots in reverse creation order (highest sequence number
// first), sums the gradients arriving at each node, calls its backward once all have arrived, and
// drops its saved tensors right after (unless retain_graph).
#include <functional>
#include <vector>

#include "tidal/tensor.h"

namespace tidal::autograd {

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

// Called with every backward node's layer (-1 outside the layers) just before the node runs, after
// its pre-hooks; an empty function removes it. ZeRO-3 checks there that the layer's parameters are
// gathered (parallel/param_gather.h).
void set_backward_node_check(std::function<void(int layer)> check);

}  // namespace tidal::autograd
