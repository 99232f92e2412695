#pragma once
// A Hugging Face model directory (what save_pretrained writes and the Hub serves): config.json, the
// weights as model.safetensors or shards listed in model.safetensors.index.json, and usually
// tokenizer.json. tidal's own checkpoint directories hold the same files, so both load the same way.
#include <functional>
#include <map>
#include <string>

#include "tidal/io/safetensors.h"
#include "tidal/models/causal_lm.h"

namespace tidal::models {

struct PretrainedFiles {
  ModelConfig config;
  std::map<std::string, Tensor> weights;  // Hugging Face names
  std::string tokenizer_path;             // "" when the directory has no tokenizer.json
};

// Reads config.json, the weights (single file or shards) and finds tokenizer.json. Throws naming the
// file that is missing or malformed. `keep`, when given: only the weights it accepts (by name) are
// read (expert parallel: models::held_here); `rows`: of the tensors it names, only those rows (nn::slab_rows).
PretrainedFiles load_pretrained_dir(const std::string& dir, const std::function<bool(const std::string&)>& keep = {},
                                    const io::SelectRows& rows = {});
// Builds the model of the directory and loads its weights.
// The model is built on `device` (the files' host tensors are copied onto it).
std::unique_ptr<CausalLM> load_pretrained_model(const std::string& dir, PretrainedFiles* files = nullptr,
                                                Device device = Device::cpu());
// Writes config.json and model.safetensors (and copies tokenizer.json when given) into `dir`.
void save_pretrained(const CausalLM& model, const std::string& dir, const std::string& tokenizer_path = "");
// The same for a state dict of `config`'s model (Hugging Face names; a LoRA model's merged_state_dict).
void save_pretrained(const ModelConfig& config, const std::map<std::string, Tensor>& state, const std::string& dir,
                     const std::string& tokenizer_path = "");

}  // namespace tidal::models
