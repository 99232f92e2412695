#include "tidal/memory/recompute.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tidal/base/error.h"

namespace tidal::memory {
namespace {

bool has(const std::vector<RecomputeModule>& v, RecomputeModule x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::string RecomputeConfig::describe() const {
  std::string d;
  auto range = [](int64_t m) { return m < 0 ? std::string("all layers") : std::to_string(m) + " layers"; };
  if (granularity == Granularity::full)
    d = std::string("full ") + (method == RecomputeMethod::uniform ? "uniform " : "block ") +
        std::to_string(num_layers);
  if (granularity == Granularity::selective) d = "selective (" + module_list(modules) + ")";
  if (activation_function)
    d += (d.empty() ? "" : " + ") + std::string("activation-function (") + range(activation_num_layers) + ")";
  if (norm) d += (d.empty() ? "" : " + ") + std::string("norm (") + range(norm_num_layers) + ")";
  if (csa_attention) d += (d.empty() ? "" : " + ") + std::string("csa-attention");
  if (mhc) d += (d.empty() ? "" : " + ") + std::string("mhc");
  return d.empty() ? "none" : d;
}

const char* name(Granularity g) {
  return g == Granularity::full ? "full" : g == Granularity::selective ? "selective" : "none";
}

const char* name(RecomputeMethod m) {
  return m == RecomputeMethod::uniform ? "uniform" : m == RecomputeMethod::block ? "block" : "none";
}

std::string module_list(const std::vector<RecomputeModule>& modules) {
  std::string s;
  for (const RecomputeModule m : modules) {
    if (!s.empty()) s += ',';
    s += name(m);
  }
  return s;
}

const char* name(RecomputeModule m) {
  switch (m) {
    case RecomputeModule::core_attn: return "core_attn";
    case RecomputeModule::mlp: return "mlp";
    case RecomputeModule::norm: return "norm";
    case RecomputeModule::moe_act: return "moe_act";
    case RecomputeModule::moe: return "moe";
    case RecomputeModule::mla_up_proj: return "mla_up_proj";
  }
  return "?";
}

nlohmann::json RecomputeConfig::to_json() const {
  nlohmann::json j;
  j["granularity"] = name(granularity);
  j["method"] = name(method);
  j["num_layers"] = num_layers;
  j["activation_function"] = activation_function;
  j["activation_function_num_layers"] = activation_num_layers;
  j["norm"] = norm;
  j["norm_num_layers"] = norm_num_layers;
  j["csa_attention"] = csa_attention;
  j["mhc"] = mhc;
  j["modules"] = nlohmann::json::array();
  for (const RecomputeModule m : modules) j["modules"].push_back(name(m));
  j["description"] = describe();
  return j;
}

void validate_recompute(const RecomputeConfig& c, const models::ModelConfig& model) {
  const int64_t layers = model.num_hidden_layers;
  const int64_t num_layers = c.num_layers;
  if (c.granularity == Granularity::full) {
    TIDAL_CHECK(c.method != RecomputeMethod::none,
                "--recompute-granularity full needs --recompute-method uniform or block");
    TIDAL_CHECK(num_layers >= 1 && num_layers <= layers, "--recompute-granularity full needs --recompute-num-layers N",
                " with 1 <= N <= ", layers, " (the model's layers)",
                num_layers >= 0 ? ", got " + std::to_string(num_layers) : "");
    TIDAL_CHECK(c.modules.empty(), "--recompute-modules is for --recompute-granularity selective, not full");
  } else {
    TIDAL_CHECK(c.method == RecomputeMethod::none, "--recompute-method is only for --recompute-granularity full",
                c.granularity == Granularity::selective ? " (selective takes no method)" : "");
    TIDAL_CHECK(num_layers < 0, "--recompute-num-layers is only for --recompute-granularity full",
                c.granularity == Granularity::selective ? " (selective takes no N)" : "");
  }
  if (c.granularity == Granularity::selective) {
    TIDAL_CHECK(!c.modules.empty(), "--recompute-granularity selective needs a module (--recompute-modules)");
    bool dense = false, sparse = false;
    for (int64_t l = 0; l < layers; ++l) (model.is_moe_layer(l) ? sparse : dense) = true;
    for (const RecomputeModule m : {RecomputeModule::moe_act, RecomputeModule::moe})
      TIDAL_CHECK(!has(c.modules, m) || sparse, "--recompute-modules ", name(m), ": the model (", model.model_type,
                  ") has no mixture-of-experts layer");
    TIDAL_CHECK(!has(c.modules, RecomputeModule::mla_up_proj) || model.is_mla(),
                "--recompute-modules mla_up_proj: the ", "model (", model.model_type,
                ") has no multi-head latent attention (deepseek_v3 has)");
    TIDAL_CHECK(!has(c.modules, RecomputeModule::mlp) || dense,
                "--recompute-modules mlp: every layer of the model is a ",
                "mixture-of-experts layer (use moe or moe_act)");
  } else {
    TIDAL_CHECK(c.modules.empty(), "--recompute-modules is for --recompute-granularity selective");
  }

  if (model.is_deepseek_v4()) {  // models/deepseek_v4.h: full recompute and the core_attn and moe checkpoints
    TIDAL_CHECK(!c.activation_function && !c.norm && !has(c.modules, RecomputeModule::moe_act) &&
                    !has(c.modules, RecomputeModule::norm),
                "deepseek_v4 recomputes whole layers (--recompute-granularity full), selectively the modules "
                "core_attn and moe, and its own parts (--recompute-csa-attention, --mhc-recompute); the "
                "output-discarding ones (--recompute-activation-function, --recompute-norm, "
                "moe_act, norm) are not implemented for it yet");
  }
  for (auto [on, flag] : {std::pair{c.csa_attention, "--recompute-csa-attention"}, {c.mhc, "--mhc-recompute"}}) {
    if (!on) continue;
    TIDAL_CHECK(model.is_deepseek_v4(), flag, ": the model (", model.model_type, ") has no ",
                std::string(flag) == "--mhc-recompute" ? "manifold-constrained hyper-connections"
                                                       : "compressed sparse attention",
                " (deepseek_v4 has)");
    TIDAL_CHECK(c.granularity != Granularity::full || c.method == RecomputeMethod::block, flag,
                " with --recompute-granularity full needs --recompute-method block (uniform recomputes every layer "
                "already)");
  }
  if (c.csa_attention) {
    bool compressed = false;
    for (int64_t l = 0; l < layers; ++l) compressed = compressed || model.is_compressed(l);
    TIDAL_CHECK(compressed,
                "--recompute-csa-attention: the model has no compressed attention layer (its layer_types "
                "are all sliding_attention; compressed_sparse_attention and heavily_compressed_attention layers have "
                "one)");
  }
  TIDAL_CHECK(c.activation_num_layers < 0 || c.activation_function,
              "--recompute-activation-function-num-layers needs --recompute-activation-function");
  TIDAL_CHECK(c.norm_num_layers < 0 || c.norm, "--recompute-norm-num-layers needs --recompute-norm");
  for (auto [on, n, flag] :
       {std::tuple{c.activation_function, c.activation_num_layers, "--recompute-activation-function"},
        std::tuple{c.norm, c.norm_num_layers, "--recompute-norm"}}) {
    if (!on) continue;
    TIDAL_CHECK(n < 0 || n <= layers, flag, "-num-layers must be in [0, ", layers, "], got ", n);
    TIDAL_CHECK(c.granularity != Granularity::selective, flag,
                " cannot be combined with --recompute-granularity selective (use --recompute-modules ",
                std::string(flag) == "--recompute-norm" ? "norm" : "moe_act", " instead)");
    TIDAL_CHECK(c.granularity != Granularity::full || c.method == RecomputeMethod::block, flag,
                " with --recompute-granularity full needs --recompute-method block (uniform recomputes every layer "
                "already)");
  }
}

std::vector<LayerRecompute> plan_recompute(const RecomputeConfig& c, const models::ModelConfig& model) {
  const int64_t layers = model.num_hidden_layers;
  std::vector<LayerRecompute> plan(static_cast<size_t>(layers));
  int64_t full_end = 0;  // layers [0, full_end) are fully recomputed
  if (c.granularity == Granularity::full) {
    if (c.method == RecomputeMethod::uniform) {
      for (int64_t l = 0; l < layers; ++l) {
        LayerRecompute& p = plan[size_t(l)];
        p.full = true;
        p.group_start = l % c.num_layers == 0;
        p.group_size = std::min(c.num_layers, layers - l);
      }
      full_end = layers;
    } else {
      for (int64_t l = 0; l < c.num_layers; ++l) {
        plan[size_t(l)].full = true;
        plan[size_t(l)].group_start = true;
      }
      full_end = c.num_layers;
    }
  }
  auto apply_range = [&](int64_t n, auto&& set) {
    const int64_t end = n < 0 ? layers : std::min(layers, full_end + n);
    for (int64_t l = full_end; l < end; ++l) set(plan[size_t(l)], model.is_moe_layer(l));
  };
  if (c.activation_function)
    apply_range(c.activation_num_layers,
                [](LayerRecompute& p, bool sparse) { (sparse ? p.moe_act : p.activation) = true; });
  if (c.norm) apply_range(c.norm_num_layers, [](LayerRecompute& p, bool) { p.norm = true; });
  // A fully recomputed layer keeps its input only: the finer DeepSeek-V4 policies go to the others.
  for (int64_t l = full_end; l < layers; ++l) {
    plan[size_t(l)].csa_attention = c.csa_attention && model.is_compressed(l);
    plan[size_t(l)].mhc = c.mhc;
  }
  if (c.granularity == Granularity::selective) {
    for (int64_t l = 0; l < layers; ++l) {
      LayerRecompute& p = plan[size_t(l)];
      const bool sparse = model.is_moe_layer(l);
      p.core_attn = has(c.modules, RecomputeModule::core_attn);
      p.norm = has(c.modules, RecomputeModule::norm);
      p.mlp = has(c.modules, RecomputeModule::mlp) && !sparse;
      p.moe = has(c.modules, RecomputeModule::moe) && sparse;
      p.moe_act = has(c.modules, RecomputeModule::moe_act) && sparse && !p.moe;
      p.mla_up_proj = has(c.modules, RecomputeModule::mla_up_proj);
    }
  }
  return plan;
}

nlohmann::json recompute_stats_json(const RecomputeConfig& c, const std::vector<LayerRecompute>& plan,
                                    double recompute_ms) {
  nlohmann::json j;
  j["mode"] = c.describe();
  j["recomputed_layers"] = nlohmann::json::array();
  for (size_t l = 0; l < plan.size(); ++l) {
    const LayerRecompute& p = plan[l];
    if (!p.any()) continue;
    nlohmann::json policies = nlohmann::json::array();
    for (auto [on, name] : {std::pair{p.full, "full"},
                            {p.core_attn, "core_attn"},
                            {p.mlp, "mlp"},
                            {p.moe, "moe"},
                            {p.moe_act, "moe_act"},
                            {p.mla_up_proj, "mla_up_proj"},
                            {p.csa_attention, "csa_attention"},
                            {p.mhc, "mhc"},
                            {p.activation, "activation"},
                            {p.norm, "norm"}})
      if (on) policies.push_back(name);
    j["recomputed_layers"].push_back({{"layer", l}, {"policies", policies}});
  }
  j["recompute_ms"] = recompute_ms;
  return j;
}

}  // namespace tidal::memory
