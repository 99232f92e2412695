#include "tidal/models/config_deepseek.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "tidal/models/config_rope.h"

namespace tidal::models::detail {
namespace {

using json = nlohmann::json;
using tidal::detail::str_cat;

// DeepseekV3Config's defaults (transformers 5): DeepSeek-V3 671B's values.
constexpr int64_t kQLoraRank = 1536, kKvLoraRank = 512, kNope = 128, kRope = 64, kValue = 128;
constexpr int64_t kRouted = 256, kTopK = 8, kExpertFfn = 2048, kShared = 1, kGroups = 8, kTopGroups = 4, kDense = 3;
constexpr double kRoutedScaling = 2.5;

}  // namespace

void read_deepseek_v3(const FieldReader& f, ModelConfig& c) {
  // q_lora_rank: null means one q_proj; absent means the class default.
  c.q_lora_rank =
      f.present("q_lora_rank") && !f.has("q_lora_rank") ? 0 : f.get("q_lora_rank", kQLoraRank, 1, kMaxWidth);
  c.kv_lora_rank = f.get("kv_lora_rank", kKvLoraRank, 1, kMaxWidth);
  c.qk_nope_head_dim = f.get("qk_nope_head_dim", kNope, 0, kMaxWidth);
  c.qk_rope_head_dim = f.get("qk_rope_head_dim", kRope, 2, kMaxWidth);
  c.v_head_dim = f.get("v_head_dim", kValue, 1, kMaxWidth);
  // transformers derives head_dim (the rotary width) and qk_head_dim and saves them: a file's must agree.
  if (f.has("head_dim") && c.head_dim != c.qk_rope_head_dim)
    f.refuse("head_dim", std::to_string(c.head_dim),
             str_cat("DeepSeek-V3's head_dim is qk_rope_head_dim (", c.qk_rope_head_dim, "), the rotary width"));
  c.head_dim = c.qk_rope_head_dim;
  if (const int64_t qk = f.get("qk_head_dim", c.qk_head_size(), 1, 2 * kMaxWidth); qk != c.qk_head_size())
    f.refuse("qk_head_dim", std::to_string(qk),
             str_cat("it must be qk_nope_head_dim + qk_rope_head_dim = ", c.qk_head_size()));
  if (c.kv_heads() != c.num_attention_heads)
    f.refuse("num_key_value_heads", std::to_string(c.kv_heads()),
             str_cat("multi-head latent attention gives every head its own keys and values (kv_b_proj): it must be "
                     "num_attention_heads (",
                     c.num_attention_heads, ")"));
  c.rope_interleave = f.get("rope_interleave", true);
  read_rope(f, c);
  c.hidden_act = f.get("hidden_act", "silu");
  TIDAL_CHECK(c.hidden_act == "silu", f.where("hidden_act"), " is not supported for deepseek_v3 (only silu)");
  c.attention_bias = f.get("attention_bias", false);

  c.num_experts = f.get(f.alias("n_routed_experts", "num_local_experts"), kRouted, 1, kMaxExperts);
  c.num_experts_per_tok = f.get("num_experts_per_tok", std::min(kTopK, c.num_experts), 1, c.num_experts);
  c.moe_intermediate_size = f.get("moe_intermediate_size", kExpertFfn, 1, kMaxWidth);
  c.n_shared_experts = f.get("n_shared_experts", kShared, 0, kMaxExperts);
  c.n_group = f.get("n_group", kGroups, 1, c.num_experts);
  c.topk_group = f.get("topk_group", std::min(kTopGroups, c.n_group), 1, c.n_group);
  c.routed_scaling_factor = f.get("routed_scaling_factor", kRoutedScaling);
  c.norm_topk_prob = f.get("norm_topk_prob", true);
  c.first_k_dense_replace = f.get("first_k_dense_replace", kDense, 0, kMaxLayers);
  c.router_score = ModelConfig::RouterScore::sigmoid;
  c.router_expert_bias = true;
  c.router_aux_loss_coef = 0;  // transformers' DeepseekV3ForCausalLM adds no auxiliary loss
  c.num_nextn_predict_layers = f.get(f.alias("num_nextn_predict_layers", "num_mtp_layers"), int64_t(1), 0, kMaxLayers);
  // DeepSeek's own config.json (its remote code) names its routing; transformers implements this one only.
  if (const std::string s = f.get("scoring_func", "sigmoid"); s != "sigmoid")
    f.refuse("scoring_func", "'" + s + "'", "DeepSeek-V3 scores experts with a sigmoid (only sigmoid)");
  if (const std::string t = f.get("topk_method", "noaux_tc"); t != "noaux_tc")
    f.refuse("topk_method", "'" + t + "'",
             "DeepSeek-V3 picks its experts group-limited with the correction bias (only noaux_tc)");
  if (const int64_t freq = f.get("moe_layer_freq", int64_t(1), 0, kMaxLayers); freq != 1)
    f.refuse("moe_layer_freq", std::to_string(freq),
             "every layer from first_k_dense_replace on is sparse in DeepSeek-V3 (only 1)");
}

void write_deepseek_v3(const ModelConfig& c, json& j) {
  write_rope(c, j);
  j["hidden_act"] = c.hidden_act;
  j["attention_bias"] = c.attention_bias;
  j["q_lora_rank"] = c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr);
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["rope_interleave"] = c.rope_interleave;
  j["n_routed_experts"] = c.num_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["n_shared_experts"] = c.n_shared_experts;
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  // What the checkpoint holds: the MTP depths the model built (a model built without them saves none).
  j["num_nextn_predict_layers"] = c.mtp_num_layers;
}

void validate_deepseek_v3(const ModelConfig& c, const std::string& at) {
  TIDAL_CHECK(c.is_mla() && c.qk_rope_head_dim > 0 && c.qk_rope_head_dim % 2 == 0 && c.v_head_dim > 0, at,
              "deepseek_v3 needs kv_lora_rank, v_head_dim and an even qk_rope_head_dim, all positive (got ",
              c.kv_lora_rank, ", ", c.v_head_dim, ", ", c.qk_rope_head_dim, ")");
  TIDAL_CHECK(c.head_dim == c.qk_rope_head_dim, at, "deepseek_v3's head_dim is its qk_rope_head_dim (",
              c.qk_rope_head_dim, "), got ", c.head_dim);
  TIDAL_CHECK(c.kv_heads() == c.num_attention_heads, at,
              "multi-head latent attention has no grouped-query heads: num_key_value_heads must be "
              "num_attention_heads (tidal train's --num-query-groups)");
  TIDAL_CHECK(c.num_experts > 0 && c.n_group >= 1 && c.num_experts % c.n_group == 0, at, "n_group ", c.n_group,
              " does not divide the ", c.num_experts, " routed experts (n_routed_experts)");
  const int64_t per_group = c.num_experts / c.n_group;
  TIDAL_CHECK(per_group >= 2 || c.n_group == 1, at,
              "each expert group scores itself by its two best experts: ", c.num_experts, " experts in ", c.n_group,
              " groups leave fewer than 2 a group");
  TIDAL_CHECK(c.topk_group >= 1 && c.topk_group <= c.n_group, at, "topk_group ", c.topk_group,
              " must be in [1, n_group = ", c.n_group, "]");
  TIDAL_CHECK(c.num_experts_per_tok <= c.topk_group * per_group, at, "num_experts_per_tok ", c.num_experts_per_tok,
              " is more than the ", c.topk_group * per_group, " experts of the topk_group chosen groups");
  TIDAL_CHECK(std::isfinite(c.routed_scaling_factor) && c.routed_scaling_factor > 0, at,
              "routed_scaling_factor must be a positive number, got ", c.routed_scaling_factor);
  TIDAL_CHECK(c.n_shared_experts >= 0 && c.first_k_dense_replace >= 0, at,
              "n_shared_experts and first_k_dense_replace must not be negative");
}

}  // namespace tidal::models::detail
