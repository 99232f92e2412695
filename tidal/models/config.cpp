#include "tidal/models/config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tidal/base/error.h"
#include "tidal/io/atomic_file.h"

namespace tidal::models {
namespace {

using json = nlohmann::json;

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    detail::throw_error(detail::str_cat("[config] field '", key, "' has the wrong type: ", j[key].dump()));
  }
}

int64_t need(const json& j, const char* key) {
  TIDAL_CHECK(j.contains(key) && j[key].is_number_integer(), "[config] missing or non-integer field '", key, "'");
  return j[key].get<int64_t>();
}

}  // namespace

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

void ModelConfig::validate() const {
  TIDAL_CHECK(model_type == "gpt2" || model_type == "llama" || model_type == "qwen3" || model_type == "qwen3_moe",
              "[config] model_type '", model_type, "' is not supported: valid are gpt2, llama, qwen3, qwen3_moe");
  TIDAL_CHECK(vocab_size > 0, "[config] vocab_size must be positive, got ", vocab_size);
  TIDAL_CHECK(hidden_size > 0 && num_hidden_layers > 0 && num_attention_heads > 0,
              "[config] hidden_size, num_hidden_layers and num_attention_heads must be positive, got ", hidden_size,
              ", ", num_hidden_layers, ", ", num_attention_heads);
  TIDAL_CHECK(head_dim > 0 || hidden_size % num_attention_heads == 0, "[config] hidden_size ", hidden_size,
              " is not divisible by num_attention_heads ", num_attention_heads,
              " (set head_dim, tidal train's --kv-channels)");
  TIDAL_CHECK(head_size() % 2 == 0 || is_gpt2(), "[config] rotary embeddings need an even head_dim, got ", head_size());
  TIDAL_CHECK(num_attention_heads % kv_heads() == 0, "[config] num_attention_heads ", num_attention_heads,
              " is not a multiple of num_key_value_heads ", kv_heads(), " (tidal train's --num-query-groups)");
  TIDAL_CHECK(!is_gpt2() || kv_heads() == num_attention_heads, "[config] gpt2 has no grouped-query attention");
  TIDAL_CHECK(intermediate_size > 0, "[config] intermediate_size must be positive, got ", intermediate_size);
  TIDAL_CHECK(max_position_embeddings > 0, "[config] max_position_embeddings must be positive");
  TIDAL_CHECK(attention_dropout >= 0 && attention_dropout < 1 && hidden_dropout >= 0 && hidden_dropout < 1,
              "[config] dropout probabilities must be in [0, 1)");
  if (model_type == "qwen3_moe") {
    TIDAL_CHECK(num_experts > 0 && num_experts_per_tok > 0 && num_experts_per_tok <= num_experts,
                "[config] qwen3_moe needs 0 < num_experts_per_tok <= num_experts, got ", num_experts_per_tok, " of ",
                num_experts);
    TIDAL_CHECK(moe_intermediate_size > 0, "[config] qwen3_moe needs moe_intermediate_size > 0");
    TIDAL_CHECK(decoder_sparse_step > 0, "[config] decoder_sparse_step must be positive");
  } else {
    TIDAL_CHECK(num_experts == 0, "[config] num_experts is set but model_type ", model_type, " is dense");
  }
}

ModelConfig config_from_json(const json& j) {
  TIDAL_CHECK(j.is_object(), "[config] config.json must hold a JSON object");
  ModelConfig c;
  c.model_type = get_or<std::string>(j, "model_type", "");
  if (c.model_type == "gpt2") {
    c.vocab_size = need(j, "vocab_size");
    c.hidden_size = need(j, "n_embd");
    c.num_hidden_layers = need(j, "n_layer");
    c.num_attention_heads = need(j, "n_head");
    c.intermediate_size = get_or<int64_t>(j, "n_inner", 4 * c.hidden_size);
    c.max_position_embeddings = need(j, "n_positions");
    c.norm_eps = get_or<double>(j, "layer_norm_epsilon", 1e-5);
    c.hidden_act = get_or<std::string>(j, "activation_function", "gelu_new");
    c.attention_dropout = get_or<double>(j, "attn_pdrop", 0.1);
    c.hidden_dropout = get_or<double>(j, "resid_pdrop", 0.1);
    c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", true);
  } else {
    c.vocab_size = need(j, "vocab_size");
    c.hidden_size = need(j, "hidden_size");
    c.num_hidden_layers = need(j, "num_hidden_layers");
    c.num_attention_heads = need(j, "num_attention_heads");
    c.intermediate_size = need(j, "intermediate_size");
    c.num_key_value_heads = get_or<int64_t>(j, "num_key_value_heads", c.num_attention_heads);
    c.head_dim = get_or<int64_t>(j, "head_dim", 0);
    c.max_position_embeddings = get_or<int64_t>(j, "max_position_embeddings", 2048);
    c.rope_theta = get_or<double>(j, "rope_theta", 10000.0);
    c.norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6);
    c.hidden_act = get_or<std::string>(j, "hidden_act", "silu");
    c.attention_dropout = get_or<double>(j, "attention_dropout", 0.0);
    c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false);
    c.attention_bias = get_or<bool>(j, "attention_bias", false);
    c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
    if (c.model_type == "qwen3_moe") {
      c.num_experts = need(j, "num_experts");
      c.num_experts_per_tok = need(j, "num_experts_per_tok");
      c.moe_intermediate_size = need(j, "moe_intermediate_size");
      c.norm_topk_prob = get_or<bool>(j, "norm_topk_prob", false);
      c.decoder_sparse_step = get_or<int64_t>(j, "decoder_sparse_step", 1);
      c.mlp_only_layers = get_or<std::vector<int64_t>>(j, "mlp_only_layers", {});
      c.router_aux_loss_coef = get_or<double>(j, "router_aux_loss_coef", 0.001);
    }
    TIDAL_CHECK(c.hidden_act == "silu", "[config] hidden_act '", c.hidden_act, "' is not supported for ", c.model_type,
                " (only silu)");
  }
  c.initializer_range = get_or<double>(j, "initializer_range", 0.02);
  c.torch_dtype = get_or<std::string>(j, "torch_dtype", "float32");
  if (c.model_type == "gpt2")
    TIDAL_CHECK(c.hidden_act == "gelu_new" || c.hidden_act == "gelu", "[config] gpt2 activation_function '",
                c.hidden_act, "' is not supported (gelu_new or gelu)");
  c.validate();
  return c;
}

ModelConfig load_config(const std::string& path) {
  json j;
  try {
    j = json::parse(io::read_file(path));
  } catch (const json::exception& e) {
    TIDAL_CHECK(false, "[config] ", path, " is not valid JSON: ", e.what());
  }
  try {
    return config_from_json(j);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

json config_to_json(const ModelConfig& c) {
  json j;
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["initializer_range"] = c.initializer_range;
  j["torch_dtype"] = c.torch_dtype;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.is_gpt2()) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["n_embd"] = c.hidden_size;
    j["n_layer"] = c.num_hidden_layers;
    j["n_head"] = c.num_attention_heads;
    j["n_inner"] = c.intermediate_size;
    j["n_positions"] = c.max_position_embeddings;
    j["n_ctx"] = c.max_position_embeddings;
    j["layer_norm_epsilon"] = c.norm_eps;
    j["activation_function"] = c.hidden_act;
    j["attn_pdrop"] = c.attention_dropout;
    j["resid_pdrop"] = c.hidden_dropout;
    j["embd_pdrop"] = c.hidden_dropout;
    return j;
  }
  j["architectures"] = {c.model_type == "llama"   ? "LlamaForCausalLM"
                        : c.model_type == "qwen3" ? "Qwen3ForCausalLM"
                                                  : "Qwen3MoeForCausalLM"};
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.kv_heads();
  if (c.head_dim > 0) j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rope_theta"] = c.rope_theta;
  j["rms_norm_eps"] = c.norm_eps;
  j["hidden_act"] = c.hidden_act;
  j["attention_dropout"] = c.attention_dropout;
  j["attention_bias"] = c.attention_bias;
  if (c.is_moe()) {
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
    j["router_aux_loss_coef"] = c.router_aux_loss_coef;
  }
  return j;
}

}  // namespace tidal::models
