#include "tidal/models/pretrained.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"

namespace tidal::models {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;
}  // namespace

PretrainedFiles load_pretrained_dir(const std::string& dir) {
  TIDAL_CHECK(fs::is_directory(dir), "[pretrained] ", dir, " is not a directory");
  PretrainedFiles f;
  TIDAL_CHECK(fs::exists(dir + "/config.json"), "[pretrained] ", dir, " has no config.json");
  f.config = load_config(dir + "/config.json");
  const std::string single = dir + "/model.safetensors", index = dir + "/model.safetensors.index.json";
  if (fs::exists(single)) {
    f.weights = io::load_safetensors(single).tensors;
  } else {
    TIDAL_CHECK(fs::exists(index), "[pretrained] ", dir, " has neither model.safetensors nor ",
                "model.safetensors.index.json (PyTorch .bin weights are not read: convert them to safetensors)");
    json j;
    try {
      j = json::parse(io::read_file(index));
    } catch (const json::exception& e) {
      TIDAL_CHECK(false, "[pretrained] ", index, " is not valid JSON: ", e.what());
    }
    TIDAL_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), "[pretrained] ", index, " has no weight_map");
    std::set<std::string> shards;
    for (auto& [name, file] : j["weight_map"].items()) shards.insert(file.get<std::string>());
    for (const std::string& shard : shards)
      for (auto& [name, t] : io::load_safetensors(dir + "/" + shard).tensors) f.weights[name] = t;
  }
  if (fs::exists(dir + "/tokenizer.json")) f.tokenizer_path = dir + "/tokenizer.json";
  return f;
}

std::unique_ptr<CausalLM> load_pretrained_model(const std::string& dir, PretrainedFiles* out) {
  PretrainedFiles f = load_pretrained_dir(dir);
  auto model = create_model(f.config);
  model->load_hf_state_dict(f.weights);
  if (out != nullptr) *out = std::move(f);
  return model;
}

void save_pretrained(const CausalLM& model, const std::string& dir, const std::string& tokenizer_path) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TIDAL_CHECK(!ec, "[pretrained] cannot create ", dir, ": ", ec.message());
  const std::string cfg = config_to_json(model.config()).dump(2) + "\n";
  io::write_atomically(dir + "/config.json", [&](int fd) { io::write_all(fd, cfg.data(), cfg.size(), dir); });
  io::save_safetensors(dir + "/model.safetensors", model.state_dict(), {{"format", "pt"}});
  if (!tokenizer_path.empty()) {
    const std::string text = io::read_file(tokenizer_path);
    io::write_atomically(dir + "/tokenizer.json", [&](int fd) { io::write_all(fd, text.data(), text.size(), dir); });
  }
}

}  // namespace tidal::models
