// The estimator lists, per layer and in forward order, the storages tidal's ops save for backward
// (one item per storage, at its first save), tags each with how a recompute policy treats it, and
// replays the step: forward adds what is kept, backward frees items in reverse order and adds back
// what a recompute brings back just before it is needed. docs/memory.md has the closed forms.
#include "tidal/memory/estimator.h"

#include "tidal/memory/estimator_items.h"

#include <algorithm>
#include <utility>

#include "tidal/base/checked_math.h"
#include "tidal/base/error.h"

namespace tidal::memory {
namespace {

using estimator::Dims;
using estimator::dims_of;
using estimator::Discard;
using estimator::Item;
using estimator::layer_items;
using estimator::MtpDepth;
using estimator::outside_layers;
using estimator::OutsideLayers;
using estimator::Part;
using estimator::Region;

bool in_region(const Item& it, const LayerRecompute& p) {
  return (it.region == Region::core_attn && p.core_attn) || (it.region == Region::mlp && p.mlp) ||
         (it.region == Region::moe && p.moe) || (it.region == Region::csa_attention && p.csa_attention) ||
         ((it.region == Region::mhc_attn || it.region == Region::mhc_ffn) && p.mhc);
}

bool discarded(const Item& it, const LayerRecompute& p) {
  return (it.discard == Discard::norm1 && p.norm) || (it.discard == Discard::norm2 && p.norm) ||
         (it.discard == Discard::act && (p.activation || p.moe_act)) ||
         (it.discard == Discard::up_proj && p.mla_up_proj) || (it.discard == Discard::mhc_expand && p.mhc);
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
  if (!in.offload_policy || it.decision) return false;
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
    if (b.full) {  // its checkpoint input (a decision kept beside it stays)
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

// What a full-recompute checkpoint keeps of layer j: the group's input (its first layer's first item) and the
// decisions it recorded (DeepSeek-V4 CSA's kept indices).
int64_t checkpoint_kept(const std::vector<Item>& layer, bool first) {
  int64_t kept = first ? layer[0].bytes : 0;
  for (const Item& it : layer)
    if (it.decision) kept += it.bytes;
  return kept;
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
    window_peak_ = std::max(window_peak_, cur_);
    if (cur_ > peak_) {
      peak_ = cur_;
      peak_at_ = where;
    }
  }
  // The highest bytes since open_window(): what one part of backward holds at most.
  void open_window() { window_peak_ = cur_; }
  int64_t window_peak() const { return window_peak_; }
  int64_t current() const { return cur_; }
  int64_t peak() const { return peak_; }
  std::string peak_at() const { return peak_at_.str(); }

 private:
  int64_t cur_ = 0, peak_ = 0, window_peak_ = 0;
  Where peak_at_{"start"};
};

// Forward of a layer with the finer policies: what it keeps; a discarded output exists only until its
// consumers saved it (statistics: not at all). Returns the bytes kept.
int64_t forward_layer(Replay& r, int64_t l, const std::vector<Item>& v, const LayerRecompute& p) {
  int64_t kept = 0, pending = 0, pending_up = 0;
  for (const Item& it : v) {
    if (it.part == Part::mlp && pending_up > 0) r.bump(-std::exchange(pending_up, 0));
    if (in_region(it, p) && !it.region_input) continue;
    if (discarded(it, p)) {
      if (!it.in_forward) continue;
      r.bump(it.bytes, at_layer(l, it.name));
      // The router input's consumer is the whole sparse MoE block: it goes when the block is done; MLA's
      // queries, keys and values go when the attention (core and o_proj) is done; DeepSeek-V4's mid-layer streams
      // when the layer's forward is (the MoE's expansion saved them).
      if ((it.region == Region::moe && !p.moe) || it.discard == Discard::mhc_expand)
        pending += it.bytes;
      else if (it.discard == Discard::up_proj)
        pending_up += it.bytes;
      else
        r.bump(-it.bytes);
      continue;
    }
    r.bump(it.bytes, at_layer(l, it.name));
    kept += it.bytes;
  }
  r.bump(-(pending + pending_up));
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
      for (int64_t j = b.first; j <= b.last; ++j) {
        const int64_t kept = checkpoint_kept(items[size_t(j)], j == b.first);
        r.bump(kept, at_layer(b.first, "checkpoint input"));
        est.layer_kept.push_back(kept);
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
  int64_t group = 0, kept = 0;
  for (int64_t j = b.first; j <= b.last; ++j) {
    group += total_bytes(items[size_t(j)]);
    kept += checkpoint_kept(items[size_t(j)], j == b.first);
  }
  r.bump(group - kept, {"backward: replay of layers ", b.first, b.last});
  r.bump(-group);
}

const char* region_name(Region r) {
  switch (r) {
    case Region::core_attn: return "core attention";
    case Region::mlp: return "MLP";
    case Region::moe: return "MoE";
    case Region::csa_attention: return "compressed attention";
    case Region::mhc_attn: return "attention pre mapping";
    case Region::mhc_ffn: return "MLP pre mapping";
    case Region::none: break;
  }
  return "";
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
  // mla_up_proj: its recompute runs before the attention's last backward (o_proj's), at its last item.
  size_t last_attn = v.size();
  for (size_t x = 0; x < v.size(); ++x)
    if (v[x].part == Part::attn) last_attn = x;
  if (p.mhc) {  // DeepSeek-V4's mid-layer streams come back before the layer's last node's backward
    for (size_t x = 0; x < v.size(); ++x)
      if (v[x].discard == Discard::mhc_expand) bring(x);
    if (bytes > 0) came_back(" recomputed mid-layer streams");
  }
  for (size_t i = v.size(); i-- > 0;) {
    const Item& it = v[i];
    if (i == last_attn && p.mla_up_proj) {
      for (size_t x = 0; x < v.size(); ++x)
        if (v[x].discard == Discard::up_proj) bring(x);
      if (bytes > 0) came_back(" recomputed up-projections");
    }
    if (in_region(it, p) && replayed != it.region) {  // the region's last save: its replay
      replayed = it.region;
      for (size_t x = 0; x < v.size(); ++x)
        if (v[x].region == it.region && (!v[x].region_input || discarded(v[x], p))) bring(x);
      came_back(" replay of ", region_name(it.region));
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
                   const LayerPlans& plan, int64_t prefetch_depth, ActivationEstimate& est) {
  std::vector<bool> back(blocks.size(), false);
  for (size_t bi = blocks.size(); bi-- > 0;) {
    r.open_window();
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
    est.backward_blocks.push_back({b.first, r.window_peak()});
  }
}

// A multi-token-prediction depth's forward (layer index l): its items around its decoder layer, then its loss's;
// under full recompute only the checkpoint's inputs (ids, embedding) and output.
// What a depth's checkpoint keeps under full recompute: its inputs (the rolled ids, the embedding) and its output.
int64_t checkpoint_kept(const MtpDepth& m) { return m.before[0].bytes + m.before[1].bytes + m.after.back().bytes; }

void mtp_forward(Replay& r, int64_t l, const MtpDepth& m, const LayerRecompute& p) {
  if (p.full) {
    r.bump(checkpoint_kept(m), at_layer(l, "MTP checkpoint"));
  } else {
    for (const Item& it : m.before) r.bump(it.bytes, at_layer(l, it.name));
    forward_layer(r, l, m.layer, p);
    for (const Item& it : m.after) r.bump(it.bytes, at_layer(l, it.name));
  }
  r.bump(m.loss, at_layer(l, "MTP loss"));
}

// Its backward: a full recompute's replay brings back the rest of the depth, then all of it goes.
void mtp_backward(Replay& r, int64_t l, const MtpDepth& m, const LayerRecompute& p) {
  if (p.full) {
    const int64_t kept = checkpoint_kept(m);
    const int64_t all = total_bytes(m.before) + total_bytes(m.layer) + total_bytes(m.after);
    r.bump(all - kept, {"backward: replay of MTP layer ", l, -1});
    r.bump(-all);
    return;
  }
  for (const Item& it : m.after) r.bump(-it.bytes);
  backward_layer(r, l, m.layer, p);
  for (const Item& it : m.before) r.bump(-it.bytes);
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
  // DeepSeek-V4 keeps hc_mult streams and, with the flash core, CSA's kept indices and its parts' merge weights.
  const bool v4 = cfg.is_deepseek_v4();
  const int64_t width =
      sum({mul(10, c), mul(4, a), mul(4, akv), mul(4, f), kernel == AttentionKernel::eager ? mul(3, mul(h, seq)) : 0, e,
           mul(4, h), v4 ? mul(cfg.v4.index_topk + 4, hd + h) : 0, mul(k, sum({8, mul(2, c), mul(3, fm)})), 16,
           v4 ? mul(8, mul(cfg.v4.hc_mult, c)) : 0});
  const int64_t activations = sum(
      {mul(layers, mul(mul(n, width), 8)), mul(n, sum({mul(4, c), 64})), mul(mul(vocab, c), 8), mul(mul(n, vocab), 8)});
  const int64_t per_layer =
      sum({mul(4, mul(c, std::max(a, c))), mul(3, mul(c, f)), mul(e, mul(3, mul(c, fm))), mul(c, e), mul(4, c)});
  const int64_t parameters = sum({mul(layers, per_layer), mul(sum({vocab, cfg.max_position_embeddings, 1}), c)});
  mul(sum({activations, mul(parameters, 20)}), 4);  // weights, gradients, AdamW's two moments, a master copy
}

ActivationEstimate estimate_activations(const models::ModelConfig& cfg, const ActivationInputs& in) {
  // DeepSeek-V4 (memory/estimator_deepseek_v4.h) runs without context parallelism and without LoRA
  // (models/deepseek_v4.h refuses the first): no formula counts them for it.
  TIDAL_CHECK(!cfg.is_deepseek_v4() || in.parallel.context <= 1,
              "[estimator] deepseek_v4 runs without context parallelism (--context-parallel-size 1)");
  TIDAL_CHECK(!cfg.is_deepseek_v4() || !in.lora, "[estimator] LoRA on deepseek_v4 is not modelled");
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

  const std::vector<MtpDepth> mtp = estimator::mtp_depths(cfg, in, d);
  const LayerRecompute& last = plan[layers - 1];  // the MTP depths' (models/llama.cpp mtp_hidden_states)

  ActivationEstimate est;
  est.outside_layers = outside.before + outside.after;
  Replay r;
  r.bump(outside.before, {"embedding"});
  forward_pass(r, blocks, items, plan, est);
  r.bump(outside.after, {"loss"});
  for (size_t k = 0; k < mtp.size(); ++k) mtp_forward(r, layers + int64_t(k), mtp[k], last);
  est.after_forward = r.current();
  for (const Block& b : blocks) est.offloaded_per_step += b.offloaded;
  // Backward: the losses and the heads first, then the MTP depths from the last, then the blocks.
  r.open_window();
  for (const MtpDepth& m : mtp) r.bump(-m.loss);
  for (size_t k = mtp.size(); k-- > 0;) mtp_backward(r, layers + int64_t(k), mtp[k], last);
  r.bump(-outside.after);
  est.backward_before_layers = r.window_peak();
  est.hidden_gradient = d.n * d.c * d.el * (cfg.is_deepseek_v4() ? cfg.v4.hc_mult : 1);  // V4: (B, T, hc, C)
  backward_pass(r, blocks, items, plan, in.offload_prefetch_depth, est);
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
