#pragma once
// The Gemma 3 text model's config.json fields (model_type gemma3_text, Gemma3TextConfig), read as
// transformers 5 reads them:
//  - RoPE per layer type: full layers rope_theta (default 1e6) with rope_scaling (linear x8 on 4B and up),
//    sliding layers rope_local_base_freq (default 10000) unscaled; 5.x writes both into rope_parameters
//    keyed by layer type ({"full_attention": {...}, "sliding_attention": {...}});
//  - sliding layers: layer_types, else every layer but each sliding_window_pattern-th (default 6) slides,
//    over sliding_window keys (default 4096);
//  - query_pre_attn_scalar (default 256): the attention scale is its inverse square root;
//  - hidden_activation gelu_pytorch_tanh (a GeGLU MLP); the logit soft-capping fields and
//    use_bidirectional_attention are refused unless off.
#include <nlohmann/json_fwd.hpp>

#include "tidal/models/config.h"
#include "tidal/models/config_reader.h"

namespace tidal::models::detail {

// The sizes must be read already (hidden, layers, heads, head_dim, positions).
void read_gemma3(const FieldReader& f, ModelConfig& c);
// A multimodal Gemma 3 (model_type gemma3, Gemma3ForConditionalGeneration: Gemma-3-4B/12B/27B as published): its
// language model, from text_config (model_type gemma3_text); the image fields name tokens of image inputs and
// the vision tower, which tidal neither builds nor loads (text-only training).
ModelConfig read_gemma3_multimodal(const FieldReader& f);
// Writes the fields back in 4.x form (rope_theta, rope_scaling, rope_local_base_freq), which 4.x and 5.x
// both read.
void write_gemma3(const ModelConfig& c, nlohmann::json& j);

}  // namespace tidal::models::detail
