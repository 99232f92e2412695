#include "tidal/models/peft_adapter.h"

#include <filesystem>

#include "tidal/autograd/grad_mode.h"
#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/io/shown_name.h"

namespace tidal::models {
namespace {

constexpr const char* kPrefix = "base_model.model.";

// A field that must be absent, null, false or empty for tidal to load the adapter as trained.
void refuse_set(const nlohmann::json& j, const char* field, const std::string& where, const char* what) {
  const nlohmann::json* v = json_find(j, field, where);
  if (v == nullptr) return;
  const bool empty = (v->is_boolean() && !v->get<bool>()) || ((v->is_object() || v->is_array()) && v->empty()) ||
                     (v->is_string() && (v->get<std::string>().empty() || v->get<std::string>() == "none"));
  TIDAL_CHECK(empty, where, " sets '", field, "' (", what, "), which tidal does not implement");
}

// peft's settings beyond plain LoRA, which would make another model: each must be unset.
constexpr std::pair<const char*, const char*> kUnsupported[] = {
    {"use_dora", "weight-decomposed LoRA"},
    {"rank_pattern", "per-module ranks"},
    {"alpha_pattern", "per-module alphas"},
    {"layers_to_transform", "adapters on some layers only"},
    {"modules_to_save", "fully trained extra modules"},
    {"bias", "trained biases"},
    {"lora_bias", "a bias on lora_B"},
    {"exclude_modules", "modules left out of the targets"},
    {"layer_replication", "replicated layers"},
    {"trainable_token_indices", "trained embedding rows"},
    {"target_parameters", "adapters on parameters"},
    {"use_qalora", "quantization-aware LoRA"},
    {"use_bdlora", "block-diagonal LoRA"},
    {"alora_invocation_tokens", "activated LoRA"},
    {"arrow_config", "Arrow routing of adapters"},
    {"kasa_config", "a LoRA variant (KaSA)"},
    {"velora_config", "a LoRA variant (VeLoRA)"},
    {"monteclora_config", "a LoRA variant (MonteCLoRA)"},
};

}  // namespace

std::string peft_name(const std::string& name) { return kPrefix + name; }

std::string name_from_peft(const std::string& peft) {
  return peft.starts_with(kPrefix) ? peft.substr(std::string(kPrefix).size()) : std::string();
}

nlohmann::json adapter_config_json(const nn::LoraConfig& config, const nn::AppliedLora& applied,
                                   const std::string& base) {
  nlohmann::json j;
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["base_model_name_or_path"] = base.empty() ? nlohmann::json(nullptr) : nlohmann::json(base);
  j["r"] = config.r;
  j["lora_alpha"] = config.alpha;
  j["lora_dropout"] = config.dropout;
  j["use_rslora"] = config.use_rslora;
  j["target_modules"] = applied.targets;
  j["fan_in_fan_out"] = applied.conv1d;  // GPT-2's Conv1D holds its weight (in, out)
  j["bias"] = "none";
  j["use_dora"] = false;
  j["modules_to_save"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["rank_pattern"] = nlohmann::json::object();
  j["alpha_pattern"] = nlohmann::json::object();
  j["init_lora_weights"] = true;
  j["inference_mode"] = true;
  return j;
}

nn::LoraConfig lora_config_from_json(const nlohmann::json& j, const std::string& where) {
  TIDAL_CHECK(j.is_object(), where, " must be a JSON object, found ", json_kind(j));
  const nlohmann::json* type = json_find(j, "peft_type", where);
  TIDAL_CHECK(type != nullptr && json_string(*type, where + " field 'peft_type'") == "LORA", where,
              " is not a LoRA adapter (peft_type must be \"LORA\")");
  nn::LoraConfig c;
  const nlohmann::json* r = json_find(j, "r", where);
  TIDAL_CHECK(r != nullptr, where, " has no field 'r'");
  c.r = json_int(*r, where + " field 'r'");
  TIDAL_CHECK(c.r > 0, where, " field 'r' must be positive, got ", c.r);
  if (const nlohmann::json* a = json_find(j, "lora_alpha", where))
    c.alpha = json_number(*a, where + " field 'lora_alpha'");
  if (const nlohmann::json* d = json_find(j, "lora_dropout", where))
    c.dropout = json_number(*d, where + " field 'lora_dropout'");
  if (const nlohmann::json* s = json_find(j, "use_rslora", where))
    c.use_rslora = json_bool(*s, where + " field 'use_rslora'");
  const nlohmann::json* targets = json_find(j, "target_modules", where);
  TIDAL_CHECK(targets != nullptr, where, " has no field 'target_modules'");
  if (targets->is_string()) {  // PEFT takes a string as a regular expression, except "all-linear"
    TIDAL_CHECK(targets->get<std::string>() == "all-linear", where,
                " field 'target_modules' is a regular expression, which tidal does not match: list the modules");
    c.target_modules = {"all-linear"};
  } else {
    TIDAL_CHECK(targets->is_array() && !targets->empty(), where,
                " field 'target_modules' must be a non-empty list of module names, found ", json_kind(*targets));
    for (const nlohmann::json& t : *targets)
      c.target_modules.push_back(json_string(t, where + " field 'target_modules'"));
  }
  for (const auto& [field, what] : kUnsupported) refuse_set(j, field, where, what);
  return c;
}

std::map<std::string, Tensor> adapter_tensors(const nn::Module& model) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, p] : model.named_parameters())
    if (nn::is_lora_parameter(name)) out.emplace(peft_name(name), p.detach());
  return out;
}

nn::LoraConfig read_adapter_config(const std::string& dir) {
  namespace fs = std::filesystem;
  TIDAL_CHECK(fs::is_directory(dir), "[lora] --lora-load ", dir, " is not a directory (a PEFT adapter directory, ",
              "or a checkpoint of a LoRA run, holds ", kAdapterConfigFile, " and ", kAdapterWeightsFile, ")");
  const std::string cfg = dir + "/" + kAdapterConfigFile;
  TIDAL_CHECK(fs::exists(cfg), "[lora] ", dir, " has no ", kAdapterConfigFile, ": not a PEFT adapter directory");
  return lora_config_from_json(parse_json(io::read_file(cfg), "[lora] " + cfg), "[lora] " + cfg);
}

std::map<std::string, Tensor> read_adapter_weights(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string weights = dir + "/" + kAdapterWeightsFile;
  TIDAL_CHECK(
      fs::exists(weights), "[lora] ", dir, " has no ", kAdapterWeightsFile,
      fs::exists(dir + "/adapter_model.bin") ? " (only adapter_model.bin: save it with safe_serialization=True)" : "");
  std::map<std::string, Tensor> out;
  for (auto& [key, t] : io::load_safetensors(weights).tensors) {
    const std::string name = name_from_peft(key);
    TIDAL_CHECK(!name.empty() && nn::is_lora_parameter(name), "[lora] ", weights, " holds ", io::shown_name(key),
                ", which is not a LoRA weight of PEFT's naming (base_model.model.<module>.lora_A.weight)");
    out.emplace(name, std::move(t));
  }
  return out;
}

AdapterFiles read_adapter_dir(const std::string& dir) { return {read_adapter_config(dir), read_adapter_weights(dir)}; }

void load_adapter_weights(nn::Module& model, const std::map<std::string, Tensor>& weights, const std::string& source) {
  NoGradGuard no_grad;
  size_t used = 0;
  for (auto& [name, p] : model.named_parameters()) {
    if (!nn::is_lora_parameter(name)) continue;
    auto it = weights.find(name);
    TIDAL_CHECK(it != weights.end(), "[lora] ", source, " has no ", peft_name(name),
                ": the adapter was trained with other --lora-target-modules (or for another model)");
    TIDAL_CHECK(it->second.shape() == p.shape(), "[lora] ", source, " holds ", peft_name(name), " of shape ",
                it->second.shape(), " but this model's is ", p.shape(), " (another --lora-r or model size?)");
    p.copy_(it->second.to(p.dtype()).to(p.device()));
    ++used;
  }
  if (used == weights.size()) return;
  std::map<std::string, bool> ours;
  for (const auto& [name, p] : model.named_parameters()) ours[name] = true;
  for (const auto& [name, t] : weights)
    TIDAL_CHECK(ours.count(name), "[lora] ", source, " holds ", io::shown_name(peft_name(name)),
                ", which this model has no adapter for (the adapter was trained with other --lora-target-modules)");
}

}  // namespace tidal::models
