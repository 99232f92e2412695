#pragma once
// Training checkpoints: everything needed to resume bit for bit. Layout (Megatron's tracker file):
//   DIR/latest_checkpointed_iteration.txt       the iteration of the newest complete checkpoint
//   DIR/iter_0000100/model.safetensors          parameters, Hugging Face names
//   DIR/iter_0000100/optimizer.safetensors      optimizer states
//   DIR/iter_0000100/config.json                the model's Hugging Face config
//   DIR/iter_0000100/state.json                 iteration, RNG, data position, settings, and the
//                                               size and CRC-32 of every file above
//   DIR/iter_0000100/tokenizer.json             (when training on a tokenized corpus)
// A checkpoint is written into a temporary directory, fsynced, renamed into place, and only then
// does the tracker file move to it (atomically): a crash leaves the previous checkpoint intact.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tidal/ops/random.h"
#include "tidal/tensor.h"

namespace tidal::train {

struct TrainingState {
  int64_t iteration = 0;      // optimizer steps completed
  RngState rng;               // the generator after that step
  int64_t data_position = 0;  // training samples consumed
  nlohmann::json settings;    // resolved training settings (for a mismatch check and the record)
  nlohmann::json extra;       // anything else the trainer keeps (e.g. the tokenizer's origin)
};

struct Checkpoint {
  TrainingState state;
  std::map<std::string, Tensor> model, optimizer;
  nlohmann::json config;
  std::string path;            // the iter_* directory it came from
  std::string tokenizer_path;  // its tokenizer.json, or "" when it has none
};

// Writes a checkpoint of `state.iteration` under `dir` (created if needed). Refuses (tidal::Error
// naming the tensor) when a model or optimizer tensor holds a NaN or an infinity.
void save_checkpoint(const std::string& dir, const TrainingState& state, const std::map<std::string, Tensor>& model,
                     const std::map<std::string, Tensor>& optimizer, const nlohmann::json& config,
                     const std::string& tokenizer_path = "");
// Reads the latest complete checkpoint under `dir`, verifying every file's size and CRC-32; throws
// tidal::Error naming the file and what is wrong.
Checkpoint load_checkpoint(const std::string& dir);
// --save DIR before the first step: created if needed, its writability probed (a file created and
// removed), and what a killed save left removed: partial iter_N.tmp-* directories and tracker
// temporaries (nothing else is touched). Returns the names removed, for the log; throws naming --save.
std::vector<std::string> prepare_save_dir(const std::string& dir);
// The iteration the tracker file names, or -1 when `dir` has no checkpoint.
int64_t latest_iteration(const std::string& dir);

}  // namespace tidal::train
