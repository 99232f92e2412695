#include "tidal/models/config_window.h"

#include <nlohmann/json.hpp>

namespace tidal::models::detail {
namespace {

using json = nlohmann::json;

constexpr int64_t kDefaultWindow = 4096;      // MistralConfig's, Qwen2/3Config's and Gemma3TextConfig's default
constexpr int64_t kDefaultWindowLayers = 28;  // Qwen2Config's and Qwen3Config's max_window_layers

std::vector<std::string> all_layers(const ModelConfig& c, const char* type) {
  return std::vector<std::string>(size_t(c.num_hidden_layers), type);
}

// qwen2/qwen3: layer_types as given (checked) or derived from max_window_layers.
std::vector<std::string> qwen_layer_types(const FieldReader& f, const ModelConfig& c) {
  const int64_t first = f.get("max_window_layers", kDefaultWindowLayers, 0, kMaxLayers);
  std::vector<std::string> out = read_layer_types(f, c.num_hidden_layers);
  if (!out.empty()) return out;
  out = all_layers(c, "full_attention");
  for (int64_t l = first; l < c.num_hidden_layers; ++l) out[size_t(l)] = "sliding_attention";
  return out;
}

}  // namespace

int64_t read_window(const FieldReader& f) {
  if (!f.present("sliding_window")) return kDefaultWindow;
  return f.get("sliding_window", int64_t(0), 1, kMaxPositions);
}

std::vector<std::string> read_layer_types(const FieldReader& f, int64_t layers) {
  const json* types = f.find("layer_types");
  if (types == nullptr) return {};
  // A hostile file's strings are never echoed (tests/unit/hostile_config_test.cpp): counts and indices only.
  TIDAL_CHECK(types->is_array(), f.where("layer_types"), " must be an array of one entry per layer (", layers, ")");
  TIDAL_CHECK(int64_t(types->size()) == layers, f.where("layer_types"), " lists ", types->size(),
              " entries: it must list one per layer (", layers, ")");
  std::vector<std::string> out;
  for (size_t i = 0; i < types->size(); ++i) {
    const json& t = (*types)[i];
    TIDAL_CHECK(t.is_string() && (t == "full_attention" || t == "sliding_attention"), f.where("layer_types"), " entry ",
                i, " must be full_attention or sliding_attention");
    out.push_back(t.get<std::string>());
  }
  return out;
}

void read_sliding_window(const FieldReader& f, ModelConfig& c) {
  c.sliding_window = 0;
  c.layer_types.clear();
  if (c.model_type == "llama") {
    if (const json* w = f.find("sliding_window"))
      f.refuse("sliding_window", w->is_number() ? w->dump() : std::string("set"),
               "LlamaAttention attends to every earlier token (only null)");
    return;
  }
  if (c.model_type == "mistral") {
    c.sliding_window = read_window(f);
    if (c.sliding_window > 0) c.layer_types = all_layers(c, "sliding_attention");
    return;
  }
  // qwen2, qwen3, qwen3_moe: the window is null unless use_sliding_window (the layer types are read
  // and checked either way).
  const bool use = f.get("use_sliding_window", false);
  const int64_t window = read_window(f);
  std::vector<std::string> types =
      c.model_type == "qwen3_moe" ? all_layers(c, "sliding_attention") : qwen_layer_types(f, c);
  if (!use || window == 0) return;
  c.sliding_window = window;
  c.layer_types = std::move(types);
}

void write_sliding_window(const ModelConfig& c, json& j) {
  if (c.model_type == "mistral") {
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    return;
  }
  if (c.model_type == "llama") return;
  j["use_sliding_window"] = c.sliding_window > 0;
  if (c.sliding_window == 0) return;
  j["sliding_window"] = c.sliding_window;
  if (c.model_type == "qwen3_moe") return;  // every layer slides
  j["layer_types"] = c.layer_types;
  // max_window_layers is what transformers 4.x reads instead of layer_types; it can say what
  // layer_types says only when the sliding layers are the last ones.
  int64_t first = c.num_hidden_layers;
  while (first > 0 && c.layer_types[size_t(first - 1)] == "sliding_attention") --first;
  j["max_window_layers"] = first;
}

}  // namespace tidal::models::detail
