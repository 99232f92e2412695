// What a DeepSeek-V4 training step saves, storage by storage (memory/estimator_deepseek_v4.h). With p the
// activations' bytes an element (d.el), the statistics f32 (d.acc), N = b s tokens, hc = hc_mult streams of width C,
// H heads of width hd, q_r = q_lora_rank, G R = o_groups x o_lora_rank, E experts, k per token, F =
// moe_intermediate_size. Every term is one storage some op saves (the dry run's --report-memory table, line by line);
// views and tensors two ops save are counted once, at their first save.
#include "tidal/memory/estimator_deepseek_v4.h"

#include <algorithm>

namespace tidal::memory::estimator {
namespace {

// A hyper-connection's pre mapping (models/hyper_connection.cpp collapse), after its input streams (the region's
// input, counted by the caller): inside --mhc-recompute's checkpoint `region`.
void push_pre_mapping(std::vector<Item>& v, const Dims& d, int64_t hc, Part part, Region region) {
  const int64_t n = d.n, el = d.el;
  v.push_back({"hc norm rstd", n * d.acc, part, region});                       // (B, T)
  v.push_back({"hc projection input", n * hc * d.c * el, part, region});        // (B, T, hc C) normalized
  v.push_back({"hc projection output", n * (2 + hc) * hc * el, part, region});  // (B, T, (2 + hc) hc)
  v.push_back({"hc pre sigmoid", n * hc * el, part, region});                   // (B, T, hc)
  v.push_back({"hc post sigmoid", n * hc * el, part, region});                  // (B, T, hc)
  v.push_back({"hc comb softmax", n * hc * hc * el, part, region});             // (B, T, hc, hc)
  v.push_back({"sinkhorn input", n * hc * hc * el, part, region});              // (B, T, hc, hc)
  v.push_back({"hc pre weights", n * hc * el, part, region});                   // (B, T, 1, hc)
}

// A hyper-connection's expansion (HyperConnection::expand): the block's output, post and comb (the streams are saved
// already: the layer's input, or the mid-layer streams).
void push_expansion(std::vector<Item>& v, const Dims& d, int64_t hc, Part part, const char* block_out) {
  v.push_back({block_out, d.n * d.c * d.el, part});      // (B, T, 1, C)
  v.push_back({"hc post", d.n * hc * d.el, part});       // (B, T, hc, 1)
  v.push_back({"hc comb", d.n * hc * hc * d.el, part});  // (B, T, hc, hc)
}

// The flash core (DeepseekV4Attention::flash_core) after q and the window's keys: the window's output and
// log-sum-exp; the entries' (HCA's flash call, CSA's sparse attention: their keys, output and log-sum-exp; HCA's mask
// of rows without entries, CSA's kept indices unless a checkpoint keeps them as its decision); the merging softmax's
// weights (B, T, H, parts) in f32, with their copy in the activations' dtype under bf16. `core_input`: the core runs
// in its own checkpoint, whose inputs include the entries (and CSA's kept indices).
void push_flash_core(std::vector<Item>& v, const models::ModelConfig& cfg, const Dims& d, int64_t w, bool csa,
                     Region core, bool core_input, bool kept_decision) {
  const int64_t n = d.n, el = d.el, hd = d.hd, heads = d.h, k = csa ? std::min(cfg.v4.index_topk, w) : 0;
  v.push_back({"window output", n * heads * hd * el, Part::attn, core, false, Discard::none, true, true});
  v.push_back({"window log-sum-exp", n * heads * d.acc, Part::attn, core, false, Discard::none, true, true});
  if (w > 0) {
    v.push_back({"entries", d.b * w * hd * el, Part::attn, core, core_input, Discard::none, true, true});
    if (csa && !kept_decision)  // (B, T, k) i32, saved by the sparse attention
      v.push_back({"kept entries", n * k * 4, Part::attn, core, core_input, Discard::none, true, true});
    v.push_back({"entries output", n * heads * hd * el, Part::attn, core, false, Discard::none, true, true});
    v.push_back({"entries log-sum-exp", n * heads * d.acc, Part::attn, core, false, Discard::none, true, true});
    if (!csa) v.push_back({"rows without entries", n * heads, Part::attn, core, false, Discard::none, true, true});
  }
  const int64_t parts = w > 0 ? 3 : 2;  // the window, the entries, the sink
  v.push_back({"merge weights", n * heads * parts * d.acc, Part::attn, core, false, Discard::none, true, true});
  if (el != d.acc)
    v.push_back({"merge weights (cast)", n * heads * parts * el, Part::attn, core, false, Discard::none, true, true});
}

// The attention (models/deepseek_v4_attention.cpp) after input_layernorm.
void push_attention(std::vector<Item>& v, const models::ModelConfig& cfg, const Dims& d, int64_t l,
                    const LayerRecompute& p, AttentionKernel kernel) {
  const int64_t n = d.n, el = d.el, hd = d.hd, heads = d.h;
  const bool compressed = cfg.is_compressed(l), csa = cfg.is_sparse_compressed(l);
  const int64_t m = csa ? cfg.v4.compress_rate_csa : cfg.v4.compress_rate_hca;
  const int64_t w = compressed ? d.s / m : 0;         // complete windows: the entries
  const int64_t slots = csa ? 2 * m : m;              // a window's slots (CSA's overlap two windows)
  const bool region = compressed && p.csa_attention;  // --recompute-csa-attention's checkpoint
  const Region core = region ? Region::csa_attention : Region::core_attn;
  v.push_back({"q_a_proj input", n * d.c * el, Part::attn, Region::csa_attention, region});              // (B, T, C) h
  v.push_back({"q_a_norm input", n * cfg.q_lora_rank * el, Part::attn});                                 // (B, T, q_r)
  v.push_back({"q_a_norm rstd", n * d.acc, Part::attn});                                                 // (B, T)
  v.push_back({"q_b_proj input", n * cfg.q_lora_rank * el, Part::attn, Region::csa_attention, region});  // q_residual
  v.push_back({"q norm input", n * heads * hd * el, Part::attn});  // (B, T, H, hd)
  v.push_back({"q norm rstd", n * heads * d.acc, Part::attn});     // (B, T, H)
  v.push_back({"kv_norm input", n * hd * el, Part::attn});         // (B, T, hd)
  v.push_back({"kv_norm rstd", n * d.acc, Part::attn});            // (B, T)
  // The window's keys (B, 1, T, hd): the core's keys, or with entries a checkpoint input beside them.
  const Item window = {"window keys", n * hd * el, Part::attn, core, true, Discard::none, true, true};
  if (region && w > 0) v.push_back(window);  // the region's input (the flash core's keys as well)
  if (w > 0) {  // the compressor's entries (models/deepseek_v4_compressor.cpp pooled_entries)
    const Region r = region ? Region::csa_attention : Region::none;
    v.push_back({"compressor softmax", d.b * w * slots * hd * el, Part::attn, r});  // (B, W, l, hd)
    v.push_back({"compressor values", d.b * w * slots * hd * el, Part::attn, r});   // (B, W, l, hd)
    v.push_back({"entries' kv_norm input", d.b * w * hd * el, Part::attn, r});      // (B, W, hd)
    v.push_back({"entries' kv_norm rstd", d.b * w * d.acc, Part::attn, r});         // (B, W)
    if (csa && (p.full || region)) {  // the indexer's choice, a checkpoint decision: (B, T, min(index_topk, W)) i32
      Item kept = {"kept entries", n * std::min(cfg.v4.index_topk, w) * 4, Part::attn, r, region};
      kept.decision = true;
      v.push_back(kept);
    }
  }
  v.push_back({"q (rotated)", n * heads * hd * el, Part::attn, core, true, Discard::none, true, true});
  if (kernel == AttentionKernel::eager) {
    // The composed core: q (B, H, T, hd), the keys (B, 1, T + W, hd), the probabilities with the sink column
    // (B, H, T, T + W + 1).
    if (w > 0)
      v.push_back(
          {"keys with the entries", d.b * (d.s + w) * hd * el, Part::attn, core, !region, Discard::none, true, true});
    else
      v.push_back(window);
    v.push_back({"probabilities", d.b * heads * d.s * (d.s + w + 1) * el, Part::attn, core});
  } else {
    push_flash_core(v, cfg, d, w, csa, region ? Region::csa_attention : Region::core_attn, !region && p.core_attn,
                    p.full || region);
    if (!region || w == 0) v.push_back(window);
  }
  v.push_back({"grouped output", n * heads * hd * el, Part::attn, Region::none, false, Discard::none, true, true});
  v.push_back({"o_b_proj input", n * cfg.v4.o_groups * cfg.v4.o_lora_rank * el, Part::attn});  // (B, T, G R)
}

// The MoE block (models/deepseek_v4_moe.cpp) after post_attention_layernorm, in the moe checkpoint's region.
void push_moe(std::vector<Item>& v, const Dims& d, const std::vector<int64_t>& routed) {
  const int64_t n = d.n, el = d.el, c = d.c, f = d.fm, e = d.e, k = d.k;
  const Region moe = Region::moe;
  v.push_back({"router input", n * c * el, Part::mlp, moe, true});  // (N, C): the norm's output
  // scores = sqrt(softplus(logits)): abs's input (the logits), exp's and sqrt's outputs, log's input, (N, E) each.
  for (const char* name : {"router logits", "router exp", "router log input", "router scores"})
    v.push_back({name, n * e * el, Part::mlp, moe});
  v.push_back({"chosen experts", n * k * 8, Part::mlp, moe});  // (N, k) i64
  v.push_back({"top-k weight sums", n * el, Part::mlp, moe});  // (N, 1)
  v.push_back({"top-k weights", n * k * el, Part::mlp, moe});  // (N, k)
  // The experts run as grouped products over all their rows: one storage each. Without expert parallelism they run
  // the M = N k slots here; with it (models/expert_dispatch.h) this rank's experts run the R rows every rank routed
  // to them (`routed`: rank 0's experts), and the M rows come back.
  const int64_t slots = n * k;
  int64_t rows = 0;
  for (const int64_t m : routed) rows += m;
  const bool dispatched = d.ep > 1;
  if (rows > 0 || dispatched) {
    v.push_back({"expert rows", slots * 8, Part::mlp, moe});  // (M) i64
    if (rows > 0) {
      v.push_back({"expert input", rows * c * el, Part::mlp, moe});                    // (R, C)
      v.push_back({"expert gate_up_proj output", rows * 2 * f * el, Part::mlp, moe});  // (R, 2F)
      v.push_back({"expert clamped gate", rows * f * el, Part::mlp, moe});             // (R, F)
      v.push_back({"expert clamped up (max)", rows * f * el, Part::mlp, moe});         // (R, F)
      v.push_back({"expert swiglu gate", rows * f * el, Part::mlp, moe});              // (R, F)
      v.push_back({"expert swiglu up", rows * f * el, Part::mlp, moe});                // (R, F)
    }
    v.push_back({"expert slots", slots * 8, Part::mlp, moe});                              // (M) i64
    if (rows > 0) v.push_back({"expert down_proj input", rows * f * el, Part::mlp, moe});  // (R, F)
    v.push_back({"expert slot weights", slots * el, Part::mlp, moe});                      // (M, 1)
    v.push_back({"expert output", slots * c * el, Part::mlp, moe});                        // (M, C): returned
    if (dispatched && rows > 0) {
      v.push_back({"received rows' order", rows * 8, Part::mlp, moe});  // (R) i64
      v.push_back({"returned rows' order", rows * 8, Part::mlp, moe});  // (R) i64
    }
  }
  // The shared expert, clamped as the routed ones: gate_proj and up_proj outputs, the clamps' outputs, SwiGLU's
  // inputs, down_proj's input, (N, F) each.
  for (const char* name :
       {"shared gate_proj output", "shared up_proj output", "shared clamped gate", "shared clamped up (max)",
        "shared swiglu gate", "shared swiglu up", "shared down_proj input"})
    v.push_back({name, n * f * el, Part::mlp, moe});
}

}  // namespace

std::vector<Item> deepseek_v4_layer(const models::ModelConfig& cfg, const Dims& d, int64_t l, const LayerRecompute& p,
                                    const std::vector<int64_t>& routed, AttentionKernel kernel) {
  const int64_t n = d.n, el = d.el, hc = cfg.v4.hc_mult, streams = n * hc * d.c * el;  // (B, T, hc, C)
  std::vector<Item> v;
  v.reserve(75);  // the grouped experts: 11 items whatever the routing
  // attn_hc's pre mapping in --mhc-recompute's checkpoint, which keeps the layer's input streams.
  v.push_back({"streams (the layer input)", streams, Part::attn, Region::mhc_attn, true});
  push_pre_mapping(v, d, hc, Part::attn, Region::mhc_attn);
  v.push_back({"input_layernorm input", n * d.c * el, Part::attn});  // (B, T, C): the collapsed streams
  v.push_back({"input_layernorm rstd", n * d.acc, Part::attn});
  push_attention(v, cfg, d, l, p, kernel);
  push_expansion(v, d, hc, Part::attn, "attention output");
  // The mid-layer streams: ffn_hc's checkpoint input; --mhc-recompute discards them (the attention's post mapping is
  // output-discarding) until the layer's backward starts.
  v.push_back({"mid-layer streams", streams, Part::mlp, Region::mhc_ffn, true, Discard::mhc_expand});
  push_pre_mapping(v, d, hc, Part::mlp, Region::mhc_ffn);
  v.push_back({"post_attention_layernorm input", n * d.c * el, Part::mlp});  // (B, T, C)
  v.push_back({"post_attention_layernorm rstd", n * d.acc, Part::mlp});
  push_moe(v, d, routed);
  push_expansion(v, d, hc, Part::mlp, "MoE output");
  return v;
}

OutsideLayers deepseek_v4_outside(const models::ModelConfig& cfg, const ActivationInputs& in, const Dims& d) {
  const int64_t n = d.n, el = d.el, hc = cfg.v4.hc_mult, c = d.c;
  OutsideLayers o;
  o.before = n * 8;  // the ids (B, T) i64
  // The hyper head: its input streams (B, T, hc, C), the norm's rstd and output, the projection's output, the
  // sigmoid's and the pre weights (B, T, hc) each.
  o.after = 2 * n * hc * c * el + n * d.acc + 3 * n * hc * el;
  o.after += n * c * el + n * d.acc;  // the final norm's input and rstd
  o.after += n * c * el;              // the LM head's input
  o.after += n * d.acc + n * 8;       // the loss's log-sum-exp and targets
  // Chunked loss: the gradients w.r.t. the head input and weight instead of the head input, log-sum-exp, targets.
  if (in.loss_chunk > 0) o.after += cfg.vocab_size * c * el - n * d.acc - n * 8;
  return o;
}

}  // namespace tidal::memory::estimator
