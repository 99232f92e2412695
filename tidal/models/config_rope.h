#pragma once
// The RoPE fields of a config.json in both formats: transformers 4.x's top-level `rope_theta` and
// `rope_scaling` ({"type" or "rope_type": ..., "factor": ...}), transformers 5.x's `rope_parameters`
// ({"rope_theta": ..., "rope_type": ..., ...}). Read as transformers 5 reads them (its
// convert_rope_params_to_dict and standardize_rope_params), with what the two formats could say
// differently refused by name.
#include <nlohmann/json_fwd.hpp>

#include "tidal/models/config.h"
#include "tidal/models/config_reader.h"

namespace tidal::models::detail {

// Sets c.rope_theta and c.rope_scaling; c.max_position_embeddings must be read already.
void read_rope(const FieldReader& f, ModelConfig& c);
// Writes rope_theta, and rope_scaling when the type is not the default: the format transformers 4.x and
// 5.x both read.
void write_rope(const ModelConfig& c, nlohmann::json& j);

}  // namespace tidal::models::detail
