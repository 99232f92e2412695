#pragma once
// The estimator's DeepSeek-V4 (models/deepseek_v4.h; docs/memory.md, "DeepSeek-V4 layer"): what a decoder layer
// saves, storage by storage in forward order, under the layer's recompute policy (its checkpoint regions depend on
// it: a compressed layer's core belongs to --recompute-csa-attention's region when that is on, CSA's kept choice
// exists only under a checkpoint), and what the hyper head, the final norm and the loss save. Not for use outside
// memory/.
#include <cstdint>
#include <vector>

#include "tidal/memory/estimator_items.h"

namespace tidal::memory::estimator {

// Layer `l` under policy `p`; `routed`: the (token, expert) slots each expert gets.
std::vector<Item> deepseek_v4_layer(const models::ModelConfig& cfg, const Dims& d, int64_t l, const LayerRecompute& p,
                                    const std::vector<int64_t>& routed, AttentionKernel kernel);
// Outside the layers: the ids before; the hyper head, the final norm, the LM head's input and the loss after.
OutsideLayers deepseek_v4_outside(const models::ModelConfig& cfg, const ActivationInputs& in, const Dims& d);

}  // namespace tidal::memory::estimator
