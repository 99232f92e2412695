#include "tidal/memory/recompute.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tidal/base/error.h"

namespace tidal::memory {
namespace {

const std::vector<std::string> kModules = {"core_attn", "mlp", "norm", "moe_act", "moe"};

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" "));
    item.erase(item.find_last_not_of(" ") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

std::string RecomputeConfig::describe() const {
  std::string d;
  auto range = [](int64_t m) { return m < 0 ? std::string("all layers") : std::to_string(m) + " layers"; };
  if (granularity == Granularity::full)
    d = std::string("full ") + (method == RecomputeMethod::uniform ? "uniform " : "block ") + std::to_string(num_layers);
  if (granularity == Granularity::selective) {
    std::string m;
    for (const std::string& x : modules) m += (m.empty() ? "" : ",") + x;
    d = "selective (" + m + ")";
  }
  if (activation_function) d += (d.empty() ? "" : " + ") + std::string("activation-function (") + range(activation_num_layers) + ")";
  if (norm) d += (d.empty() ? "" : " + ") + std::string("norm (") + range(norm_num_layers) + ")";
  return d.empty() ? "none" : d;
}

const char* name(Granularity g) {
  return g == Granularity::full ? "full" : g == Granularity::selective ? "selective" : "none";
}

const char* name(RecomputeMethod m) {
  return m == RecomputeMethod::uniform ? "uniform" : m == RecomputeMethod::block ? "block" : "none";
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
  j["modules"] = modules;
  j["description"] = describe();
  return j;
}

RecomputeConfig parse_recompute(const std::string& granularity, const std::string& method, int64_t num_layers,
                                bool activation_function, int64_t activation_num_layers, bool norm,
                                int64_t norm_num_layers, const std::string& modules,
                                const models::ModelConfig& model) {
  RecomputeConfig c;
  const int64_t layers = model.num_hidden_layers;
  TIDAL_CHECK(granularity.empty() || granularity == "full" || granularity == "selective",
              "--recompute-granularity must be full or selective, got '", granularity, "'");
  TIDAL_CHECK(method.empty() || method == "uniform" || method == "block",
              "--recompute-method must be uniform or block, got '", method, "'");
  c.modules = split_list(modules);
  if (!c.modules.empty() && granularity.empty()) c.granularity = Granularity::selective;  // modules imply it
  if (granularity == "full") c.granularity = Granularity::full;
  if (granularity == "selective") c.granularity = Granularity::selective;
  c.method = method == "uniform" ? RecomputeMethod::uniform : method == "block" ? RecomputeMethod::block : RecomputeMethod::none;
  c.num_layers = num_layers;

  if (c.granularity == Granularity::full) {
    TIDAL_CHECK(c.method != RecomputeMethod::none,
                "--recompute-granularity full needs --recompute-method uniform or block");
    TIDAL_CHECK(num_layers >= 1 && num_layers <= layers, "--recompute-granularity full needs --recompute-num-layers N",
                " with 1 <= N <= ", layers, " (the model's layers)", num_layers >= 0 ? ", got " + std::to_string(num_layers) : "");
    TIDAL_CHECK(c.modules.empty(), "--recompute-modules is for --recompute-granularity selective, not full");
  } else {
    TIDAL_CHECK(c.method == RecomputeMethod::none, "--recompute-method is only for --recompute-granularity full",
                c.granularity == Granularity::selective ? " (selective takes no method)" : "");
    TIDAL_CHECK(num_layers < 0, "--recompute-num-layers is only for --recompute-granularity full",
                c.granularity == Granularity::selective ? " (selective takes no N)" : "");
  }
  if (c.granularity == Granularity::selective) {
    if (c.modules.empty()) c.modules = {"core_attn"};
    for (const std::string& m : c.modules) {
      TIDAL_CHECK(has(kModules, m), "--recompute-modules: unknown module '", m,
                  "'; valid are core_attn, mlp, norm, moe_act, moe");
    }
    bool dense = false, sparse = false;
    for (int64_t l = 0; l < layers; ++l) (model.is_moe_layer(l) ? sparse : dense) = true;
    for (const char* m : {"moe_act", "moe"})
      TIDAL_CHECK(!has(c.modules, m) || sparse, "--recompute-modules ", m, ": the model (", model.model_type,
                  ") has no mixture-of-experts layer");
    TIDAL_CHECK(!has(c.modules, "mlp") || dense, "--recompute-modules mlp: every layer of the model is a ",
                "mixture-of-experts layer (use moe or moe_act)");
  }

  c.activation_function = activation_function;
  c.activation_num_layers = activation_num_layers;
  c.norm = norm;
  c.norm_num_layers = norm_num_layers;
  TIDAL_CHECK(activation_num_layers < 0 || activation_function,
              "--recompute-activation-function-num-layers needs --recompute-activation-function");
  TIDAL_CHECK(norm_num_layers < 0 || norm, "--recompute-norm-num-layers needs --recompute-norm");
  for (auto [on, n, flag] : {std::tuple{activation_function, activation_num_layers, "--recompute-activation-function"},
                             std::tuple{norm, norm_num_layers, "--recompute-norm"}}) {
    if (!on) continue;
    TIDAL_CHECK(n < 0 || n <= layers, flag, "-num-layers must be in [0, ", layers, "], got ", n);
    TIDAL_CHECK(c.granularity != Granularity::selective, flag,
                " cannot be combined with --recompute-granularity selective (use --recompute-modules ",
                std::string(flag) == "--recompute-norm" ? "norm" : "moe_act", " instead)");
    TIDAL_CHECK(c.granularity != Granularity::full || c.method == RecomputeMethod::block, flag,
                " with --recompute-granularity full needs --recompute-method block (uniform recomputes every layer "
                "already)");
  }
  return c;
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
    apply_range(c.activation_num_layers, [](LayerRecompute& p, bool sparse) { (sparse ? p.moe_act : p.activation) = true; });
  if (c.norm) apply_range(c.norm_num_layers, [](LayerRecompute& p, bool) { p.norm = true; });
  if (c.granularity == Granularity::selective) {
    for (int64_t l = 0; l < layers; ++l) {
      LayerRecompute& p = plan[size_t(l)];
      const bool sparse = model.is_moe_layer(l);
      p.core_attn = has(c.modules, "core_attn");
      p.norm = has(c.modules, "norm");
      p.mlp = has(c.modules, "mlp") && !sparse;
      p.moe = has(c.modules, "moe") && sparse;
      p.moe_act = has(c.modules, "moe_act") && sparse && !p.moe;
    }
  }
  return plan;
}

}  // namespace tidal::memory
