#include "tidal/models/pretrained.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/io/shown_name.h"
#include "tidal/models/deepseek_v4_checkpoint.h"

namespace tidal::models {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

// The largest model.safetensors.index.json read (a 1T-parameter model's lists a few MB).
constexpr uintmax_t kMaxIndexBytes = 100'000'000;

// Whether `path` is `root` or lies below it (both canonical).
bool is_within(const fs::path& path, const fs::path& root) {
  auto [r, p] = std::mismatch(root.begin(), root.end(), path.begin(), path.end());
  return r == root.end();
}

// `file` (the path of `name`, a file of the model directory `dir`) after checking that it stays in the
// directory: `name` is relative, has no ".." component, and the file it resolves to (following
// symlinks) is a regular file inside `dir` — or, for a snapshot of the Hugging Face cache
// (.../models--org--name/snapshots/REV), inside that repository's blobs/. `what` names the entry for the
// error, which never reads the target.
std::string resolve_inside(const std::string& dir, const std::string& name, const std::string& file,
                           const std::string& what) {
  const fs::path rel(name);
  bool dotdot = false;
  for (const fs::path& part : rel) dotdot = dotdot || part == "..";
  TIDAL_CHECK(!name.empty() && !rel.is_absolute() && !dotdot, "[pretrained] ", what, " names the file ",
              io::shown_name(name),
              ": shards must be plain names inside the model directory (no absolute path, no '..')");
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(fs::absolute(dir), ec);
  const fs::path target = fs::weakly_canonical(fs::absolute(file), ec);
  TIDAL_CHECK(!ec, "[pretrained] ", what, ": cannot resolve ", io::shown_name(name), " (", ec.message(), ")");
  const bool hub_snapshot = root.parent_path().filename() == "snapshots";
  const fs::path blobs = root.parent_path().parent_path() / "blobs";
  TIDAL_CHECK(is_within(target, root) || (hub_snapshot && is_within(target, blobs)), "[pretrained] ", what, " names ",
              io::shown_name(name), ", which is a symlink to a file outside ", dir, ": refused (copy the file in)");
  TIDAL_CHECK(fs::is_regular_file(target, ec), "[pretrained] ", what, " names ", io::shown_name(name),
              ", which is not a regular file in ", dir);
  return file;
}

// The shard files of a sharded checkpoint's index, each checked by resolve_inside, in name order.
std::vector<std::string> index_shards(const std::string& dir, const std::string& index) {
  TIDAL_CHECK(fs::is_regular_file(index) && fs::file_size(index) <= kMaxIndexBytes, "[pretrained] ", index,
              " is not a regular file of at most ", kMaxIndexBytes, " bytes");
  const json j = parse_json(io::read_file(index), "[pretrained] " + index);
  const json* map = json_find(j, "weight_map", "[pretrained] " + index);
  TIDAL_CHECK(map != nullptr && map->is_object(), "[pretrained] ", index, " has no weight_map object",
              map ? ", found " + json_kind(*map) : std::string());
  std::set<std::string> names;
  for (const auto& [tensor, file] : map->items()) {
    const std::string entry = index + " weight_map entry " + io::shown_name(tensor);
    const std::string name = json_string(file, "[pretrained] " + entry);
    if (names.insert(name).second) resolve_inside(dir, name, dir + "/" + name, entry);
  }
  std::vector<std::string> shards;
  for (const std::string& name : names) shards.push_back(dir + "/" + name);
  return shards;
}
}  // namespace

PretrainedFiles load_pretrained_dir(const std::string& dir, const std::function<bool(const std::string&)>& keep,
                                    const io::SelectRows& rows) {
  TIDAL_CHECK(fs::is_directory(dir), "[pretrained] ", dir, " is not a directory");
  PretrainedFiles f;
  TIDAL_CHECK(fs::exists(dir + "/config.json"), "[pretrained] ", dir, " has no config.json");
  f.config = load_config(dir + "/config.json");
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (fs::exists(fs::symlink_status(single))) {
    f.weights =
        io::load_safetensors(resolve_inside(dir, "model.safetensors", single, "model.safetensors"), keep, rows).tensors;
  } else {
    TIDAL_CHECK(fs::exists(index), "[pretrained] ", dir, " has neither model.safetensors nor ",
                "model.safetensors.index.json (PyTorch .bin weights are not read: convert them to safetensors)");
    for (const std::string& shard : index_shards(dir, index))
      for (auto& [name, t] : io::load_safetensors(shard, keep, rows).tensors) f.weights[name] = t;
  }
  if (fs::exists(dir + "/tokenizer.json")) f.tokenizer_path = dir + "/tokenizer.json";
  return f;
}

std::unique_ptr<CausalLM> load_pretrained_model(const std::string& dir, PretrainedFiles* out, Device device) {
  PretrainedFiles f = load_pretrained_dir(dir);
  nn::Init init;
  init.device = device;
  auto model = create_model(f.config, init);
  model->load_hf_state_dict(f.weights);
  if (out != nullptr) *out = std::move(f);
  return model;
}

void save_pretrained(const CausalLM& model, const std::string& dir, const std::string& tokenizer_path) {
  save_pretrained(model.config(), model.state_dict(), dir, tokenizer_path);
}

void save_pretrained(const ModelConfig& config, const std::map<std::string, Tensor>& state, const std::string& dir,
                     const std::string& tokenizer_path) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TIDAL_CHECK(!ec, "[pretrained] cannot create ", dir, ": ", ec.message());
  const std::string cfg = config_to_json(config).dump(2) + "\n";
  io::write_atomically(dir + "/config.json", [&](int fd) { io::write_all(fd, cfg.data(), cfg.size(), dir); });
  // DeepSeek publishes each MTP layer with copies of the shared embedding and head (what vLLM and SGLang read for
  // speculative decoding); tidal's training checkpoints leave them out, its exports write them.
  std::map<std::string, Tensor> with_copies;
  const std::map<std::string, Tensor>* saved = &state;
  if (config.mtp_num_layers > 0 && state.count("model.embed_tokens.weight")) {
    with_copies = state;
    const Tensor& embed = state.at("model.embed_tokens.weight");
    const Tensor& head = state.count("lm_head.weight") ? state.at("lm_head.weight") : embed;
    for (int64_t k = 0; k < config.mtp_num_layers; ++k) {
      const std::string layer = "model.layers." + std::to_string(config.num_hidden_layers + k) + ".";
      with_copies.emplace(layer + "embed_tokens.weight", embed);
      with_copies.emplace(layer + "shared_head.head.weight", head);
    }
    saved = &with_copies;
  }
  // DeepSeek-V4: the names transformers writes (DeepSeek's), which its loader maps to its modules.
  if (config.is_deepseek_v4()) {
    with_copies = deepseek_v4_to_checkpoint(*saved);
    saved = &with_copies;
  }
  io::save_safetensors(dir + "/model.safetensors", *saved, {{"format", "pt"}});
  if (!tokenizer_path.empty()) {
    const std::string text = io::read_file(tokenizer_path);
    io::write_atomically(dir + "/tokenizer.json", [&](int fd) { io::write_all(fd, text.data(), text.size(), dir); });
  }
}

}  // namespace tidal::models
