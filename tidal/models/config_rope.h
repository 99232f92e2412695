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
// The yarn fields of rope dict `r` (`dict` its JSON) into `s` (type yarn): factor, beta_fast, beta_slow,
// attention_factor, mscale, mscale_all_dim, truncate, and original_max_position_embeddings (a top-level field
// of `top` wins, then the dict's, then `max_positions`), as transformers' _compute_yarn_parameters reads them.
void read_yarn(const FieldReader& top, const FieldReader& r, const nlohmann::json& dict, int64_t max_positions,
               RopeScaling& s);
// The yarn fields of `s` into rope dict `d`, as read_yarn reads them.
void write_yarn(const RopeScaling& s, nlohmann::json& d);
// Writes rope_theta, and rope_scaling when the type is not the default: the format transformers 4.x and
// 5.x both read.
void write_rope(const ModelConfig& c, nlohmann::json& j);

}  // namespace tidal::models::detail
