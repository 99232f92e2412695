#include "tidal/checkpoint/load.h"

#include <filesystem>
#include <set>

#include "tidal/base/json.h"
#include "tidal/checkpoint/files.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/io/shown_name.h"
#include "tidal/models/peft_adapter.h"

namespace tidal::checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::json;

Checkpoint load_checkpoint(const std::string& dir, const std::function<bool(const std::string&)>& keep,
                           const io::SelectRows& rows) {
  TIDAL_CHECK(fs::is_directory(dir), "[checkpoint] --load ", dir, " is not a directory");
  const int64_t it = latest_iteration(dir);
  TIDAL_CHECK(it >= 0, "[checkpoint] ", dir, " has no ", kTracker, ": no complete checkpoint was saved there");
  Checkpoint c;
  c.path = dir + "/" + iter_name(it);
  TIDAL_CHECK(fs::is_directory(c.path), "[checkpoint] ", dir, "/", kTracker, " names iteration ", it, " but ", c.path,
              " does not exist");
  const std::string state_path = c.path + "/state.json";
  const std::string where = "[checkpoint] " + state_path;
  const json s = parse_json(read_small(state_path, kMaxStateBytes), where);
  c.state.iteration = json_int(required(s, "iteration", where), where + " field 'iteration'");
  const json& rng = required(s, "rng", where);
  c.state.rng.seed = json_u64(required(rng, "seed", where + " field 'rng'"), where + " field 'rng.seed'");
  c.state.rng.offset = json_u64(required(rng, "offset", where + " field 'rng'"), where + " field 'rng.offset'");
  c.state.data_position = json_int(required(s, "data_position", where), where + " field 'data_position'");
  TIDAL_CHECK(c.state.data_position >= 0, where, " field 'data_position' is negative");
  c.state.settings = object_or_empty(s, "settings", where);
  c.state.extra = object_or_empty(s, "extra", where);
  TIDAL_CHECK(c.state.iteration == it, "[checkpoint] ", state_path, " is for iteration ", c.state.iteration,
              " but lives in ", c.path);
  c.shards = read_shards(s, where);
  const json& files = required(s, "files", where);
  TIDAL_CHECK(files.is_object(), where, " field 'files' must be an object, found ", json_kind(files));
  // Only the files a checkpoint has: a name from the file never becomes a path of its choosing.
  std::set<std::string> expected = {"model.safetensors", "config.json"};
  if (c.shards.ranks == 0) expected.insert("optimizer.safetensors");
  for (int r = 0; r < c.shards.ranks; ++r) expected.insert(optimizer_shard_file(r, c.shards.ranks));
  for (const std::string& needed : expected) TIDAL_CHECK(files.contains(needed), where, " lists no ", needed);
  expected.insert("tokenizer.json");
  const bool lora = files.contains(models::kAdapterConfigFile);  // a LoRA run's: both files
  TIDAL_CHECK(lora == files.contains(models::kAdapterWeightsFile), where, " lists only one of ",
              models::kAdapterConfigFile, " and ", models::kAdapterWeightsFile);
  if (lora) expected.insert({models::kAdapterConfigFile, models::kAdapterWeightsFile});
  for (const auto& [name, info] : files.items()) {
    TIDAL_CHECK(expected.count(name), where, " lists a file that is not part of a checkpoint",
                c.shards.ranks > 0 ? " of " + std::to_string(c.shards.ranks) + " optimizer shards" : std::string(),
                ": ", io::shown_name(name));
    // An optimizer shard's CRC-32 is checked by the rank that reads it (load_optimizer_shard).
    const bool shard = name.rfind("optimizer.rank", 0) == 0;
    verify_file(c.path + "/" + name, info, where + " field 'files." + name, !shard);
  }
  c.files = files;
  c.model = io::load_safetensors(c.path + "/model.safetensors", keep, rows).tensors;
  if (c.shards.ranks == 0) c.optimizer = io::load_safetensors(c.path + "/optimizer.safetensors", keep, rows).tensors;
  c.config = parse_json(io::read_file(c.path + "/config.json"), "[checkpoint] " + c.path + "/config.json");
  if (lora) {
    models::AdapterFiles a = models::read_adapter_dir(c.path);
    c.lora = std::move(a.config);
    for (auto& [name, t] : a.weights)
      if (!keep || keep(name)) c.model.emplace(name, std::move(t));
  }
  if (files.contains("tokenizer.json")) c.tokenizer_path = c.path + "/tokenizer.json";
  return c;
}

std::map<std::string, Tensor> load_optimizer_shard(const Checkpoint& c, int rank) {
  TIDAL_ASSERT(rank >= 0 && rank < c.shards.ranks);
  const std::string name = optimizer_shard_file(rank, c.shards.ranks), path = c.path + "/" + name;
  verify_file(path, c.files.at(name), "[checkpoint] " + c.path + "/state.json field 'files." + name, true);
  io::Safetensors st = io::load_safetensors(path);
  for (const auto& [key, value] : shard_metadata(c.shards.layout(), rank)) {
    auto it = st.metadata.find(key);
    TIDAL_CHECK(it != st.metadata.end() && it->second == value, "[checkpoint] ", path,
                " is not the optimizer shard state.json describes: its metadata '", key, "' should be ", value,
                " (was the file copied from another checkpoint?)");
  }
  return std::move(st.tensors);
}

int64_t mtp_depths_held(const std::map<std::string, Tensor>& model, int64_t layers) {
  int64_t depths = 0;
  while (model.count("model.layers." + std::to_string(layers + depths) + ".eh_proj.weight")) ++depths;
  return depths;
}

models::ModelConfig model_config_of(const Checkpoint& c) {
  models::ModelConfig config = models::config_from_json(c.config);
  config.mtp_num_layers = mtp_depths_held(c.model, config.num_hidden_layers);
  return config;
}

}  // namespace tidal::checkpoint
