#pragma once
// The recompute plan as the models read it: one entry per layer saying which of its parts run under
// a checkpoint. memory/recompute.h computes the plan from Megatron's flags (docs/recompute.md); the
// models only follow it, so they do not depend on the memory features.
#include <cstdint>

namespace tidal::models {

// What layer `index` does. A layer is either inside a full-recompute checkpoint (group_start says
// where a group of `group_size` layers begins) or gets the finer policies.
struct LayerRecompute {
  bool full = false;
  bool group_start = false;
  int64_t group_size = 1;
  bool core_attn = false;    // checkpoint the attention core (eager: scores, softmax, dropout, @v)
  bool mlp = false;          // checkpoint the dense MLP
  bool moe = false;          // checkpoint the whole sparse MoE block
  bool moe_act = false;      // output-discarding recompute of each expert's activation
  bool activation = false;   // output-discarding recompute of the dense MLP's activation
  bool norm = false;         // output-discarding recompute of the layer's two norms
  bool mla_up_proj = false;  // output-discarding recompute of MLA's up-projections and RoPE (models/mla.h)
  // DeepSeek-V4 (models/deepseek_v4.h): the compressed attention of a CSA or HCA layer (compressor, indexer,
  // attention core) in one checkpoint; the mHC mappings (attention's pre and post, the MLP's pre) recomputed.
  bool csa_attention = false;
  bool mhc = false;
  bool any() const {
    return full || core_attn || mlp || moe || moe_act || activation || norm || mla_up_proj || csa_attention || mhc;
  }
  bool operator==(const LayerRecompute&) const = default;
};

}  // namespace tidal::models
