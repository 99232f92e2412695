#pragma once
// DeepSeek-V3's config.json fields (model_type deepseek_v3, DeepseekV3Config), read as transformers 5 reads
// them, with the defaults of its config class for a field the file omits:
//  - multi-head latent attention: q_lora_rank (null: one q_proj), kv_lora_rank, qk_nope_head_dim,
//    qk_rope_head_dim (head_dim, the rotary part), v_head_dim, rope_interleave; num_key_value_heads must be
//    num_attention_heads (every head has its own keys, from the shared latent);
//  - the MoE: n_routed_experts (num_local_experts), num_experts_per_tok, moe_intermediate_size,
//    n_shared_experts, n_group / topk_group, routed_scaling_factor, norm_topk_prob, first_k_dense_replace;
//    sigmoid scores and e_score_correction_bias always (DeepSeek's own files: scoring_func sigmoid and
//    topk_method noaux_tc, anything else refused; moe_layer_freq 1);
//  - num_nextn_predict_layers (num_mtp_layers): read and kept; the causal LM does not use the modules.
#include <nlohmann/json_fwd.hpp>

#include "tidal/models/config.h"
#include "tidal/models/config_reader.h"

namespace tidal::models::detail {

// The common sizes must be read already (hidden, layers, heads, positions, intermediate_size).
void read_deepseek_v3(const FieldReader& f, ModelConfig& c);
void write_deepseek_v3(const ModelConfig& c, nlohmann::json& j);
// validate()'s checks of the MLA and routing fields; `at` prefixes each message.
void validate_deepseek_v3(const ModelConfig& c, const std::string& at);

}  // namespace tidal::models::detail
