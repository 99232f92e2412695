#pragma once
// LoRA adapters as the `peft` package saves and loads them (PeftModel.save_pretrained /
// from_pretrained): adapter_config.json (LoraConfig's fields) and adapter_model.safetensors, whose
// tensors are named "base_model.model." + the model's own name ("...q_proj.lora_A.weight").
// tidal's checkpoints of a LoRA run hold these two files beside the base model's (docs/finetuning.md).
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tidal/nn/lora.h"

namespace tidal::models {

inline constexpr const char* kAdapterConfigFile = "adapter_config.json";
inline constexpr const char* kAdapterWeightsFile = "adapter_model.safetensors";

// PEFT's key of an adapter parameter and back ("" when `peft` is not one: no "base_model.model." prefix).
std::string peft_name(const std::string& name);
std::string name_from_peft(const std::string& peft);

// adapter_config.json's document for `config` as `applied` resolved it; `base`: the base model's path ("" none).
nlohmann::json adapter_config_json(const nn::LoraConfig& config, const nn::AppliedLora& applied,
                                   const std::string& base);
// The LoRA settings of an adapter_config.json document (`where` names the file). Refuses, naming the field,
// what tidal does not implement (DoRA, per-module ranks, layers_to_transform, biases, modules_to_save, a
// regex target), so an adapter never loads into a different model than the one it was trained as.
nn::LoraConfig lora_config_from_json(const nlohmann::json& j, const std::string& where);

// The adapters of `model` under PEFT's names (detached).
std::map<std::string, Tensor> adapter_tensors(const nn::Module& model);

struct AdapterFiles {
  nn::LoraConfig config;
  std::map<std::string, Tensor> weights;  // the model's own names ("...q_proj.lora_A.weight")
};
// The LoRA settings of DIR/adapter_config.json (lora_config_from_json).
nn::LoraConfig read_adapter_config(const std::string& dir);
// The adapters of DIR/adapter_model.safetensors, by the model's own names.
std::map<std::string, Tensor> read_adapter_weights(const std::string& dir);
// Reads DIR/adapter_config.json and DIR/adapter_model.safetensors. Throws naming the file and what is wrong.
AdapterFiles read_adapter_dir(const std::string& dir);
// Copies `weights` (own names) into the adapters of `model`: each adapter tensor must be there with its shape,
// and nothing else may be (`source` names the file in errors).
void load_adapter_weights(nn::Module& model, const std::map<std::string, Tensor>& weights, const std::string& source);

}  // namespace tidal::models
