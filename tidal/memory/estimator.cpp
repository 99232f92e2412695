// The estimator lists, per layer and in forward order, the storages tidal's ops save for backward
// (one item per storage, at its first save), tags each with how a recompute policy treats it, and
// replays the step: forward adds what is kept, backward frees items in reverse order and adds back
// what a recompute brings back just before it is needed. docs/memory.md has the closed forms.
#include "tidal/memory/estimator.h"

#include <algorithm>

#include "tidal/base/error.h"

namespace tidal::memory {
namespace {

enum class Part { attn, mlp };
enum class Region { none, core_attn, mlp, moe };      // inside which selective checkpoint region
enum class Discard { none, norm1, norm2, act };       // output an output-discarding recompute may free

struct Item {
  const char* name;
  int64_t bytes;
  Part part;
  Region region = Region::none;
  bool region_input = false;  // kept by the region's checkpoint as its input
  Discard discard = Discard::none;
  bool in_forward = true;     // false: only exists when recomputed (a discarded norm's statistics)
};

struct Dims {
  int64_t n, b, s, c, f, h, hkv, hd, a, akv, e, k, fm, el;
  bool drop_attn, drop_hidden;
};

std::vector<Item> gpt2_layer(const Dims& d, AttentionKernel kernel) {
  const int64_t el = d.el, n = d.n, c = d.c, bhss = d.b * d.h * d.s * d.s;
  std::vector<Item> v = {
      {"ln_1 input", n * c * el, Part::attn},
      {"ln_1 mean, rstd", 2 * n * 4, Part::attn, Region::none, false, Discard::norm1, false},
      {"c_attn input", n * c * el, Part::attn, Region::none, false, Discard::norm1},
      {"q, k, v", n * 3 * c * el, Part::attn, Region::core_attn, true},
  };
  if (kernel == AttentionKernel::eager) {
    v.push_back({"probabilities", bhss * el, Part::attn, Region::core_attn});
    if (d.drop_attn) {
      v.push_back({"dropout mask", bhss, Part::attn, Region::core_attn});
      v.push_back({"dropped probabilities", bhss * el, Part::attn, Region::core_attn});
    }
    v.push_back({"c_proj input", n * c * el, Part::attn});
  } else {
    v.push_back({"attention output", n * c * el, Part::attn});
    v.push_back({"log-sum-exp", d.b * d.h * d.s * 4, Part::attn});
  }
  if (d.drop_hidden) v.push_back({"residual dropout mask", n * c, Part::attn});
  v.push_back({"ln_2 input", n * c * el, Part::mlp});
  v.push_back({"ln_2 mean, rstd", 2 * n * 4, Part::mlp, Region::none, false, Discard::norm2, false});
  v.push_back({"c_fc input", n * c * el, Part::mlp, Region::mlp, true, Discard::norm2});
  v.push_back({"gelu input", n * d.f * el, Part::mlp, Region::mlp});
  v.push_back({"mlp c_proj input", n * d.f * el, Part::mlp, Region::mlp, false, Discard::act});
  if (d.drop_hidden) v.push_back({"residual dropout mask", n * c, Part::mlp});
  return v;
}

std::vector<Item> llama_layer(const Dims& d, const models::ModelConfig& cfg, int64_t l, AttentionKernel kernel) {
  const int64_t el = d.el, n = d.n, c = d.c, bhss = d.b * d.h * d.s * d.s;
  std::vector<Item> v = {
      {"input_layernorm input", n * c * el, Part::attn},
      {"input_layernorm rstd", n * 4, Part::attn, Region::none, false, Discard::norm1, false},
      {"q/k/v_proj input", n * c * el, Part::attn, Region::none, false, Discard::norm1},
  };
  if (cfg.qk_norm) {
    v.push_back({"q_norm input", n * d.a * el, Part::attn});
    v.push_back({"q_norm rstd", n * d.h * 4, Part::attn});
    v.push_back({"k_norm input", n * d.akv * el, Part::attn});
    v.push_back({"k_norm rstd", n * d.hkv * 4, Part::attn});
  }
  v.push_back({"q (rotated)", n * d.a * el, Part::attn, Region::core_attn, true});
  v.push_back({"k (rotated)", n * d.akv * el, Part::attn, Region::core_attn, true});
  if (kernel == AttentionKernel::eager) {
    v.push_back({"probabilities", bhss * el, Part::attn, Region::core_attn});
    if (d.drop_attn) {
      v.push_back({"dropout mask", bhss, Part::attn, Region::core_attn});
      v.push_back({"dropped probabilities", bhss * el, Part::attn, Region::core_attn});
    }
    v.push_back({"v", n * d.akv * el, Part::attn, Region::core_attn, true});
    v.push_back({"o_proj input", n * d.a * el, Part::attn});
  } else {
    v.push_back({"v", n * d.akv * el, Part::attn, Region::core_attn, true});
    v.push_back({"attention output", n * d.a * el, Part::attn});
    v.push_back({"log-sum-exp", d.b * d.h * d.s * 4, Part::attn});
  }
  v.push_back({"post_attention_layernorm input", n * c * el, Part::mlp});
  v.push_back({"post_attention_layernorm rstd", n * 4, Part::mlp, Region::none, false, Discard::norm2, false});
  if (!cfg.is_moe_layer(l)) {
    v.push_back({"gate/up_proj input", n * c * el, Part::mlp, Region::mlp, true, Discard::norm2});
    v.push_back({"swiglu gate, up", 2 * n * d.f * el, Part::mlp, Region::mlp});
    v.push_back({"down_proj input", n * d.f * el, Part::mlp, Region::mlp, false, Discard::act});
    return v;
  }
  // Sparse MoE block (moe.cpp): router, top-k bookkeeping, then each expert on its tokens; N*k
  // (token, expert) slots in all, whatever the routing.
  const int64_t slots = n * d.k;
  v.push_back({"router input", n * c * el, Part::mlp, Region::moe, true, Discard::norm2});
  v.push_back({"router probabilities", n * d.e * 4, Part::mlp, Region::moe});
  v.push_back({"chosen experts", slots * 8, Part::mlp, Region::moe});
  if (cfg.norm_topk_prob) {
    v.push_back({"top-k weights", slots * el, Part::mlp, Region::moe});
    v.push_back({"top-k weight sums", n * el, Part::mlp, Region::moe});
  }
  v.push_back({"slot order", slots * 8, Part::mlp, Region::moe});
  v.push_back({"slot tokens", slots * 8, Part::mlp, Region::moe});
  v.push_back({"expert inputs", slots * c * el, Part::mlp, Region::moe});
  v.push_back({"expert swiglu gate, up", 2 * slots * d.fm * el, Part::mlp, Region::moe});
  v.push_back({"expert down_proj inputs", slots * d.fm * el, Part::mlp, Region::moe, false, Discard::act});
  v.push_back({"slot weights", slots * el, Part::mlp, Region::moe});
  v.push_back({"expert outputs", slots * c * el, Part::mlp, Region::moe});
  return v;
}

bool in_region(const Item& it, const LayerRecompute& p) {
  return (it.region == Region::core_attn && p.core_attn) || (it.region == Region::mlp && p.mlp) ||
         (it.region == Region::moe && p.moe);
}

bool discarded(const Item& it, const LayerRecompute& p) {
  return (it.discard == Discard::norm1 && p.norm) ||
         (it.discard == Discard::norm2 && p.norm) ||
         (it.discard == Discard::act && (p.activation || p.moe_act));
}

}  // namespace

ActivationEstimate estimate_activations(const models::ModelConfig& cfg, const ActivationInputs& in) {
  cfg.validate();
  const int64_t layers = cfg.num_hidden_layers;
  TIDAL_CHECK(in.plan.empty() || int64_t(in.plan.size()) == layers, "[estimator] plan has ", in.plan.size(),
              " layers, the model ", layers);
  Dims d{};
  d.b = in.batch;
  d.s = in.seq;
  d.n = in.batch * in.seq;
  d.c = cfg.hidden_size;
  d.f = cfg.intermediate_size;
  d.h = cfg.num_attention_heads;
  d.hkv = cfg.kv_heads();
  d.hd = cfg.head_size();
  d.a = d.h * d.hd;
  d.akv = d.hkv * d.hd;
  d.e = cfg.num_experts;
  d.k = cfg.num_experts_per_tok;
  d.fm = cfg.moe_intermediate_size;
  d.el = in.element_size;
  d.drop_attn = in.training && cfg.attention_dropout > 0;
  d.drop_hidden = in.training && cfg.hidden_dropout > 0;
  const LayerRecompute none;
  auto plan_of = [&](int64_t l) -> const LayerRecompute& { return in.plan.empty() ? none : in.plan[size_t(l)]; };

  std::vector<std::vector<Item>> items(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l)
    items[size_t(l)] = cfg.is_gpt2() ? gpt2_layer(d, in.kernel) : llama_layer(d, cfg, l, in.kernel);

  // Outside the layers: token (and position) ids and the embedding dropout mask before; after, the
  // final norm's input and statistics, the LM head's input, the loss's log-sum-exp and targets (the
  // logits themselves are accounted as `logits`, not activations), and MoE's aux-loss counts.
  int64_t before = d.n * 8, after = d.n * d.c * d.el + d.n * 4 + d.n * d.c * d.el + d.n * 4 + d.n * 8;
  if (cfg.is_gpt2()) {
    before += d.s * 8 + (d.drop_hidden ? d.n * d.c : 0);
    after += d.n * 4;  // layer_norm keeps mean and rstd
  }
  if (cfg.is_moe()) after += d.k * d.e * 4;
  // Chunked loss saves the gradients w.r.t. the head input (N, C) and weight (V, C) instead of the
  // head input, the log-sum-exp and the targets (ops/chunked_loss.cpp, Note [Chunked loss memory]).
  if (in.loss_chunk > 0) after += cfg.vocab_size * d.c * d.el - d.n * 4 - d.n * 8;

  ActivationEstimate est;
  est.outside_layers = before + after;
  int64_t cur = 0, peak = 0;
  std::string peak_at = "start";
  auto bump = [&](int64_t delta, const std::string& where) {
    cur += delta;
    if (cur > peak) {
      peak = cur;
      peak_at = where;
    }
  };

  // Forward.
  bump(before, "embedding");
  for (int64_t l = 0; l < layers;) {
    const LayerRecompute& p = plan_of(l);
    if (p.full) {
      const int64_t g = p.group_start ? p.group_size : 1;
      const int64_t input = items[size_t(l)][0].bytes;
      bump(input, "layer " + std::to_string(l) + " checkpoint input");
      for (int64_t j = l; j < l + g; ++j) {
        est.layer_kept.push_back(j == l ? input : 0);
        int64_t full = 0;
        for (const Item& it : items[size_t(j)]) full += it.bytes;
        est.layer_full.push_back(full);
      }
      l += g;
      continue;
    }
    int64_t kept = 0, full = 0;
    for (const Item& it : items[size_t(l)]) {
      full += it.bytes;
      if (in_region(it, p) && !it.region_input) continue;
      if (discarded(it, p)) {  // exists only until its consumers saved it (statistics: not at all)
        if (it.in_forward) bump(it.bytes, "layer " + std::to_string(l) + " " + it.name);
        if (it.in_forward) bump(-it.bytes, "");
        continue;
      }
      bump(it.bytes, "layer " + std::to_string(l) + " " + it.name);
      kept += it.bytes;
    }
    est.layer_kept.push_back(kept);
    est.layer_full.push_back(full);
    ++l;
  }
  bump(after, "loss");
  est.after_forward = cur;

  // Backward: the loss and the head first, then layer by layer from the last.
  bump(-after, "");
  for (int64_t l = layers - 1; l >= 0;) {
    const LayerRecompute& p = plan_of(l);
    if (p.full) {
      int64_t first = l;  // the group this layer ends
      while (!plan_of(first).group_start) --first;
      // The replay brings back every item of the group's layers (the input is already held).
      int64_t group = 0;
      for (int64_t j = first; j <= l; ++j)
        for (const Item& it : items[size_t(j)]) group += it.bytes;
      group -= items[size_t(first)][0].bytes;
      bump(group, "backward: replay of layers " + std::to_string(first) + "-" + std::to_string(l));
      bump(-(group + items[size_t(first)][0].bytes), "");
      l = first - 1;
      continue;
    }
    const std::vector<Item>& v = items[size_t(l)];
    Region replayed = Region::none;
    Discard came_back = Discard::none;  // a norm output (and statistics) a region replay brought back
    for (size_t i = v.size(); i-- > 0;) {
      const Item& it = v[i];
      if (in_region(it, p) && replayed != it.region) {  // the region's last save: its replay
        replayed = it.region;
        // A discarded region input (the norm before a checkpointed MLP) comes back first, through
        // the pre-hook on the region's output, then the replay brings the internals.
        int64_t back = 0;
        Discard comes_back = Discard::none;
        for (const Item& x : v)
          if (x.region == it.region && (!x.region_input || discarded(x, p))) {
            back += x.bytes;
            if (x.region_input) comes_back = x.discard;
          }
        for (const Item& x : v)  // with it, the discarded norm's recomputed statistics
          if (comes_back != Discard::none && x.discard == comes_back && !x.in_forward) back += x.bytes;
        came_back = comes_back;
        bump(back, "backward: layer " + std::to_string(l) + " replay of " +
                       (it.region == Region::core_attn ? "core attention" : it.region == Region::mlp ? "MLP" : "MoE"));
      } else if (discarded(it, p) && !(it.discard == came_back && !it.in_forward)) {
        bump(it.bytes, "backward: layer " + std::to_string(l) + " recomputed " + it.name);
      }
      bump(-it.bytes, "");
    }
    --l;
  }
  bump(-before, "");
  est.peak = peak;
  est.peak_at = peak_at;
  return est;
}

}  // namespace tidal::memory
