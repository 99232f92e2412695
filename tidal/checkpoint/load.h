#pragma once
// Reading a checkpoint (format.h): the latest complete one under a directory, every file verified
// against state.json's record. What a training run takes of it, whatever the layout that saved it and
// the layout resuming it, is rank_state.h's.
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tidal/checkpoint/format.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/config.h"
#include "tidal/nn/lora.h"
#include "tidal/tensor.h"

namespace tidal::checkpoint {

struct Checkpoint {
  TrainingState state;
  std::map<std::string, Tensor> model;      // with a LoRA run's adapters (own names) among them
  std::map<std::string, Tensor> optimizer;  // one process's form; empty when shards.ranks > 0
  OptimizerShards shards;                   // read a rank's file with load_optimizer_shard
  nlohmann::json config;
  std::string path;                    // the iter_* directory it came from
  std::string tokenizer_path;          // its tokenizer.json, or "" when it has none
  nlohmann::json files;                // state.json's record of every file's size and CRC-32
  std::optional<nn::LoraConfig> lora;  // a LoRA run's adapter settings (its adapter_config.json); none otherwise
};

// Reads the latest complete checkpoint under `dir`, verifying every file's size and CRC-32 (a
// sharded optimizer's files: their presence and sizes; load_optimizer_shard checks the CRC-32 of
// those it reads); throws tidal::Error naming the file and what is wrong. `keep`, when given: only
// the model's and the optimizer's tensors it accepts are read (expert parallel: models::held_here); `rows`, when
// given: of the tensors it names, only those rows (io::load_safetensors; a slab's, nn/slab.h).
Checkpoint load_checkpoint(const std::string& dir, const std::function<bool(const std::string&)>& keep = {},
                           const io::SelectRows& rows = {});
// Saved rank `rank`'s optimizer shard of `c` (shards.ranks > 0): its AdamW state_dict, after
// checking the file's CRC-32 and that it is the shard the layout says.
std::map<std::string, Tensor> load_optimizer_shard(const Checkpoint& c, int rank);

// The multi-token-prediction depths (models/mtp.h) among a checkpoint's model tensors, of a model of `layers` decoder
// layers: a --mtp-num-layers run saves depth k as model.layers.<layers + k - 1>.* (its eh_proj tells).
int64_t mtp_depths_held(const std::map<std::string, Tensor>& model, int64_t layers);
// The model of a checkpoint: its config.json, building the MTP depths it holds (ModelConfig::mtp_num_layers is not a
// field of config.json).
models::ModelConfig model_config_of(const Checkpoint& c);

}  // namespace tidal::checkpoint
