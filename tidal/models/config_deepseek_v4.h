#pragma once
// DeepSeek-V4's config.json fields (model_type deepseek_v4, transformers 5's DeepseekV4Config), read as that
// class reads them, with its defaults for a field the file omits and its legacy names folded in
// (compress_ratios -> layer_types, num_hash_layers -> mlp_layer_types, qk_rope_head_dim ->
// partial_rotary_factor, compress_rate_csa / compress_rate_hca -> compress_rates):
//  - attention: q_lora_rank, one shared key/value head (num_key_value_heads 1) of head_dim, its trailing
//    head_dim * partial_rotary_factor channels rotated (rope_parameters.main: the default rope type and
//    rope_theta), sliding_window, o_groups / o_lora_rank, per-head sinks;
//  - layer_types: sliding_attention, compressed_sparse_attention (CSA) and heavily_compressed_attention (HCA),
//    with compress_rates, index_* and the compressed layers' rope: compress_rope_theta and rope_parameters.compress
//    (default, or yarn as the published checkpoints give it: a flat rope_parameters / rope_scaling is theirs);
//  - the MoE on every layer: n_routed_experts, num_experts_per_tok, moe_intermediate_size (the experts' and
//    the shared experts' width), n_shared_experts, routed_scaling_factor, sqrtsoftplus scores (other
//    scoring_func values refused), mlp_layer_types (hash_moe: experts from a token-id table), swiglu_limit;
//  - mHC: hc_mult, hc_sinkhorn_iters, hc_eps;
//  - num_nextn_predict_layers: read and kept; transformers' causal LM builds no MTP module, nor does tidal's.
#include <nlohmann/json_fwd.hpp>

#include "tidal/models/config.h"
#include "tidal/models/config_reader.h"

namespace tidal::models::detail {

// hidden, layers, heads, positions, vocab must be read already.
void read_deepseek_v4(const FieldReader& f, ModelConfig& c);
void write_deepseek_v4(const ModelConfig& c, nlohmann::json& j);
// validate()'s checks of the V4 fields; `at` prefixes each message.
void validate_deepseek_v4(const ModelConfig& c, const std::string& at);
// The parameter count (transformers' DeepseekV4ForCausalLM's parameters; buffers not counted), each product checked.
int64_t deepseek_v4_parameter_count(const ModelConfig& c);

}  // namespace tidal::models::detail
