#pragma once
// Activation offload on a CausalLM: a LayerRunner that runs each offload block (a layer, or a
// full-recompute group of layers, which runs as one unit) inside memory::AsyncOffload.
#include <vector>

#include "tidal/memory/offload.h"
#include "tidal/memory/recompute.h"
#include "tidal/models/causal_lm.h"

namespace tidal::models {

// The offload block of each layer under `plan` (empty: no recompute, a block per layer); the number
// of blocks is back() + 1.
std::vector<int64_t> offload_blocks(const std::vector<memory::LayerRecompute>& plan, int64_t layers);

// Runs layers through `offloader` with the policy (memory::offload_check; layer-input takes the
// layer's first input). `inner`, if set, runs the layer inside the block (tests wrap it).
LayerRunner offload_layer_runner(memory::Offloader& offloader, const std::vector<memory::LayerRecompute>& plan,
                                 int64_t layers, const memory::OffloadPolicy& policy, LayerRunner inner = nullptr);

}  // namespace tidal::models
