#pragma once
// Activation offload on a CausalLM: a LayerRunner that runs each offload block (a layer, or a
// full-recompute group of layers, which runs as one unit) inside AsyncOffload.
#include <vector>

#include "tidal/memory/offload.h"
#include "tidal/memory/recompute.h"
#include "tidal/models/causal_lm.h"

namespace tidal::memory {

// The offload block of each layer under `plan` (empty: no recompute, a block per layer); the number
// of blocks is back() + 1.
std::vector<int64_t> offload_blocks(const std::vector<LayerRecompute>& plan, int64_t layers);

// Runs layers through `offloader` with the policy (offload_check; layer-input takes the
// layer's first input). `inner`, if set, runs the layer inside the block (tests wrap it).
models::LayerRunner offload_layer_runner(Offloader& offloader, const std::vector<LayerRecompute>& plan, int64_t layers,
                                         const OffloadPolicy& policy, models::LayerRunner inner = nullptr);

}  // namespace tidal::memory
