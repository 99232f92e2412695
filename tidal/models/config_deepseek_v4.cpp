#include "tidal/models/config_deepseek_v4.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tidal/base/checked_math.h"
#include "tidal/base/json.h"
#include "tidal/models/config_rope.h"

namespace tidal::models::detail {
namespace {

using json = nlohmann::json;
using tidal::detail::str_cat;

// DeepseekV4Config's defaults (transformers 5.25): DeepSeek-V4-Flash's values.
constexpr int64_t kHeadDim = 512, kQLoraRank = 1024, kTopK = 6, kRouted = 256, kExpertFfn = 2048, kShared = 1;
constexpr int64_t kHcMult = 4, kSinkhornIters = 20, kWindow = 128, kOGroups = 8, kOLoraRank = 1024;
constexpr int64_t kIndexHeads = 64, kIndexHeadDim = 128, kIndexTopK = 512, kHashLayers = 3;
constexpr double kRoutedScaling = 1.5, kSwigluLimit = 10.0, kCompressTheta = 160000.0, kPartialRotary = 64.0 / 512;

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kCsa = "compressed_sparse_attention";
constexpr const char* kHca = "heavily_compressed_attention";

// layer_types, else the legacy per-layer compress_ratios (0 / 4 / 128), else the V4-Pro default (two HCA,
// then CSA and HCA alternating), cut to the layer count as transformers cuts it.
std::vector<std::string> attention_types(const FieldReader& f, int64_t layers) {
  std::vector<std::string> types;
  if (const json* t = f.find("layer_types")) {
    TIDAL_CHECK(t->is_array(), f.where("layer_types"), " must be a list of strings, found ", json_kind(*t));
    for (const json& e : *t) types.push_back(json_string(e, f.where("layer_types")));
  } else if (f.has("compress_ratios")) {
    for (int64_t r : f.get_array("compress_ratios", size_t(kMaxLayers)))
      if (r == 0 || r == 4 || r == 128)
        types.push_back(r == 0 ? kSliding : r == 4 ? kCsa : kHca);
      else
        f.refuse("compress_ratios", std::to_string(r), "each entry must be 0 (sliding), 4 (CSA) or 128 (HCA)");
  } else {
    for (int64_t l = 0; l < layers; ++l) types.push_back(l < 2 || l % 2 == 0 ? kHca : kCsa);
  }
  TIDAL_CHECK(int64_t(types.size()) >= layers, f.where("layer_types"), " lists ", types.size(),
              " layers, the model has ", layers, " (num_hidden_layers)");
  types.resize(size_t(layers));
  return types;
}

// mlp_layer_types, else num_hash_layers (default 3) hash_moe layers and moe for the rest: per layer, hash or not.
std::vector<bool> hash_layers(const FieldReader& f, int64_t layers) {
  std::vector<bool> hash;
  if (const json* t = f.find("mlp_layer_types")) {
    TIDAL_CHECK(t->is_array(), f.where("mlp_layer_types"), " must be a list of strings, found ", json_kind(*t));
    for (const json& e : *t) {
      const std::string s = json_string(e, f.where("mlp_layer_types"));
      if (s != "hash_moe" && s != "moe") f.refuse("mlp_layer_types", "'" + s + "'", "entries are hash_moe or moe");
      hash.push_back(s == "hash_moe");
    }
    TIDAL_CHECK(int64_t(hash.size()) >= layers, f.where("mlp_layer_types"), " lists ", hash.size(),
                " layers, the model has ", layers, " (num_hidden_layers)");
  } else {
    const int64_t n = f.get("num_hash_layers", kHashLayers, 0, kMaxLayers);
    for (int64_t l = 0; l < layers; ++l) hash.push_back(l < n);
  }
  hash.resize(size_t(layers));
  return hash;
}

// The compressed layers' rope dict `r` (`dict` its JSON): the default type, or yarn (the published V4 checkpoints:
// factor 16 over 65536 positions). `flat`: folded from a flat rope dict, where DeepseekV4Config sets
// attention_factor 1 unless given (the V4 reference does not scale cos/sin by YaRN's mscale); a nested dict keeps what
// it says (no attention_factor: transformers' 0.1 ln(factor) + 1).
void read_compress_rope(const FieldReader& top, const FieldReader& r, const json& dict, bool flat, ModelConfig& c) {
  const std::string t = r.get(r.alias("rope_type", "type"), "default");
  if (t == "default") return;
  if (t != "yarn") r.refuse("rope_type", "'" + t + "'", "the compressed layers' rope is default or yarn");
  RopeScaling& s = c.v4.compress_rope_scaling;
  read_yarn(top, r, dict, c.max_position_embeddings, s);
  if (flat && s.attention_factor == 0) s.attention_factor = 1.0;
}

// rope_parameters: {"main": {...}, "compress": {...}} (what the class saves), or a flat dict (or transformers 4.x's
// rope_scaling) whose keys (a YaRN scaling) go to the compressed layers' rope, as DeepseekV4Config folds it.
void read_rope_parameters(const FieldReader& f, ModelConfig& c, double partial) {
  c.rope_theta = f.get("rope_theta", 10000.0);
  c.v4.compress_rope_theta = f.get("compress_rope_theta", kCompressTheta);
  const json* rp = f.find("rope_parameters");
  const char* key = "rope_parameters";
  if (rp == nullptr || (rp->is_object() && rp->empty())) {  // transformers 5: `rope_scaling or rope_parameters`
    rp = f.find("rope_scaling");
    key = "rope_scaling";
  }
  if (rp == nullptr || rp->is_null()) return;
  TIDAL_CHECK(rp->is_object(), f.where(key), " must be an object, found ", json_kind(*rp));
  const bool nested = rp->contains("main") && rp->contains("compress");
  auto check_partial = [&](const FieldReader& r) {
    if (const double p = r.get("partial_rotary_factor", partial); p != partial)
      r.refuse("partial_rotary_factor", json(p).dump(),
               str_cat("it must be the top-level partial_rotary_factor (", partial, ")"));
  };
  if (nested) {
    const FieldReader main((*rp)["main"], f.source(), nullptr, std::string(key) + ".main.");
    const FieldReader comp((*rp)["compress"], f.source(), nullptr, std::string(key) + ".compress.");
    if (const std::string t = main.get("rope_type", "default"); t != "default")
      main.refuse("rope_type", "'" + t + "'",
                  "DeepSeek-V4's sliding layers use the default rope (transformers applies no scaling to them)");
    c.rope_theta = main.get("rope_theta", c.rope_theta);
    c.v4.compress_rope_theta = comp.get("rope_theta", c.v4.compress_rope_theta);
    check_partial(main);
    check_partial(comp);
    read_compress_rope(f, comp, (*rp)["compress"], false, c);
    return;
  }
  const FieldReader r(*rp, f.source(), nullptr, std::string(key) + ".");
  read_compress_rope(f, r, *rp, true, c);
}

}  // namespace

void read_deepseek_v4(const FieldReader& f, ModelConfig& c) {
  auto& v = c.v4;
  c.head_dim = f.get("head_dim", kHeadDim, 2, kMaxWidth);
  c.num_key_value_heads = f.get("num_key_value_heads", int64_t(1), 1, kMaxHeads);
  if (c.num_key_value_heads != 1)
    f.refuse("num_key_value_heads", std::to_string(c.num_key_value_heads),
             "DeepSeek-V4 attends with one shared key/value head (only 1)");
  c.q_lora_rank = f.get("q_lora_rank", kQLoraRank, 1, kMaxWidth);
  // partial_rotary_factor, else the legacy qk_rope_head_dim / head_dim, else 64 / 512.
  double partial = kPartialRotary;
  if (f.has("partial_rotary_factor"))
    partial = f.get("partial_rotary_factor", partial);
  else if (f.has("qk_rope_head_dim"))
    partial = double(f.get("qk_rope_head_dim", int64_t(0), 0, kMaxWidth)) / double(c.head_dim);
  v.rope_dim = int64_t(double(c.head_dim) * partial);  // transformers: int(head_dim * partial_rotary_factor)
  if (!(partial > 0 && partial <= 1) || v.rope_dim % 2 != 0 || v.rope_dim == 0)
    f.refuse("partial_rotary_factor", json(partial).dump(),
             str_cat("it must give an even, positive number of rotary channels of head_dim ", c.head_dim, " (got ",
                     v.rope_dim, ")"));
  if (f.has("qk_rope_head_dim") && f.get("qk_rope_head_dim", v.rope_dim, 0, kMaxWidth) != v.rope_dim)
    f.refuse("qk_rope_head_dim", f.find("qk_rope_head_dim")->dump(),
             str_cat("it must be head_dim * partial_rotary_factor = ", v.rope_dim));
  read_rope_parameters(f, c, partial);
  c.sliding_window = f.get("sliding_window", kWindow, 1, kMaxPositions);
  c.layer_types = attention_types(f, c.num_hidden_layers);
  v.o_groups = f.get("o_groups", kOGroups, 1, kMaxHeads);
  v.o_lora_rank = f.get("o_lora_rank", kOLoraRank, 1, kMaxWidth);

  // The compressed layers' fields.
  if (const json* rates = f.find("compress_rates")) {
    const FieldReader r(*rates, f.source(), nullptr, "compress_rates.");
    v.compress_rate_csa = r.get(kCsa, v.compress_rate_csa, 1, kMaxPositions);
    v.compress_rate_hca = r.get(kHca, v.compress_rate_hca, 1, kMaxPositions);
  }
  v.compress_rate_csa = f.get("compress_rate_csa", v.compress_rate_csa, 1, kMaxPositions);
  v.compress_rate_hca = f.get("compress_rate_hca", v.compress_rate_hca, 1, kMaxPositions);
  v.index_n_heads = f.get("index_n_heads", kIndexHeads, 1, kMaxHeads);
  v.index_head_dim = f.get("index_head_dim", kIndexHeadDim, 2, kMaxWidth);
  v.index_topk = f.get("index_topk", kIndexTopK, 1, kMaxPositions);
  for (size_t l = 0; l < c.layer_types.size(); ++l)
    if (const std::string& t = c.layer_types[l]; t != kSliding && t != kHca && t != kCsa)
      f.refuse("layer_types", str_cat("'", t, "' at layer ", l),
               str_cat("entries are ", kSliding, ", ", kCsa, " or ", kHca));

  c.num_experts = f.get(f.alias("n_routed_experts", "num_local_experts"), kRouted, 1, kMaxExperts);
  c.num_experts_per_tok = f.get("num_experts_per_tok", std::min(kTopK, c.num_experts), 1, c.num_experts);
  c.moe_intermediate_size = f.get(f.alias("moe_intermediate_size", "intermediate_size"), kExpertFfn, 1, kMaxWidth);
  c.intermediate_size = c.moe_intermediate_size;  // the shared experts' width (transformers' attribute_map)
  c.n_shared_experts = f.get("n_shared_experts", kShared, 0, kMaxExperts);
  if (c.n_shared_experts != 1)
    f.refuse("n_shared_experts", std::to_string(c.n_shared_experts),
             "transformers' DeepseekV4 builds one shared expert of moe_intermediate_size whatever it says (only 1)");
  c.routed_scaling_factor = f.get("routed_scaling_factor", kRoutedScaling);
  c.norm_topk_prob = true;  // DeepseekV4's routers always renormalize the chosen weights (harmless field)
  c.router_score = ModelConfig::RouterScore::sigmoid;  // unused by deepseek_v4: its scores are sqrtsoftplus
  c.router_expert_bias = true;                         // e_score_correction_bias of the top-k routers
  c.router_aux_loss_coef = 0;  // no auxiliary loss (transformers adds one only with output_router_logits)
  if (f.get("output_router_logits", false))
    f.refuse("output_router_logits", "true",
             "transformers then adds router_aux_loss_coef x its load-balancing loss, which tidal's deepseek_v4 does "
             "not compute (only false)");
  if (const std::string s = f.get("scoring_func", "sqrtsoftplus"); s != "sqrtsoftplus")
    f.refuse("scoring_func", "'" + s + "'",
             "tidal's deepseek_v4 scores experts with sqrt(softplus) (only sqrtsoftplus)");
  if (const double jitter = f.get("router_jitter_noise", 0.0); jitter != 0.0)
    f.refuse("router_jitter_noise", json(jitter).dump(), "router noise is not implemented (only 0)");
  v.hash_moe = hash_layers(f, c.num_hidden_layers);
  v.swiglu_limit = f.get("swiglu_limit", kSwigluLimit);
  c.hidden_act = f.get("hidden_act", "silu");
  if (c.hidden_act != "silu") f.refuse("hidden_act", "'" + c.hidden_act + "'", "deepseek_v4's experts use silu");
  if (f.get("attention_bias", false)) f.refuse("attention_bias", "true", "DeepSeek-V4's projections have no bias");
  if (c.attention_dropout != 0.0)
    f.refuse("attention_dropout", json(c.attention_dropout).dump(), "dropout on V4's attention is not implemented");

  v.hc_mult = f.get("hc_mult", kHcMult, 1, 64);
  v.hc_sinkhorn_iters = f.get("hc_sinkhorn_iters", kSinkhornIters, 1, 10000);
  v.hc_eps = f.get("hc_eps", 1e-6);
  c.num_nextn_predict_layers = f.get("num_nextn_predict_layers", int64_t(1), 0, kMaxLayers);
}

void write_deepseek_v4(const ModelConfig& c, json& j) {
  const auto& v = c.v4;
  j.erase("intermediate_size");  // DeepseekV4Config's attribute_map: moe_intermediate_size
  j["q_lora_rank"] = c.q_lora_rank;
  j["partial_rotary_factor"] = double(v.rope_dim) / double(c.head_dim);
  j["rope_theta"] = c.rope_theta;
  j["compress_rope_theta"] = v.compress_rope_theta;
  // Nested, as DeepseekV4Config saves it: the main rope default, the compressed layers' default or yarn.
  const double partial = double(v.rope_dim) / double(c.head_dim);
  json compress = {{"rope_type", "default"}, {"rope_theta", v.compress_rope_theta}};
  if (v.compress_rope_scaling.type == RopeType::yarn) write_yarn(v.compress_rope_scaling, compress);
  compress["partial_rotary_factor"] = partial;
  j["rope_parameters"] = {
      {"main", {{"rope_type", "default"}, {"rope_theta", c.rope_theta}, {"partial_rotary_factor", partial}}},
      {"compress", compress}};
  j["sliding_window"] = c.sliding_window;
  j["layer_types"] = c.layer_types;
  std::vector<std::string> mlp;
  for (bool h : v.hash_moe) mlp.push_back(h ? "hash_moe" : "moe");
  j["mlp_layer_types"] = mlp;
  j["compress_rates"] = {{kCsa, v.compress_rate_csa}, {kHca, v.compress_rate_hca}};
  j["o_groups"] = v.o_groups;
  j["o_lora_rank"] = v.o_lora_rank;
  j["index_n_heads"] = v.index_n_heads;
  j["index_head_dim"] = v.index_head_dim;
  j["index_topk"] = v.index_topk;
  j["n_routed_experts"] = c.num_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["n_shared_experts"] = c.n_shared_experts;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["scoring_func"] = "sqrtsoftplus";
  j["swiglu_limit"] = v.swiglu_limit;
  j["hidden_act"] = c.hidden_act;
  j["hc_mult"] = v.hc_mult;
  j["hc_sinkhorn_iters"] = v.hc_sinkhorn_iters;
  j["hc_eps"] = v.hc_eps;
  j["num_nextn_predict_layers"] = 0;  // tidal's deepseek_v4 builds no MTP module, so saves none
}

void validate_deepseek_v4(const ModelConfig& c, const std::string& at) {
  const auto& v = c.v4;
  TIDAL_CHECK(v.hc_mult >= 1 && v.hc_sinkhorn_iters >= 1 && std::isfinite(v.hc_eps) && v.hc_eps >= 0, at,
              "deepseek_v4 needs hc_mult >= 1, hc_sinkhorn_iters >= 1 and a finite hc_eps >= 0 (got ", v.hc_mult, ", ",
              v.hc_sinkhorn_iters, ", ", v.hc_eps, ")");
  TIDAL_CHECK(c.kv_heads() == 1, at, "deepseek_v4 attends with one shared key/value head (num_key_value_heads 1)");
  TIDAL_CHECK(v.rope_dim > 0 && v.rope_dim % 2 == 0 && v.rope_dim <= c.head_size(), at,
              "deepseek_v4 rotates an even, positive number of each head's channels, at most head_dim (got ",
              v.rope_dim, " of ", c.head_size(), ")");
  TIDAL_CHECK(v.o_groups >= 1 && c.num_attention_heads % v.o_groups == 0 && v.o_lora_rank >= 1, at, "o_groups ",
              v.o_groups, " must divide num_attention_heads ", c.num_attention_heads, " (and o_lora_rank be positive)");
  TIDAL_CHECK(c.q_lora_rank >= 1, at, "deepseek_v4 needs q_lora_rank >= 1");
  TIDAL_CHECK(std::isfinite(v.swiglu_limit) && v.swiglu_limit >= 0, at,
              "swiglu_limit must be a finite number >= 0 (0: no clamp), got ", v.swiglu_limit);
  TIDAL_CHECK(int64_t(v.hash_moe.size()) == c.num_hidden_layers, at, "mlp_layer_types lists ", v.hash_moe.size(),
              " layers, the model has ", c.num_hidden_layers);
  TIDAL_CHECK(c.sliding_window >= 1, at, "deepseek_v4 needs sliding_window >= 1");
  for (const std::string& t : c.layer_types)
    TIDAL_CHECK(t == kSliding || t == kHca || t == kCsa, at, "deepseek_v4's layer type '", t, "' is not one of ",
                kSliding, ", ", kCsa, ", ", kHca);
  TIDAL_CHECK(v.compress_rate_hca >= 1 && v.compress_rate_csa >= 1, at, "compress_rates must be >= 1");
  TIDAL_CHECK(v.index_n_heads >= 1 && v.index_topk >= 1 && v.index_head_dim >= v.rope_dim, at,
              "the indexer needs index_n_heads and index_topk >= 1 and index_head_dim >= the rotary channels (",
              v.rope_dim, "), got ", v.index_n_heads, ", ", v.index_topk, ", ", v.index_head_dim);
  TIDAL_CHECK(c.n_shared_experts == 1, at, "deepseek_v4 has one shared expert (n_shared_experts 1)");
  // Dropout is not built into V4's layers (transformers' DeepSeek-V4 configs set attention_dropout 0): refused, never
  // silently left out.
  TIDAL_CHECK(c.attention_dropout == 0 && c.hidden_dropout == 0, at,
              "dropout is not supported for deepseek_v4 yet (attention_dropout ", c.attention_dropout,
              ", hidden dropout ", c.hidden_dropout, "): give --attention-dropout 0 --hidden-dropout 0");
}

int64_t deepseek_v4_parameter_count(const ModelConfig& c) {
  const std::string what = "[config] the parameter count";
  auto mul = [&](std::initializer_list<int64_t> dims) { return checked_product(dims, what); };
  auto sum = [&](std::initializer_list<int64_t> terms) {
    int64_t n = 0;
    for (int64_t t : terms) n = checked_add(n, t, what);
    return n;
  };
  const auto& v = c.v4;
  const int64_t d = c.hidden_size, h = c.num_attention_heads, hd = c.head_size(), q = c.q_lora_rank;
  const int64_t e = c.num_experts, f = c.moe_intermediate_size, n = v.hc_mult, mixes = (2 + n) * n;
  const int64_t attention = sum({mul({d, q}), q, mul({q, h, hd}), mul({d, hd}), hd,  // q_a, q_a_norm, q_b, kv, kv_norm
                                 mul({v.o_groups, v.o_lora_rank, h / v.o_groups, hd}),  // o_a_proj (grouped)
                                 mul({v.o_groups, v.o_lora_rank, d}), h});              // o_b_proj, sinks
  const int64_t mlp = sum({mul({e, 3, f, d}), mul({e, d}), mul({3, d, f})});            // experts, gate, shared expert
  const int64_t hc = mul({2, sum({mul({mixes, n, d}), mixes, 3})});                     // attn_hc and ffn_hc
  const int64_t layer = sum({attention, mlp, hc, 2 * d});                               // and its two norms
  // An HCA layer's compressor: kv_proj, gate_proj (C -> hd), position_bias (m', hd), kv_norm. A CSA layer's: the
  // same twice as wide (its two halves) with kv_norm (hd), and its indexer's at index_head_dim plus q_b_proj and
  // the scorer's weights_proj.
  const int64_t id = v.index_head_dim, ih = v.index_n_heads;
  const int64_t hca = sum({mul({2, d, hd}), mul({v.compress_rate_hca, hd}), hd});
  const int64_t csa = sum({mul({4, d, hd}), mul({v.compress_rate_csa, 2, hd}), hd, mul({4, d, id}),
                           mul({v.compress_rate_csa, 2, id}), id, mul({q, ih, id}), mul({d, ih})});
  int64_t hca_layers = 0, csa_layers = 0;
  for (const std::string& t : c.layer_types) {
    hca_layers += t == kHca ? 1 : 0;
    csa_layers += t == kCsa ? 1 : 0;
  }
  return sum({mul({c.vocab_size, d}), c.tie_word_embeddings ? 0 : mul({c.vocab_size, d}),
              mul({c.num_hidden_layers, layer}), mul({hca_layers, hca}), mul({csa_layers, csa}), d,
              sum({mul({n, n, d}), n, 1})});  // final norm, hc_head
}

}  // namespace tidal::models::detail
