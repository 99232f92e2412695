// What a training step saves, item by item (memory/estimator_items.h).
#include "tidal/memory/estimator_items.h"

#include "tidal/memory/estimator_deepseek_v4.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "tidal/base/error.h"

namespace tidal::memory::estimator {
namespace {

// Eager attention's matrices (probabilities, and with dropout its mask and the dropped ones) and, under
// context parallelism, the gathered K and V (ops/context_gather_attention.h), in the order of their
// first saves: one (B, H, s, s) matrix; or the whole K, one chunk of queries against the keys before
// it, the whole V, the other chunk (rank 0's: L x L, then L x 2C·L; L = s / 2). `k_width`, `v_width`: a
// token's K and V elements (0: d.akv, every family's but MLA's).
void push_eager_core(std::vector<Item>& v, const Dims& d, const char* gathered_k, const char* gathered_v,
                     int64_t k_width = 0, int64_t v_width = 0) {
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
  const int64_t tokens = d.b * d.s * d.cp, l = d.s / 2;
  const int64_t k_bytes = tokens * (k_width > 0 ? k_width : d.akv) * d.el;
  const int64_t v_bytes = tokens * (v_width > 0 ? v_width : d.akv) * d.el;
  v.push_back({gathered_k, k_bytes, Part::attn, Region::core_attn, false, Discard::none, true, true});
  matrix(d.b * d.h * l * l);
  v.push_back({gathered_v, v_bytes, Part::attn, Region::core_attn, false, Discard::none, true, true});
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

// The attention half of a Llama-family layer (Llama, Mistral, Qwen, Gemma 3): input_layernorm, the
// projections, QK-norm, RoPE and the core, up to o_proj's input.
std::vector<Item> llama_attention(const Dims& d, const models::ModelConfig& cfg, AttentionKernel kernel,
                                  bool core_recompute, size_t reserve) {
  const int64_t el = d.el, n = d.n, c = d.c;
  std::vector<Item> v = {
      {"input_layernorm input", n * c * el, Part::attn},
      {"input_layernorm rstd", n * d.acc, Part::attn, Region::none, false, Discard::norm1, false},
      {"q/k/v_proj input", n * c * el, Part::attn, Region::none, false, Discard::norm1},
  };
  v.reserve(v.size() + reserve);
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
  return v;
}

// DeepSeek's multi-head latent attention (models/mla.cpp): input_layernorm, the two down-projections of its
// output, the latents' norms and up-projections, then the core over query and key (concatenations of
// the no-RoPE and rotated parts) and the values, a view of kv_b_proj's output that keeps all of it. The
// q_b/q_proj output, the de-interleaved and rotated parts are freed in forward (nothing saves them).
std::vector<Item> mla_attention(const Dims& d, const models::ModelConfig& cfg, AttentionKernel kernel,
                                bool core_recompute, size_t reserve) {
  const int64_t el = d.el, n = d.n, c = d.c, h = d.h;
  const int64_t qk = h * cfg.qk_head_size(), vh = h * cfg.v_head_dim, latent = cfg.kv_lora_rank;
  std::vector<Item> v = {
      {"input_layernorm input", n * c * el, Part::attn},
      {"input_layernorm rstd", n * d.acc, Part::attn, Region::none, false, Discard::norm1, false},
      {"q_a/kv_a_proj input", n * c * el, Part::attn, Region::none, false, Discard::norm1},
  };
  v.reserve(v.size() + reserve);
  // mla_up_proj keeps the two down-projections' outputs (the q_a_layernorm and kv_a_layernorm inputs) and
  // frees the rest up to the core's inputs; its recompute saves the internals again.
  const Discard up = Discard::up_proj;
  if (cfg.q_lora_rank > 0) {
    v.push_back({"q_a_layernorm input", n * cfg.q_lora_rank * el, Part::attn});
    v.push_back({"q_a_layernorm rstd", n * d.acc, Part::attn, Region::none, false, up, false});
    v.push_back({"q_b_proj input", n * cfg.q_lora_rank * el, Part::attn, Region::none, false, up, false});
  }
  v.push_back({"query", n * qk * el, Part::attn, Region::core_attn, true, up, true, true});
  v.push_back({"kv_a_layernorm input", n * (latent + cfg.qk_rope_head_dim) * el, Part::attn});
  v.push_back({"kv_a_layernorm rstd", n * d.acc, Part::attn, Region::none, false, up, false});
  v.push_back({"kv_b_proj input", n * latent * el, Part::attn, Region::none, false, up, false});
  // Under context parallelism eager attention saves the gathered K and V, not these (as llama_attention).
  const bool local_kv = kernel != AttentionKernel::eager || d.cp == 1 || core_recompute;
  const int64_t kv_b_out = n * (h * cfg.qk_nope_head_dim + vh) * el;
  const Item key = {"key", n * qk * el, Part::attn, Region::core_attn, true, up, true, true};
  const Item value = {"kv_b_proj output (values)", kv_b_out, Part::attn, Region::core_attn, true, up, true, true};
  if (kernel == AttentionKernel::eager) {
    if (local_kv) v.insert(v.end(), {value, key});  // kv_b_proj's output exists before the key is assembled
    push_eager_core(v, d, "gathered key", "gathered values", qk, vh);
    v.push_back({"o_proj input", n * vh * el, Part::attn});
  } else {
    v.push_back(value);
    v.push_back(key);
    v.push_back({"attention output", n * vh * el, Part::attn, Region::none, false, Discard::none, true, true});
    v.push_back({"log-sum-exp", d.b * h * d.s * d.acc, Part::attn, Region::none, false, Discard::none, true, true});
  }
  return v;
}

// The dense gated MLP's saved tensors after its input norm.
void push_gated_mlp(std::vector<Item>& v, const Dims& d) {
  const int64_t el = d.el, n = d.n, c = d.c;
  v.push_back({"gate/up_proj input", n * c * el, Part::mlp, Region::mlp, true, Discard::norm2});
  v.push_back({"gate_proj output", n * d.f * el, Part::mlp, Region::mlp});
  v.push_back({"up_proj output", n * d.f * el, Part::mlp, Region::mlp});
  v.push_back({"down_proj input", n * d.f * el, Part::mlp, Region::mlp, false, Discard::act});
}

// Gemma 3: the attention half, its output's post_attention_layernorm, pre_feedforward_layernorm, the
// GeGLU MLP (saving what SwiGLU saves), post_feedforward_layernorm of the MLP's output.
std::vector<Item> gemma3_layer(const Dims& d, const models::ModelConfig& cfg, AttentionKernel kernel,
                               bool core_recompute) {
  const int64_t el = d.el, n = d.n, c = d.c;
  std::vector<Item> v = llama_attention(d, cfg, kernel, core_recompute, 16);
  v.push_back({"post_attention_layernorm input", n * c * el, Part::attn});
  v.push_back({"post_attention_layernorm rstd", n * d.acc, Part::attn});
  v.push_back({"pre_feedforward_layernorm input", n * c * el, Part::mlp});
  v.push_back({"pre_feedforward_layernorm rstd", n * d.acc, Part::mlp, Region::none, false, Discard::norm2, false});
  push_gated_mlp(v, d);
  v.push_back({"post_feedforward_layernorm input", n * c * el, Part::mlp});
  v.push_back({"post_feedforward_layernorm rstd", n * d.acc, Part::mlp});
  return v;
}

std::vector<Item> llama_layer(const Dims& d, const models::ModelConfig& cfg, int64_t l, AttentionKernel kernel,
                              bool core_recompute, const std::vector<int64_t>& expert_tokens) {
  const int64_t el = d.el, n = d.n, c = d.c;
  const size_t reserve = 33;
  std::vector<Item> v = cfg.is_mla() ? mla_attention(d, cfg, kernel, core_recompute, reserve)
                                     : llama_attention(d, cfg, kernel, core_recompute, reserve);
  v.push_back({"post_attention_layernorm input", n * c * el, Part::mlp});
  v.push_back({"post_attention_layernorm rstd", n * d.acc, Part::mlp, Region::none, false, Discard::norm2, false});
  if (!cfg.is_moe_layer(l)) {
    push_gated_mlp(v, d);
    return v;
  }
  // Sparse MoE block (moe.cpp): router, top-k bookkeeping, then the experts on their tokens (N*k
  // (token, expert) slots in all).
  const int64_t slots = n * d.k;
  v.push_back({"router input", n * c * el, Part::mlp, Region::moe, true, Discard::norm2});
  if (cfg.router_score == models::ModelConfig::RouterScore::sigmoid && el != 4) {
    // DeepSeek-V3's router in f32 (Router::logits): the widened input and weight its product saves.
    v.push_back({"router input (f32)", n * c * 4, Part::mlp, Region::moe});
    v.push_back({"router weight (f32)", d.e * c * 4, Part::mlp, Region::moe});
  }
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
  // The experts run as grouped products (moe.cpp run_experts): each tensor one storage over all their rows.
  int64_t received = 0;
  for (const int64_t m : expert_tokens) received += m;
  if (received > 0) {
    v.push_back({"expert input", received * c * el, Part::mlp, Region::moe});
    v.push_back({"expert gate_proj output", received * d.fm * el, Part::mlp, Region::moe});
    v.push_back({"expert up_proj output", received * d.fm * el, Part::mlp, Region::moe});
    v.push_back({"expert down_proj input", received * d.fm * el, Part::mlp, Region::moe, false, Discard::act});
    if (!dispatched) v.push_back({"expert output", received * c * el, Part::mlp, Region::moe});
  }
  if (dispatched) {
    if (received > 0) {
      v.push_back({"received rows' order", received * 8, Part::mlp, Region::moe});
      v.push_back({"returned rows' order", received * 8, Part::mlp, Region::moe});
    }
    v.push_back({"returned rows", slots * c * el, Part::mlp, Region::moe});
  }
  if (cfg.n_shared_experts > 0) {  // DeepSeek-V3's shared experts, on every token (their input: the router's)
    const int64_t fs = cfg.n_shared_experts * d.fm;
    v.push_back({"shared experts gate_proj output", n * fs * el, Part::mlp, Region::moe});
    v.push_back({"shared experts up_proj output", n * fs * el, Part::mlp, Region::moe});
    v.push_back({"shared experts down_proj input", n * fs * el, Part::mlp, Region::moe, false, Discard::act});
  }
  return v;
}

// LoRA (ActivationInputs::lora): the items only frozen linear layers would keep are gone, and each adapter's (N, r)
// input to lora_B comes after its module's input. `layer`: the module names' prefix ("model.layers.3.").
struct LinearInput {
  const char* item;                    // the item of the saved input
  std::vector<const char*> consumers;  // the linear layers that save it (their names in the layer)
  bool shared = false;                 // another op saves it too (flash attention its output)
};

std::vector<LinearInput> linear_inputs(const models::ModelConfig& cfg) {
  // Under flash attention the output projection's input is the kernel's output, which the kernel keeps too.
  if (cfg.is_gpt2())
    return {{"c_attn input", {"attn.c_attn"}},
            {"c_proj input", {"attn.c_proj"}},
            {"attention output", {"attn.c_proj"}, true},
            {"c_fc input", {"mlp.c_fc"}},
            {"mlp c_proj input", {"mlp.c_proj"}}};
  std::vector<LinearInput> out = {{"o_proj input", {"self_attn.o_proj"}},
                                  {"attention output", {"self_attn.o_proj"}, true},
                                  {"gate/up_proj input", {"mlp.gate_proj", "mlp.up_proj"}},
                                  {"down_proj input", {"mlp.down_proj"}}};
  if (cfg.is_mla()) {
    out.push_back({"q_a/kv_a_proj input",
                   {cfg.q_lora_rank > 0 ? "self_attn.q_a_proj" : "self_attn.q_proj", "self_attn.kv_a_proj_with_mqa"}});
    out.push_back({"q_b_proj input", {"self_attn.q_b_proj"}});
    out.push_back({"kv_b_proj input", {"self_attn.kv_b_proj"}});
  } else {
    out.push_back({"q/k/v_proj input", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}});
  }
  return out;
}

void apply_lora_items(std::vector<Item>& v, const models::ModelConfig& cfg, const ActivationInputs& in, const Dims& d,
                      int64_t l, bool first_block_kept) {
  const std::string layer = (cfg.is_gpt2() ? "transformer.h." : "model.layers.") + std::to_string(l) + ".";
  auto adapted = [&](const char* module) {
    return std::find(in.lora_modules.begin(), in.lora_modules.end(), layer + module) != in.lora_modules.end();
  };
  std::vector<Item> out;
  // Layer 0 before its first adapter: nothing needs a gradient (the frozen embedding's output feeds it), so nothing
  // is saved — but a full-recompute block's checkpoint keeps its input.
  bool grad = l > 0;
  const std::vector<LinearInput> inputs = linear_inputs(cfg);
  for (const Item& it : v) {
    bool keep = grad;  // saved by its op, which needs it for a gradient
    int64_t adapters = 0;
    for (const LinearInput& li : inputs) {
      if (std::string_view(it.name) != li.item) continue;
      for (const char* m : li.consumers) adapters += adapted(m) ? 1 : 0;
      keep = adapters > 0 || (li.shared && grad);  // a frozen layer keeps no input; an adapter keeps its own
    }
    grad = grad || adapters > 0;
    if (keep || (&it == &v.front() && first_block_kept)) out.push_back(it);
    for (int64_t a = 0; a < adapters; ++a)
      out.push_back({"lora_B input", d.n * in.lora_r * d.el, it.part, it.region, false, Discard::none, true, false});
  }
  v = std::move(out);
}

}  // namespace

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

std::vector<std::vector<Item>> layer_items(const models::ModelConfig& cfg, const ActivationInputs& in, const Dims& d) {
  std::vector<std::vector<Item>> items(static_cast<size_t>(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    if (cfg.is_gpt2()) {
      items[size_t(l)] = gpt2_layer(d, in.kernel);
      continue;
    }
    if (cfg.is_deepseek_v4()) {  // every layer a MoE
      const LayerRecompute p = size_t(l) < in.plan.size() ? in.plan[size_t(l)] : LayerRecompute{};
      items[size_t(l)] = deepseek_v4_layer(cfg, d, l, p, routed_tokens(in, d, l), in.kernel);
      continue;
    }
    const std::vector<int64_t> routed = cfg.is_moe_layer(l) ? routed_tokens(in, d, l) : std::vector<int64_t>{};
    const bool core_recompute = size_t(l) < in.plan.size() && in.plan[size_t(l)].core_attn;
    items[size_t(l)] = cfg.is_gemma3() ? gemma3_layer(d, cfg, in.kernel, core_recompute)
                                       : llama_layer(d, cfg, l, in.kernel, core_recompute, routed);
  }
  if (in.lora)
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
      apply_lora_items(items[size_t(l)], cfg, in, d, l, !in.plan.empty() && in.plan[0].full);
  return items;
}

std::vector<MtpDepth> mtp_depths(const models::ModelConfig& cfg, const ActivationInputs& in, const Dims& d) {
  std::vector<MtpDepth> out;
  const int64_t el = d.el, n = d.n, c = d.c;
  const bool core_recompute = !in.plan.empty() && in.plan.back().core_attn;  // the last layer's plan
  for (int64_t k = 1; k <= cfg.mtp_num_layers; ++k) {
    const int64_t l = cfg.num_hidden_layers + k - 1;
    MtpDepth m;
    m.before = {{"mtp ids", n * 8, Part::attn},
                {"enorm input", n * c * el, Part::attn},
                {"enorm rstd", n * d.acc, Part::attn},
                {"hnorm rstd", n * d.acc, Part::attn},
                {"eh_proj input", 2 * n * c * el, Part::attn}};
    const std::vector<int64_t> routed = cfg.is_moe_layer(l) ? routed_tokens(in, d, l) : std::vector<int64_t>{};
    m.layer = llama_layer(d, cfg, l, in.kernel, core_recompute, routed);
    m.after = {{"shared_head.norm input", n * c * el, Part::mlp},
               {"shared_head.norm rstd", n * d.acc, Part::mlp},
               {"mtp hidden", n * c * el, Part::mlp}};
    m.loss = in.loss_chunk > 0 ? cfg.vocab_size * c * el : n * d.acc + n * 8;
    out.push_back(std::move(m));
  }
  return out;
}

OutsideLayers outside_layers(const models::ModelConfig& cfg, const ActivationInputs& in, const Dims& d) {
  if (cfg.is_deepseek_v4()) return deepseek_v4_outside(cfg, in, d);
  OutsideLayers o{d.n * 8, d.n * d.c * d.el + d.n * d.acc + d.n * d.c * d.el + d.n * d.acc + d.n * 8};
  if (cfg.is_gpt2()) {
    o.before += d.s * 8 + (d.drop_hidden ? d.n * d.c : 0);
    o.after += d.n * d.acc;  // layer_norm keeps mean and rstd
  }
  if (cfg.is_moe() && cfg.router_aux_loss_coef != 0) o.after += d.k * d.e * 4;  // the aux loss's counts
  // Chunked loss saves the gradients w.r.t. the head input (N, C) and weight (V, C) instead of the
  // head input, the log-sum-exp and the targets (ops/chunked_loss.cpp, Note [Chunked loss memory]).
  // Both in the activations' dtype (bf16: cast from the f32 the loss computes in).
  if (in.loss_chunk > 0) o.after += cfg.vocab_size * d.c * d.el - d.n * d.acc - d.n * 8;
  if (in.lora) {  // the frozen embeddings keep no ids (nor GPT-2's dropout its mask), the frozen LM head no input
    o.before = 0;
    if (in.loss_chunk == 0) o.after -= d.n * d.c * d.el;
  }
  return o;
}

}  // namespace tidal::memory::estimator
