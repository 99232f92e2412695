// The estimator lists, per layer and in forward order, the storages tidal's ops save for backward
// (one item per storage, at its first save), tags each with how a recompute policy treats it, and
// replays the step: forward adds what is kept, backward frees items in reverse order and adds back
// what a recompute brings back just before it is needed. docs/memory.md has the closed forms.
#include "tidal/memory/estimator.h"

#include <algorithm>

#include "tidal/base/checked_math.h"
#include "tidal/base/error.h"

namespace tidal::memory {
namespace {

enum class Part { attn, mlp };
enum class Region { none, core_attn, mlp, moe };  // inside which selective checkpoint region
enum class Discard { none, norm1, norm2, act };   // output an output-discarding recompute may free

struct Item {
  const char* name;
  int64_t bytes;
  Part part;
  Region region = Region::none;
  bool region_input = false;  // kept by the region's checkpoint as its input
  Discard discard = Discard::none;
  bool in_forward = true;  // false: only exists when recomputed (a discarded norm's statistics)
  bool core = false;       // saved by the attention core (what offload's core-attn policy takes)
};

struct Dims {
  int64_t n, b, s, c, f, h, hkv, hd, a, akv, e, k, fm, el;
  int64_t ep;   // expert-parallel ranks (1: every expert here)
  int64_t cp;   // context-parallel ranks (1: the whole sequence here)
  int64_t acc;  // bytes of an element the kernels keep in their accumulator dtype (f32 for f32 and bf16)
  bool drop_attn, drop_hidden;
};

// Eager attention's matrices (probabilities, and with dropout its mask and the dropped ones) and, under
// context parallelism, the gathered K and V (ops/context_gather_attention.h), in the order of their
// first saves: one (B, H, s, s) matrix; or the whole K, one chunk of queries against the keys before
// it, the whole V, the other chunk (rank 0's: L x L, then L x 2C·L; L = s / 2).
void push_eager_core(std::vector<Item>& v, const Dims& d, const char* gathered_k, const char* gathered_v) {
  const auto matrix = [&](int64_t elements) {
    v.push_back({"probabilities", elements * d.el, Part::attn, Region::core_attn, false, Discard::none, true, true});
    if (!d.drop_attn) return;
    v.push_back({"dropout mask", elements, Part::attn, Region::core_attn, false, Discard::none, true, true});
    v.push_back(
        {"dropped probabilities", elements * d.el, Part::attn, Region::core_attn, false, Discard::none, true, true});
  };
  if (d.cp == 1) {
    matrix(d.b * d.h * d.s * d.s);
    return;
  }
  const int64_t whole = d.b * d.s * d.cp * d.akv * d.el, l = d.s / 2;
  v.push_back({gathered_k, whole, Part::attn, Region::core_attn, false, Discard::none, true, true});
  matrix(d.b * d.h * l * l);
  v.push_back({gathered_v, whole, Part::attn, Region::core_attn, false, Discard::none, true, true});
  matrix(d.b * d.h * l * 2 * d.cp * l);
}

std::vector<Item> gpt2_layer(const Dims& d, AttentionKernel kernel) {
  const int64_t el = d.el, n = d.n, c = d.c;
  std::vector<Item> v = {
      {"ln_1 input", n * c * el, Part::attn},
      {"ln_1 mean, rstd", 2 * n * d.acc, Part::attn, Region::none, false, Discard::norm1, false},
      {"c_attn input", n * c * el, Part::attn, Region::none, false, Discard::norm1},
      {"q, k, v", n * 3 * c * el, Part::attn, Region::core_attn, true, Discard::none, true, true},
  };
  if (kernel == AttentionKernel::eager) {
    push_eager_core(v, d, "gathered k", "gathered v");  // (q, k, v above: q's view keeps them)
    v.push_back({"c_proj input", n * c * el, Part::attn});
  } else {
    v.push_back({"attention output", n * c * el, Part::attn, Region::none, false, Discard::none, true, true});
    v.push_back({"log-sum-exp", d.b * d.h * d.s * d.acc, Part::attn, Region::none, false, Discard::none, true, true});
  }
  if (d.drop_hidden) v.push_back({"residual dropout mask", n * c, Part::attn});
  v.push_back({"ln_2 input", n * c * el, Part::mlp});
  v.push_back({"ln_2 mean, rstd", 2 * n * d.acc, Part::mlp, Region::none, false, Discard::norm2, false});
  v.push_back({"c_fc input", n * c * el, Part::mlp, Region::mlp, true, Discard::norm2});
  v.push_back({"gelu input", n * d.f * el, Part::mlp, Region::mlp});
  v.push_back({"mlp c_proj input", n * d.f * el, Part::mlp, Region::mlp, false, Discard::act});
  if (d.drop_hidden) v.push_back({"residual dropout mask", n * c, Part::mlp});
  return v;
}

std::vector<Item> llama_layer(const Dims& d, const models::ModelConfig& cfg, int64_t l, AttentionKernel kernel,
                              bool core_recompute, const std::vector<int64_t>& expert_tokens) {
  const int64_t el = d.el, n = d.n, c = d.c;
  std::vector<Item> v = {
      {"input_layernorm input", n * c * el, Part::attn},
      {"input_layernorm rstd", n * d.acc, Part::attn, Region::none, false, Discard::norm1, false},
      {"q/k/v_proj input", n * c * el, Part::attn, Region::none, false, Discard::norm1},
  };
  v.reserve(v.size() + 24 + 5 * expert_tokens.size());
  if (cfg.qk_norm) {
    v.push_back({"q_norm input", n * d.a * el, Part::attn});
    v.push_back({"q_norm rstd", n * d.h * d.acc, Part::attn});
    v.push_back({"k_norm input", n * d.akv * el, Part::attn});
    v.push_back({"k_norm rstd", n * d.hkv * d.acc, Part::attn});
  }
  v.push_back({"q (rotated)", n * d.a * el, Part::attn, Region::core_attn, true, Discard::none, true, true});
  // Under context parallelism eager attention saves the gathered K and V, not these: only a core_attn
  // recompute keeps them (its inputs).
  const bool local_kv = kernel != AttentionKernel::eager || d.cp == 1 || core_recompute;
  const Item k = {"k (rotated)", n * d.akv * el, Part::attn, Region::core_attn, true, Discard::none, true, true};
  const Item local_v = {"v", n * d.akv * el, Part::attn, Region::core_attn, true, Discard::none, true, true};
  if (local_kv) v.push_back(k);
  if (kernel == AttentionKernel::eager) {
    push_eager_core(v, d, "gathered k", "gathered v");
    if (local_kv) v.push_back(local_v);
    v.push_back({"o_proj input", n * d.a * el, Part::attn});
  } else {
    v.push_back(local_v);
    v.push_back({"attention output", n * d.a * el, Part::attn, Region::none, false, Discard::none, true, true});
    v.push_back({"log-sum-exp", d.b * d.h * d.s * d.acc, Part::attn, Region::none, false, Discard::none, true, true});
  }
  v.push_back({"post_attention_layernorm input", n * c * el, Part::mlp});
  v.push_back({"post_attention_layernorm rstd", n * d.acc, Part::mlp, Region::none, false, Discard::norm2, false});
  if (!cfg.is_moe_layer(l)) {
    v.push_back({"gate/up_proj input", n * c * el, Part::mlp, Region::mlp, true, Discard::norm2});
    v.push_back({"gate_proj output", n * d.f * el, Part::mlp, Region::mlp});
    v.push_back({"up_proj output", n * d.f * el, Part::mlp, Region::mlp});
    v.push_back({"down_proj input", n * d.f * el, Part::mlp, Region::mlp, false, Discard::act});
    return v;
  }
  // Sparse MoE block (moe.cpp): router, top-k bookkeeping, then each expert on its tokens (N*k
  // (token, expert) slots in all); each expert's tensors are storages of their own.
  const int64_t slots = n * d.k;
  v.push_back({"router input", n * c * el, Part::mlp, Region::moe, true, Discard::norm2});
  v.push_back({"router probabilities", n * d.e * d.acc, Part::mlp, Region::moe});
  v.push_back({"chosen experts", slots * 8, Part::mlp, Region::moe});
  if (cfg.norm_topk_prob) {
    // Normalized before the cast to the activations' dtype: in the router's f32.
    v.push_back({"top-k weights", slots * d.acc, Part::mlp, Region::moe});
    v.push_back({"top-k weight sums", n * d.acc, Part::mlp, Region::moe});
  }
  v.push_back({"slot order", slots * 8, Part::mlp, Region::moe});
  v.push_back({"slot tokens", slots * 8, Part::mlp, Region::moe});
  v.push_back({"slot weights", slots * el, Part::mlp, Region::moe});
  const bool dispatched = d.ep > 1;  // expert parallel: the rows go to their experts' ranks and come back
  int64_t received = 0;
  for (const int64_t m : expert_tokens) {
    if (m == 0) continue;
    received += m;
    v.push_back({"expert input", m * c * el, Part::mlp, Region::moe});
    v.push_back({"expert gate_proj output", m * d.fm * el, Part::mlp, Region::moe});
    v.push_back({"expert up_proj output", m * d.fm * el, Part::mlp, Region::moe});
    v.push_back({"expert down_proj input", m * d.fm * el, Part::mlp, Region::moe, false, Discard::act});
    if (!dispatched) v.push_back({"expert output", m * c * el, Part::mlp, Region::moe});
  }
  if (dispatched) {
    if (received > 0) {
      v.push_back({"received rows' order", received * 8, Part::mlp, Region::moe});
      v.push_back({"returned rows' order", received * 8, Part::mlp, Region::moe});
    }
    v.push_back({"returned rows", slots * c * el, Part::mlp, Region::moe});
  }
  return v;
}

bool in_region(const Item& it, const LayerRecompute& p) {
  return (it.region == Region::core_attn && p.core_attn) || (it.region == Region::mlp && p.mlp) ||
         (it.region == Region::moe && p.moe);
}

bool discarded(const Item& it, const LayerRecompute& p) {
  return (it.discard == Discard::norm1 && p.norm) || (it.discard == Discard::norm2 && p.norm) ||
         (it.discard == Discard::act && (p.activation || p.moe_act));
}

// The layers' recompute policies: the plan's, or none at all.
class LayerPlans {
 public:
  explicit LayerPlans(const std::vector<LayerRecompute>& plan) : plan_(plan) {}
  const LayerRecompute& operator[](int64_t l) const { return plan_.empty() ? none_ : plan_[size_t(l)]; }

 private:
  const std::vector<LayerRecompute>& plan_;
  LayerRecompute none_;
};

Dims dims_of(const models::ModelConfig& cfg, const ActivationInputs& in) {
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
  d.ep = std::max<int64_t>(1, in.parallel.expert);
  d.cp = std::max<int64_t>(1, in.parallel.context);
  d.el = dtype_size(in.dtype);
  d.acc = in.dtype == DType::f64 ? 8 : 4;
  d.drop_attn = in.training && cfg.attention_dropout > 0;
  d.drop_hidden = in.training && cfg.hidden_dropout > 0;
  return d;
}

// Tokens per expert of sparse MoE layer `l`: the counts given, or the even split the planner assumes.
std::vector<int64_t> routed_tokens(const ActivationInputs& in, const Dims& d, int64_t l) {
  std::vector<int64_t> routed;
  const int64_t slots = d.n * d.k;
  if (size_t(l) < in.expert_tokens.size() && !in.expert_tokens[size_t(l)].empty()) {
    routed = in.expert_tokens[size_t(l)];
    int64_t total = 0;
    for (const int64_t m : routed) total += m;
    TIDAL_CHECK(int64_t(routed.size()) == d.e && total == slots, "[estimator] layer ", l, ": expert_tokens needs ", d.e,
                " counts summing to ", slots, " (tokens x top-k)");
  } else if (d.ep > 1) {  // rank 0's experts, each with its share of every rank's slots
    for (int64_t e = 0; e < d.e / d.ep; ++e) routed.push_back(d.ep * (slots / d.e + (e < slots % d.e ? 1 : 0)));
  } else {
    for (int64_t e = 0; e < d.e; ++e) routed.push_back(slots / d.e + (e < slots % d.e ? 1 : 0));
  }
  return routed;
}

// What each layer saves, in forward order.
std::vector<std::vector<Item>> layer_items(const models::ModelConfig& cfg, const ActivationInputs& in, const Dims& d) {
  std::vector<std::vector<Item>> items(static_cast<size_t>(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    if (cfg.is_gpt2()) {
      items[size_t(l)] = gpt2_layer(d, in.kernel);
      continue;
    }
    const std::vector<int64_t> routed = cfg.is_moe_layer(l) ? routed_tokens(in, d, l) : std::vector<int64_t>{};
    const bool core_recompute = size_t(l) < in.plan.size() && in.plan[size_t(l)].core_attn;
    items[size_t(l)] = llama_layer(d, cfg, l, in.kernel, core_recompute, routed);
  }
  return items;
}

// Outside the layers: token (and position) ids and the embedding dropout mask before; after, the
// final norm's input and statistics, the LM head's input, the loss's log-sum-exp and targets (the
// logits themselves are accounted as `logits`, not activations), and MoE's aux-loss counts.
struct OutsideLayers {
  int64_t before = 0, after = 0;
};

OutsideLayers outside_layers(const models::ModelConfig& cfg, const ActivationInputs& in, const Dims& d) {
  OutsideLayers o{d.n * 8, d.n * d.c * d.el + d.n * d.acc + d.n * d.c * d.el + d.n * d.acc + d.n * 8};
  if (cfg.is_gpt2()) {
    o.before += d.s * 8 + (d.drop_hidden ? d.n * d.c : 0);
    o.after += d.n * d.acc;  // layer_norm keeps mean and rstd
  }
  if (cfg.is_moe()) o.after += d.k * d.e * 4;
  // Chunked loss saves the gradients w.r.t. the head input (N, C) and weight (V, C) instead of the
  // head input, the log-sum-exp and the targets (ops/chunked_loss.cpp, Note [Chunked loss memory]).
  // Both in the activations' dtype (bf16: cast from the f32 the loss computes in).
  if (in.loss_chunk > 0) o.after += cfg.vocab_size * d.c * d.el - d.n * d.acc - d.n * 8;
  return o;
}

// Blocks: what runs as one unit (a layer, or a full-recompute group), the unit offload works on.
struct Block {
  int64_t first, last;  // layers
  bool full;
  int64_t offloaded = 0;  // bytes of its saves that leave the device
};

std::vector<Block> blocks_of(int64_t layers, const LayerPlans& plan) {
  std::vector<Block> blocks;
  for (int64_t l = 0; l < layers;) {
    const LayerRecompute& p = plan[l];
    const int64_t g = p.full && p.group_start ? p.group_size : 1;
    blocks.push_back({l, l + g - 1, p.full});
    l += g;
  }
  return blocks;
}

// Which saves offload sends away (memory/offload.cpp's policies).
bool offloads(const Item& it, bool block_input, const ActivationInputs& in) {
  if (!in.offload_policy) return false;
  switch (in.offload_policy->kind) {
    case OffloadPolicyKind::all: return true;
    case OffloadPolicyKind::layer_input: return block_input;
    case OffloadPolicyKind::core_attn: return it.core;
    case OffloadPolicyKind::min_bytes: break;
  }
  return it.bytes >= in.offload_policy->min_bytes;
}

// Sets each block's offloaded bytes: what it holds after forward that the policy sends away (never in
// the last block).
void mark_offloaded(std::vector<Block>& blocks, const std::vector<std::vector<Item>>& items, const LayerPlans& plan,
                    const ActivationInputs& in) {
  for (size_t bi = 0; bi + 1 < blocks.size(); ++bi) {
    Block& b = blocks[bi];
    if (b.full) {
      const Item& input = items[size_t(b.first)][0];
      if (offloads(input, true, in) && !input.core) b.offloaded = input.bytes;
      continue;
    }
    const LayerRecompute& p = plan[b.first];
    const std::vector<Item>& v = items[size_t(b.first)];
    for (size_t i = 0; i < v.size(); ++i)
      if (!(in_region(v[i], p) && !v[i].region_input) && !discarded(v[i], p) && offloads(v[i], i == 0, in))
        b.offloaded += v[i].bytes;
  }
}

// Where the activation peak is reached: prefix, a layer (and a last layer), then two texts, e.g.
// "layer 3 q (rotated)". Kept as parts and written out only once, at the end: the replay passes
// thousands of new peaks per step and the search replays thousands of steps.
struct Where {
  const char* prefix = "";
  int64_t layer = -1, last = -1;  // -1: not printed
  const char* text = "";
  const char* more = "";
  std::string str() const {
    std::string s = prefix;
    if (layer >= 0) s += std::to_string(layer);
    if (last >= 0) {
      s += '-';
      s += std::to_string(last);
    }
    s += text;
    s += more;
    return s;
  }
};

Where at_layer(int64_t l, const char* name) { return {"layer ", l, -1, " ", name}; }

// The activation bytes held as the step's saves and frees are replayed, and their peak.
class Replay {
 public:
  void bump(int64_t delta, const Where& where = {}) {
    cur_ += delta;
    if (cur_ > peak_) {
      peak_ = cur_;
      peak_at_ = where;
    }
  }
  int64_t current() const { return cur_; }
  int64_t peak() const { return peak_; }
  std::string peak_at() const { return peak_at_.str(); }

 private:
  int64_t cur_ = 0, peak_ = 0;
  Where peak_at_{"start"};
};

// Forward of a layer with the finer policies: what it keeps; a discarded output exists only until its
// consumers saved it (statistics: not at all). Returns the bytes kept.
int64_t forward_layer(Replay& r, int64_t l, const std::vector<Item>& v, const LayerRecompute& p) {
  int64_t kept = 0, pending = 0;
  for (const Item& it : v) {
    if (in_region(it, p) && !it.region_input) continue;
    if (discarded(it, p)) {
      if (!it.in_forward) continue;
      r.bump(it.bytes, at_layer(l, it.name));
      // The router input's consumer is the whole sparse MoE block: it goes when the block is done.
      if (it.region == Region::moe && !p.moe)
        pending += it.bytes;
      else
        r.bump(-it.bytes);
      continue;
    }
    r.bump(it.bytes, at_layer(l, it.name));
    kept += it.bytes;
  }
  r.bump(-pending);
  return kept;
}

int64_t total_bytes(const std::vector<Item>& v) {
  int64_t sum = 0;
  for (const Item& it : v) sum += it.bytes;
  return sum;
}

// Forward: starting block b releases what block b-1 offloaded. Fills the per-layer fields of `est`.
void forward_pass(Replay& r, const std::vector<Block>& blocks, const std::vector<std::vector<Item>>& items,
                  const LayerPlans& plan, ActivationEstimate& est) {
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const Block& b = blocks[bi];
    if (bi > 0) r.bump(-blocks[bi - 1].offloaded);
    if (b.full) {
      const int64_t input = items[size_t(b.first)][0].bytes;
      r.bump(input, at_layer(b.first, "checkpoint input"));
      for (int64_t j = b.first; j <= b.last; ++j) {
        est.layer_kept.push_back(j == b.first ? input : 0);
        est.layer_full.push_back(total_bytes(items[size_t(j)]));
      }
      continue;
    }
    est.layer_kept.push_back(forward_layer(r, b.first, items[size_t(b.first)], plan[b.first]));
    est.layer_full.push_back(total_bytes(items[size_t(b.first)]));
  }
}

// Backward of a full-recompute group: the replay brings back every item of the group's layers (the
// input is already held), then all of it goes.
void backward_group(Replay& r, const Block& b, const std::vector<std::vector<Item>>& items) {
  int64_t group = 0;
  for (int64_t j = b.first; j <= b.last; ++j) group += total_bytes(items[size_t(j)]);
  group -= items[size_t(b.first)][0].bytes;
  r.bump(group, {"backward: replay of layers ", b.first, b.last});
  r.bump(-(group + items[size_t(b.first)][0].bytes));
}

// Backward of a layer with the finer policies, item by item from its last save. Items come back
// before their backward: a region's replay brings its internals (and a discarded region input), an
// output-discarding recompute brings the output with its norm's statistics.
void backward_layer(Replay& r, int64_t l, const std::vector<Item>& v, const LayerRecompute& p) {
  std::vector<bool> back(v.size(), false);
  int64_t bytes = 0;
  auto bring = [&](size_t x) {
    if (back[x]) return;
    back[x] = true;
    bytes += v[x].bytes;
    if (v[x].discard == Discard::norm1 || v[x].discard == Discard::norm2)
      for (size_t y = 0; y < v.size(); ++y)
        if (v[y].discard == v[x].discard && !v[y].in_forward && !back[y]) {
          back[y] = true;
          bytes += v[y].bytes;
        }
  };
  auto came_back = [&](const char* what, const char* name = "") {
    r.bump(bytes, {"backward: layer ", l, -1, what, name});
    bytes = 0;
  };
  Region replayed = Region::none;
  bool moe_started = false;
  for (size_t i = v.size(); i-- > 0;) {
    const Item& it = v[i];
    if (in_region(it, p) && replayed != it.region) {  // the region's last save: its replay
      replayed = it.region;
      for (size_t x = 0; x < v.size(); ++x)
        if (v[x].region == it.region && (!v[x].region_input || discarded(v[x], p))) bring(x);
      came_back(" replay of ", it.region == Region::core_attn ? "core attention"
                               : it.region == Region::mlp     ? "MLP"
                                                              : "MoE");
    } else if (it.region == Region::moe && !p.moe && !moe_started) {
      // A discarded router input comes back first, before the backward of the block's output.
      moe_started = true;
      for (size_t x = 0; x < v.size(); ++x)
        if (v[x].region == Region::moe && v[x].region_input && discarded(v[x], p)) bring(x);
      if (bytes > 0) came_back(" recomputed router input");
    }
    if (!back[i] && discarded(it, p)) {
      bring(i);
      came_back(" recomputed ", it.name);
    }
    r.bump(-it.bytes);
  }
}

// Backward, block by block from the last. A block's first unpack brings back what it and the
// `prefetch depth` blocks before it offloaded.
void backward_pass(Replay& r, const std::vector<Block>& blocks, const std::vector<std::vector<Item>>& items,
                   const LayerPlans& plan, int64_t prefetch_depth) {
  std::vector<bool> back(blocks.size(), false);
  for (size_t bi = blocks.size(); bi-- > 0;) {
    for (int64_t j = int64_t(bi); j >= std::max<int64_t>(0, int64_t(bi) - prefetch_depth); --j)
      if (!back[size_t(j)]) {
        back[size_t(j)] = true;
        r.bump(blocks[size_t(j)].offloaded, {"backward: block ", j, -1, " prefetched"});
      }
    const Block& b = blocks[bi];
    if (b.full)
      backward_group(r, b, items);
    else
      backward_layer(r, b.first, items[size_t(b.first)], plan[b.first]);
  }
}

}  // namespace

void check_step_sizes(const models::ModelConfig& cfg, int64_t batch, int64_t seq, AttentionKernel kernel) {
  const std::string what = detail::str_cat(
      "a training step of micro-batch ", batch, " x ", seq, " tokens (--micro-batch-size x --seq-length) of a model ",
      "with hidden size ", cfg.hidden_size, ", ", cfg.num_hidden_layers, " layers and vocabulary ", cfg.vocab_size,
      " is too large to count in 64 bits; give a smaller --micro-batch-size, --seq-length or model");
  auto mul = [&](int64_t a, int64_t b) { return checked_mul(a, b, what); };
  auto sum = [&](std::initializer_list<int64_t> terms) {
    int64_t total = 0;
    for (const int64_t t : terms) total = checked_add(total, t, what);
    return total;
  };
  const int64_t c = cfg.hidden_size, f = cfg.intermediate_size, h = std::max<int64_t>(cfg.num_attention_heads, 1);
  const int64_t hd = cfg.head_dim > 0 ? cfg.head_dim : c / h, hkv = std::max<int64_t>(cfg.kv_heads(), 1);
  const int64_t a = mul(h, hd), akv = mul(hkv, hd), e = cfg.num_experts, k = cfg.num_experts_per_tok;
  const int64_t fm = cfg.moe_intermediate_size, vocab = cfg.vocab_size, layers = cfg.num_hidden_layers;
  const int64_t n = mul(batch, checked_add(seq, 1, what));  // tokens, with the targets
  // Bytes per token one layer can save (the items above, each counted generously, 8 bytes an element).
  const int64_t width =
      sum({mul(10, c), mul(4, a), mul(4, akv), mul(4, f), kernel == AttentionKernel::eager ? mul(3, mul(h, seq)) : 0, e,
           mul(4, h), mul(k, sum({8, mul(2, c), mul(3, fm)})), 16});
  const int64_t activations = sum(
      {mul(layers, mul(mul(n, width), 8)), mul(n, sum({mul(4, c), 64})), mul(mul(vocab, c), 8), mul(mul(n, vocab), 8)});
  const int64_t per_layer =
      sum({mul(4, mul(c, std::max(a, c))), mul(3, mul(c, f)), mul(e, mul(3, mul(c, fm))), mul(c, e), mul(4, c)});
  const int64_t parameters = sum({mul(layers, per_layer), mul(sum({vocab, cfg.max_position_embeddings, 1}), c)});
  mul(sum({activations, mul(parameters, 20)}), 4);  // weights, gradients, AdamW's two moments, a master copy
}

ActivationEstimate estimate_activations(const models::ModelConfig& cfg, const ActivationInputs& in) {
  // The whole sequence bounds what a context-parallel rank keeps too (the gathered K/V, its chunks' probabilities).
  check_step_sizes(cfg, in.batch,
                   checked_mul(in.seq, std::max<int64_t>(1, in.parallel.context), "[estimator] seq x context_parallel"),
                   in.kernel);
  cfg.validate();
  const int64_t layers = cfg.num_hidden_layers;
  TIDAL_CHECK(in.plan.empty() || int64_t(in.plan.size()) == layers, "[estimator] plan has ", in.plan.size(),
              " layers, the model ", layers);
  const Dims d = dims_of(cfg, in);
  const LayerPlans plan(in.plan);
  const std::vector<std::vector<Item>> items = layer_items(cfg, in, d);
  const OutsideLayers outside = outside_layers(cfg, in, d);
  std::vector<Block> blocks = blocks_of(layers, plan);
  mark_offloaded(blocks, items, plan, in);

  ActivationEstimate est;
  est.outside_layers = outside.before + outside.after;
  Replay r;
  r.bump(outside.before, {"embedding"});
  forward_pass(r, blocks, items, plan, est);
  r.bump(outside.after, {"loss"});
  est.after_forward = r.current();
  for (const Block& b : blocks) est.offloaded_per_step += b.offloaded;
  // Backward: the loss and the head first, then the blocks.
  r.bump(-outside.after);
  backward_pass(r, blocks, items, plan, in.offload_prefetch_depth);
  r.bump(-outside.before);
  est.peak = r.peak();
  est.peak_at = r.peak_at();
  return est;
}

ActivationInputs activation_inputs(const MemoryConfig& c, int64_t batch, int64_t seq, AttentionKernel kernel,
                                   DType dtype) {
  TIDAL_ASSERT(c.recompute.any() == !c.recompute_plan.empty(), "[estimator] the recompute plan is not the config's: ",
               "set recompute with MemoryConfig::set_recompute");
  ActivationInputs in;
  in.batch = batch;
  in.seq = seq;
  in.kernel = kernel;
  in.training = true;
  in.dtype = dtype;
  in.plan = c.recompute_plan;
  if (c.offload.enabled) {
    in.offload_policy = c.offload.policy;
    in.offload_prefetch_depth = c.offload.prefetch_depth;
  }
  if (c.loss.chunked) in.loss_chunk = c.loss.chunk_size;
  return in;
}

}  // namespace tidal::memory
