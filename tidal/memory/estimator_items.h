#pragma once
// The estimator's list of what a training step saves for backward (memory/estimator.cpp replays it):
// per layer and in forward order, one item per storage tidal's ops save, tagged with how a recompute
// policy treats it, and what is saved outside the layers. Not for use outside memory/.
#include <cstdint>
#include <vector>

#include "tidal/memory/estimator.h"

namespace tidal::memory::estimator {

enum class Part { attn, mlp };
// Inside which checkpoint region: the selective ones, DeepSeek-V4's compressed attention (--recompute-csa-attention)
// and its two pre mappings (--mhc-recompute: the attention's, the MLP's).
enum class Region { none, core_attn, mlp, moe, csa_attention, mhc_attn, mhc_ffn };
// What an output-discarding recompute may free: the norms' outputs, the activation's, MLA's up-projections'
// outputs (queries, keys, values) with their internals (in_forward false: saved only by the recompute), and
// DeepSeek-V4's mid-layer streams (--mhc-recompute's attention post mapping).
enum class Discard { none, norm1, norm2, act, up_proj, mhc_expand };

struct Item {
  const char* name;
  int64_t bytes;
  Part part;
  Region region = Region::none;
  bool region_input = false;  // kept by the region's checkpoint as its input
  Discard discard = Discard::none;
  bool in_forward = true;  // false: only exists when recomputed (a discarded norm's statistics)
  bool core = false;       // saved by the attention core (what offload's core-attn policy takes)
  // A checkpoint's recorded decision (DeepSeek-V4 CSA's kept indices): kept by every checkpoint around it, never
  // offloaded (it is no saved tensor).
  bool decision = false;
};

struct Dims {
  int64_t n, b, s, c, f, h, hkv, hd, a, akv, e, k, fm, el;
  int64_t ep;   // expert-parallel ranks (1: every expert here)
  int64_t cp;   // context-parallel ranks (1: the whole sequence here)
  int64_t acc;  // bytes of an element the kernels keep in their accumulator dtype (f32 for f32 and bf16)
  bool drop_attn, drop_hidden;
};

// Outside the layers: token (and position) ids and the embedding dropout mask before; after, the
// final norm's input and statistics, the LM head's input, the loss's log-sum-exp and targets (the
// logits themselves are accounted as `logits`, not activations), and MoE's aux-loss counts.
struct OutsideLayers {
  int64_t before = 0, after = 0;
};

// Multi-token prediction's depth k (models/mtp.h, cfg.mtp_num_layers), after the final norm: what it saves before
// its decoder layer (the rolled ids the embedding keeps, enorm's input and statistics, hnorm's statistics, eh_proj's
// (N, 2C) input), its decoder layer's items (layer L + k - 1's kind), what it saves after (shared_head.norm's input
// and statistics, its output: the LM head's input), and its loss's (default: the log-sum-exp and the targets' copy;
// chunk: the gradients w.r.t. the head input and weight instead). Under full recompute a depth keeps its
// checkpoint's inputs (the ids, the embedding) and output.
struct MtpDepth {
  std::vector<Item> before, layer, after;
  int64_t loss = 0;
};
std::vector<MtpDepth> mtp_depths(const models::ModelConfig& cfg, const ActivationInputs& in, const Dims& d);

// The sizes of `cfg` and `in` the items are made of.
Dims dims_of(const models::ModelConfig& cfg, const ActivationInputs& in);
// What each layer saves, in forward order.
std::vector<std::vector<Item>> layer_items(const models::ModelConfig& cfg, const ActivationInputs& in, const Dims& d);
OutsideLayers outside_layers(const models::ModelConfig& cfg, const ActivationInputs& in, const Dims& d);
// Tokens per expert of sparse MoE layer `l`: the counts given, or the even split the planner assumes.
std::vector<int64_t> routed_tokens(const ActivationInputs& in, const Dims& d, int64_t l);

}  // namespace tidal::memory::estimator
