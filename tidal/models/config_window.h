#pragma once
// The sliding-window fields of a config.json, read as transformers 5 reads them:
//  - mistral: `sliding_window` on every layer (absent: MistralConfig's 4096; null: none);
//  - qwen2, qwen3: the window is null unless `use_sliding_window`; layer i slides when its `layer_types`
//    entry says sliding_attention, or, without layer_types, when i >= `max_window_layers` (default 28);
//  - qwen3_moe: every layer slides when `use_sliding_window`;
//  - llama: no window (a non-null `sliding_window` is refused: LlamaAttention has none).
#include <nlohmann/json_fwd.hpp>

#include "tidal/models/config.h"
#include "tidal/models/config_reader.h"

namespace tidal::models::detail {

// The window a file gives: its `sliding_window`, 4096 when absent (the default of every config class that
// has one), 0 (none) when null.
int64_t read_window(const FieldReader& f);
// The file's `layer_types`, checked to list full_attention or sliding_attention for each of `layers`;
// empty when absent.
std::vector<std::string> read_layer_types(const FieldReader& f, int64_t layers);
// Sets c.sliding_window and c.layer_types; c.num_hidden_layers must be read already.
void read_sliding_window(const FieldReader& f, ModelConfig& c);
// Writes the fields back in the family's own terms, so transformers reads the same windows.
void write_sliding_window(const ModelConfig& c, nlohmann::json& j);

}  // namespace tidal::models::detail
