#include "tidal/nn/lora.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "tidal/base/error.h"
#include "tidal/rng.h"

namespace tidal::nn {
namespace {

// MindSpeed-LLM names its targets after Megatron's fused modules; each stands for the Hugging Face
// modules of whichever family is built (those a model lacks simply match nothing).
const std::map<std::string, std::vector<std::string>>& megatron_names() {
  static const std::map<std::string, std::vector<std::string>> names = {
      {"linear_qkv",
       {"q_proj", "k_proj", "v_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "attn.c_attn"}},
      {"linear_proj", {"self_attn.o_proj", "attn.c_proj"}},
      {"linear_fc1", {"gate_proj", "up_proj", "mlp.c_fc"}},
      {"linear_fc2", {"down_proj", "mlp.c_proj"}},
  };
  return names;
}

// FNV-1a of a module's name.
uint64_t name_hash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool matches(const std::string& module, const std::string& target) {
  return module == target || (module.size() > target.size() && module.ends_with("." + target));
}

std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

double LoraConfig::scaling() const { return use_rslora ? alpha / std::sqrt(double(r)) : alpha / double(r); }

AppliedLora apply_lora(Module& root, const LoraConfig& config, const Init& init) {
  TIDAL_CHECK(config.r > 0, "[lora] --lora-r must be positive, got ", config.r);
  TIDAL_CHECK(config.dropout >= 0 && config.dropout < 1, "[lora] --lora-dropout must be in [0, 1), got ",
              config.dropout);
  for (auto& [name, p] : root.named_parameters()) p.set_requires_grad(false);
  std::vector<Adaptable*> layers;
  std::set<std::string> adaptable_names;  // last name components, for the error message
  root.for_each_module([&](Module& m) {
    auto* a = dynamic_cast<Adaptable*>(&m);
    if (a == nullptr || std::string(m.name()).empty()) return;
    layers.push_back(a);
    if (a->accepts_lora()) {
      const std::string n = m.name();
      adaptable_names.insert(n.substr(n.rfind('.') + 1));
    }
  });
  AppliedLora out;
  std::set<Adaptable*> chosen;
  for (const std::string& target : config.target_modules) {
    const bool all = target == "all-linear";
    auto alias = megatron_names().find(target);
    const std::vector<std::string> names =
        alias != megatron_names().end() ? alias->second : std::vector<std::string>{target};
    bool any = false;
    for (const std::string& t : names) {
      bool hit = false;
      for (Adaptable* a : layers) {
        if (all ? !a->accepts_lora() : !matches(a->name(), t)) continue;
        TIDAL_CHECK(a->accepts_lora(), "[lora] --lora-target-modules ", target, " names ", a->name(),
                    ", which cannot take an adapter (its weight is used outside its forward: the MoE router "
                    "or the LM head); adaptable modules: ",
                    joined(adaptable_names));
        chosen.insert(a);
        hit = true;
      }
      if (hit && !all) out.targets.push_back(t);
      any = any || hit;
    }
    if (all && any) {
      for (const std::string& n : adaptable_names) out.targets.push_back(n);
    }
    TIDAL_CHECK(any, "[lora] --lora-target-modules ", target,
                " matches no linear layer of this model; its "
                "adaptable modules are: ",
                joined(adaptable_names),
                " (or all-linear, linear_qkv, linear_proj, "
                "linear_fc1, linear_fc2)");
  }
  std::sort(out.targets.begin(), out.targets.end());
  out.targets.erase(std::unique(out.targets.begin(), out.targets.end()), out.targets.end());
  // Each adapter draws from its own stream, seeded by the generator's seed and its module's name: the same
  // values whichever modules a process holds (expert parallel builds some experts only) and in whatever
  // order; the generator itself is left where it was, so training draws what it would without LoRA.
  const RngState before = get_rng_state();
  for (Adaptable* a : layers) {
    if (!chosen.count(a)) continue;
    set_rng_state({before.seed ^ name_hash(a->name()), 0});
    a->add_lora(config.r, config.scaling(), config.dropout, init);
    out.modules.push_back(a->name());
    out.conv1d = out.conv1d || dynamic_cast<Conv1D*>(a) != nullptr;
  }
  set_rng_state(before);
  root.assign_names(root.name());
  return out;
}

bool is_lora_parameter(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

std::map<std::string, Tensor> merged_state_dict(Module& root) {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : root.state_dict())
    if (!is_lora_parameter(name)) out.emplace(name, t);
  root.for_each_module([&](Module& m) {
    auto* a = dynamic_cast<Adaptable*>(&m);
    if (a == nullptr || !a->has_lora()) return;
    const std::string key = std::string(m.name()) + ".weight";
    TIDAL_ASSERT(out.count(key), "no weight ", key, " to merge into");
    out[key] = a->merged_weight();
  });
  return out;
}

}  // namespace tidal::nn
