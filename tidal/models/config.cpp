#include "tidal/models/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tidal/base/checked_math.h"
#include "tidal/base/error.h"
#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/models/config_deepseek.h"
#include "tidal/models/config_deepseek_v4.h"
#include "tidal/models/config_fields.h"
#include "tidal/models/config_gemma3.h"
#include "tidal/models/config_reader.h"
#include "tidal/models/config_rope.h"
#include "tidal/models/config_window.h"

namespace tidal::models {
namespace {

using json = nlohmann::json;

using detail::FieldReader;

// Field names of each model type: gpt2 spells the common ones its own way.
struct Names {
  const char *hidden, *layers, *heads, *positions;
};

// Where transformers 5's config classes default a field differently by family (Qwen3Config: head_dim 128,
// 32 kv heads; Qwen3MoeConfig: 4 kv heads; both 32768 positions), so a file that omits it means the same.
struct FamilyDefaults {
  int64_t head_dim, kv_heads, positions;  // kv_heads 0: num_attention_heads
};
FamilyDefaults family_defaults(const std::string& type) {
  if (type == "qwen3") return {128, 32, 32768};
  if (type == "qwen3_moe") return {0, 4, 32768};
  if (type == "qwen2") return {0, 32, 32768};
  if (type == "mistral") return {0, 8, 4096 * 32};
  if (type == "gemma3_text") return {256, 4, 131072};
  if (type == "deepseek_v3") return {0, 0, 4096};  // head_dim: qk_rope_head_dim
  if (type == "deepseek_v4") return {512, 1, 1048576};
  return {0, 0, 2048};
}

const char* architecture(const std::string& type) {
  if (type == "llama") return "LlamaForCausalLM";
  if (type == "mistral") return "MistralForCausalLM";
  if (type == "qwen2") return "Qwen2ForCausalLM";
  if (type == "qwen3") return "Qwen3ForCausalLM";
  if (type == "gemma3_text") return "Gemma3ForCausalLM";
  if (type == "deepseek_v3") return "DeepseekV3ForCausalLM";
  if (type == "deepseek_v4") return "DeepseekV4ForCausalLM";
  return "Qwen3MoeForCausalLM";
}

}  // namespace

bool is_model_type(std::string_view type) {
  return std::find(std::begin(kModelTypes), std::end(kModelTypes), type) != std::end(kModelTypes);
}

std::string model_type_list() {
  std::string out;
  for (const char* t : kModelTypes) out += (out.empty() ? "" : ", ") + std::string(t);
  return out;
}

double ModelConfig::attention_scale() const {
  // MLA under a scaled RoPE (transformers' yarn_apply_mscale): qk_head_dim^-1/2 x yarn_mscale(factor,
  // mscale_all_dim)^2, the whole q k^T scaled (the rotary dims also get yarn's cos/sin factor).
  if (is_mla() && rope_scaling.type == RopeType::yarn && rope_scaling.mscale_all_dim != 0) {
    const double m = yarn_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim);
    return m * m / std::sqrt(double(qk_head_size()));
  }
  return query_pre_attn_scalar > 0 ? 1.0 / std::sqrt(query_pre_attn_scalar) : 0.0;
}

RopeFrequencies ModelConfig::layer_rope_frequencies(int64_t layer, int64_t seq_len) const {
  if (rope_local_theta <= 0 || attention_window(layer) == 0) return rope_frequencies(seq_len);
  return tidal::rope_frequencies(head_size(), rope_local_theta, RopeScaling{}, seq_len);
}

int64_t ModelConfig::attention_window(int64_t layer) const {
  if (sliding_window <= 0 || layer < 0 || size_t(layer) >= layer_types.size()) return 0;
  return layer_types[size_t(layer)] == "sliding_attention" ? sliding_window : 0;
}

void ModelConfig::set_num_layers(int64_t layers) {
  if (sliding_window_pattern > 0 && sliding_window > 0) {
    layer_types.clear();
    for (int64_t i = 0; i < layers; ++i)
      layer_types.push_back((i + 1) % sliding_window_pattern != 0 ? "sliding_attention" : "full_attention");
  } else if (!layer_types.empty() && int64_t(layer_types.size()) != layers) {
    const bool uniform = std::all_of(layer_types.begin(), layer_types.end(),
                                     [&](const std::string& t) { return t == layer_types.front(); });
    TIDAL_CHECK(uniform, "[config] layer_types gives each of the model's ", layer_types.size(),
                " layers its own attention (full or sliding), so its layer count cannot become ", layers,
                ": give a config.json whose layer_types lists ", layers, " entries");
    layer_types.assign(size_t(layers), layer_types.front());
  }
  num_hidden_layers = layers;
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (num_experts <= 0 || layer < first_k_dense_replace) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

int64_t ModelConfig::parameter_count() const {
  const std::string what = "[config] the parameter count";
  auto mul = [&](std::initializer_list<int64_t> dims) { return checked_product(dims, what); };
  auto add = [&](int64_t a, int64_t b) { return checked_add(a, b, what); };
  if (is_deepseek_v4()) return detail::deepseek_v4_parameter_count(*this);
  const int64_t d = hidden_size, hd = head_size(), h = num_attention_heads, kv = kv_heads();
  int64_t n = mul({vocab_size, d});  // token embedding
  if (is_gpt2()) {
    n = add(n, mul({max_position_embeddings, d}));  // wpe; the head is tied
    const int64_t block = add(add(mul({d, 3 * d}), mul({d, d})), add(mul({2, d, intermediate_size}), 9 * d));
    // 9d: c_attn (3d), two c_proj (2d) biases, two layer norms (4d); c_fc's bias is intermediate_size
    n = add(n, mul({num_hidden_layers, add(block, intermediate_size)}));
    return add(n, 2 * d);  // ln_f
  }
  if (!tie_word_embeddings) n = add(n, mul({vocab_size, d}));  // lm_head
  int64_t attention = 0;
  if (is_mla()) {
    const int64_t qk = qk_head_size(), latent = kv_lora_rank + qk_rope_head_dim;
    // q_proj, or q_a_proj (+ bias) -> q_a_layernorm -> q_b_proj
    attention = q_lora_rank > 0 ? add(mul({d + 1, q_lora_rank}), mul({q_lora_rank, h, qk})) : mul({d, h, qk});
    if (q_lora_rank > 0 && attention_bias) attention = add(attention, q_lora_rank);
    attention = add(attention, mul({attention_bias ? d + 1 : d, latent}));  // kv_a_proj_with_mqa
    attention = add(attention, add(kv_lora_rank, mul({kv_lora_rank, h, qk_nope_head_dim + v_head_dim})));  // norm, kv_b
    attention = add(attention, add(mul({h, v_head_dim, d}), attention_bias ? d : 0));                      // o_proj
  } else {
    attention = add(mul({2, d, h * hd}), mul({2, d, kv * hd}));
    if (attention_bias || qkv_bias) attention = add(attention, h * hd + 2 * kv * hd);  // q, k, v biases
    if (attention_bias) attention = add(attention, d);                                 // o_proj's
    if (qk_norm) attention = add(attention, 2 * hd);
  }
  const int64_t dense_mlp = mul({3, d, intermediate_size});
  const int64_t shared_mlp = mul({3, d, n_shared_experts, moe_intermediate_size});
  const int64_t sparse_mlp =
      is_moe() ? add(add(mul({num_experts, 3, d, moe_intermediate_size}), mul({d, num_experts})), shared_mlp) : 0;
  int64_t sparse_layers = 0;
  if (is_moe())
    for (int64_t l = 0; l < num_hidden_layers; ++l) sparse_layers += is_moe_layer(l) ? 1 : 0;
  const int64_t layer = add(attention, (is_gemma3() ? 4 : 2) * d);  // two RMSNorms (Gemma 3: four)
  n = add(n, mul({num_hidden_layers, layer}));
  n = add(n, mul({num_hidden_layers - sparse_layers, dense_mlp}));
  n = add(n, mul({sparse_layers, sparse_mlp}));
  // Multi-token prediction (models/mtp.h): each depth a decoder layer (numbered after the last, so sparse from
  // first_k_dense_replace on), enorm, hnorm, shared_head.norm and eh_proj (C, 2C).
  for (int64_t k = 0; k < mtp_num_layers; ++k)
    n = add(n,
            add(add(layer, is_moe_layer(num_hidden_layers + k) ? sparse_mlp : dense_mlp), add(3 * d, mul({2, d, d}))));
  return add(n, d);  // final norm
}

void ModelConfig::validate(std::string_view source) const {
  const std::string at = source.empty() ? std::string("[config] ") : tidal::detail::str_cat("[config] ", source, ": ");
  auto limit = [&](const char* field, int64_t v, int64_t hi) {
    TIDAL_CHECK(v <= hi, at, field, " ", v, " is more than the ", hi,
                " tidal allows (a limit far above any published model: docs/reliability.md)");
  };
  TIDAL_CHECK(is_model_type(model_type), at, "model_type '", model_type, "' is not supported: valid are ",
              model_type_list());
  TIDAL_CHECK(vocab_size > 0, at, "vocab_size must be positive, got ", vocab_size);
  TIDAL_CHECK(hidden_size > 0 && num_hidden_layers > 0 && num_attention_heads > 0, at,
              "hidden_size, num_hidden_layers and num_attention_heads must be positive, got ", hidden_size, ", ",
              num_hidden_layers, ", ", num_attention_heads);
  limit("vocab_size", vocab_size, kMaxVocab);
  limit("hidden_size", hidden_size, kMaxWidth);
  limit("num_hidden_layers", num_hidden_layers, kMaxLayers);
  limit("num_attention_heads", num_attention_heads, kMaxHeads);
  limit("num_key_value_heads", num_key_value_heads, kMaxHeads);
  limit("head_dim", head_dim, kMaxWidth);
  limit("intermediate_size", intermediate_size, kMaxWidth);
  limit("max_position_embeddings", max_position_embeddings, kMaxPositions);
  limit("num_experts", num_experts, kMaxExperts);
  limit("moe_intermediate_size", moe_intermediate_size, kMaxWidth);
  TIDAL_CHECK(num_key_value_heads >= 0 && head_dim >= 0, at, "num_key_value_heads and head_dim must not be negative");
  TIDAL_CHECK(head_dim > 0 || hidden_size % num_attention_heads == 0, at, "hidden_size ", hidden_size,
              " is not divisible by num_attention_heads ", num_attention_heads,
              " (set head_dim, tidal train's --kv-channels)");
  TIDAL_CHECK(head_size() > 0, at, "the head size (hidden_size / num_attention_heads) is 0: set head_dim");
  TIDAL_CHECK(head_size() % 2 == 0 || is_gpt2(), at, "rotary embeddings need an even ",
              is_mla() ? "qk_rope_head_dim" : "head_dim", ", got ", head_size());
  TIDAL_CHECK(num_attention_heads % kv_heads() == 0, at, "num_attention_heads ", num_attention_heads,
              " is not a multiple of num_key_value_heads ", kv_heads(), " (tidal train's --num-query-groups)");
  TIDAL_CHECK(!is_gpt2() || kv_heads() == num_attention_heads, at, "gpt2 has no grouped-query attention");
  TIDAL_CHECK(intermediate_size > 0, at, "intermediate_size must be positive, got ", intermediate_size);
  TIDAL_CHECK(max_position_embeddings > 0, at, "max_position_embeddings must be positive");
  TIDAL_CHECK(attention_dropout >= 0 && attention_dropout < 1 && hidden_dropout >= 0 && hidden_dropout < 1, at,
              "dropout probabilities must be in [0, 1)");
  TIDAL_CHECK(std::isfinite(rope_theta) && rope_theta > 0, at, "rope_theta must be a positive number");
  TIDAL_CHECK(sliding_window >= 0, at, "sliding_window must not be negative, got ", sliding_window);
  TIDAL_CHECK(layer_types.empty() || int64_t(layer_types.size()) == num_hidden_layers, at, "layer_types lists ",
              layer_types.size(), " layers, the model has ", num_hidden_layers);
  for (const std::string& t : layer_types)  // deepseek_v4's own types: validate_deepseek_v4
    TIDAL_CHECK(t == "full_attention" || t == "sliding_attention" || is_deepseek_v4(), at, "layer_types entry '", t,
                "' is not full_attention or sliding_attention");
  TIDAL_CHECK(sliding_window == 0 || !is_gpt2(), at, "gpt2 has no sliding-window attention");
  if (!is_gpt2() && head_size() % 2 == 0) {
    try {
      (void)rope_frequencies(max_position_embeddings);
    } catch (const Error& e) {
      tidal::detail::throw_error(tidal::detail::str_cat(at, e.what()));
    }
  }
  TIDAL_CHECK(std::isfinite(norm_eps) && norm_eps >= 0, at, "the norm epsilon must be a finite number >= 0");
  TIDAL_CHECK(std::isfinite(initializer_range) && initializer_range >= 0, at,
              "initializer_range must be a finite number >= 0");
  if (is_deepseek_v3()) detail::validate_deepseek_v3(*this, at);
  if (is_deepseek_v4()) detail::validate_deepseek_v4(*this, at);
  TIDAL_CHECK(mtp_num_layers >= 0 && mtp_num_layers <= kMaxLayers, at, "the multi-token-prediction depths (",
              "--mtp-num-layers) must be in [0, ", kMaxLayers, "], got ", mtp_num_layers);
  TIDAL_CHECK(mtp_num_layers == 0 || is_deepseek_v3(), at, "multi-token prediction (--mtp-num-layers ", mtp_num_layers,
              ") is built for deepseek_v3 (its MTP modules), not ", model_type);
  if (model_type == "qwen3_moe" || is_deepseek_v3() || is_deepseek_v4()) {
    TIDAL_CHECK(num_experts > 0 && num_experts_per_tok > 0 && num_experts_per_tok <= num_experts, at, model_type,
                " needs 0 < num_experts_per_tok <= num_experts, got ", num_experts_per_tok, " of ", num_experts);
    TIDAL_CHECK(moe_intermediate_size > 0, at, model_type, " needs moe_intermediate_size > 0");
    TIDAL_CHECK(decoder_sparse_step > 0, at, "decoder_sparse_step must be positive");
    TIDAL_CHECK(std::isfinite(router_aux_loss_coef) && router_aux_loss_coef >= 0, at,
                "router_aux_loss_coef must be a finite number >= 0");
    TIDAL_CHECK(std::isfinite(moe_expert_capacity_factor) && moe_expert_capacity_factor >= 0, at,
                "the expert capacity factor must be a finite number >= 0 (0: no capacity)");
    for (int64_t l : mlp_only_layers)
      TIDAL_CHECK(l >= 0 && l < num_hidden_layers, at, "mlp_only_layers names layer ", l, ", not one of the ",
                  num_hidden_layers, " layers");
    int64_t sparse_layers = 0;
    for (int64_t l = 0; l < num_hidden_layers; ++l) sparse_layers += is_moe_layer(l) ? 1 : 0;
    // Each expert is a module of its own: a small file must not ask for millions of them.
    TIDAL_CHECK(sparse_layers * num_experts <= kMaxExpertsInAll, at, num_experts, " experts in each of ", sparse_layers,
                " sparse layers are ", sparse_layers * num_experts, " experts in all, more than the ", kMaxExpertsInAll,
                " tidal allows (docs/reliability.md)");
  } else {
    TIDAL_CHECK(num_experts == 0, at, "num_experts is set but model_type ", model_type, " is dense");
  }
  int64_t params = 0;
  try {
    params = parameter_count();
  } catch (const Error&) {
    params = std::numeric_limits<int64_t>::max();  // more than int64 holds: past the limit too
  }
  TIDAL_CHECK(params <= kMaxParameters, at, "the model has ",
              params == std::numeric_limits<int64_t>::max() ? std::string("over 2^63") : std::to_string(params),
              " parameters, more than the ", kMaxParameters, " tidal allows (docs/reliability.md)");
}

RopeFrequencies ModelConfig::rope_frequencies(int64_t seq_len) const {
  RopeScaling s = rope_scaling;
  // transformers' dynamic type measures against the config's max_position_embeddings as it is now (a
  // --max-position-embeddings override included).
  if (s.type == RopeType::dynamic) s.original_max_position_embeddings = max_position_embeddings;
  return tidal::rope_frequencies(head_size(), rope_theta, s, seq_len);
}

ModelConfig config_from_json(const json& j, std::string_view source, std::set<std::string>* fields_read) {
  TIDAL_CHECK(j.is_object(), "[config] ", source, " must hold a JSON object, found ", json_kind(j));
  const FieldReader f(j, source, fields_read);
  ModelConfig c;
  c.model_type = f.get("model_type", "");
  if (c.model_type == "gemma3") return detail::read_gemma3_multimodal(f);
  // The value is not echoed: a hostile file's string could be anything (tests/unit/hostile_config_test.cpp).
  TIDAL_CHECK(is_model_type(c.model_type), "[config] ", source,
              " field 'model_type' names no model tidal builds: supported are ", model_type_list());
  // Sizes are read within the limits, so nothing derived from them below can overflow.
  const Names n = c.is_gpt2()
                      ? Names{"n_embd", "n_layer", "n_head", "n_positions"}
                      : Names{"hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings"};
  // GPT2Config's attribute_map: hidden_size is n_embd, and so on.
  auto name = [&](const char* own, const char* common) { return c.is_gpt2() ? f.alias(own, common) : own; };
  c.vocab_size = f.need("vocab_size", 1, kMaxVocab);
  c.hidden_size = f.need(name(n.hidden, "hidden_size"), 1, kMaxWidth);
  c.num_hidden_layers = f.need(name(n.layers, "num_hidden_layers"), 1, kMaxLayers);
  c.num_attention_heads = f.need(name(n.heads, "num_attention_heads"), 1, kMaxHeads);
  const FamilyDefaults defaults = family_defaults(c.model_type);
  if (c.is_gpt2()) {
    c.intermediate_size = f.get("n_inner", 4 * c.hidden_size, 1, kMaxWidth);
    c.max_position_embeddings = f.need(name(n.positions, "max_position_embeddings"), 1, kMaxPositions);
    c.norm_eps = f.get("layer_norm_epsilon", 1e-5);
    c.hidden_act = f.get("activation_function", "gelu_new");
    c.attention_dropout = f.get("attn_pdrop", 0.1);
    c.hidden_dropout = f.get("resid_pdrop", 0.1);
    c.tie_word_embeddings = f.get("tie_word_embeddings", true);
    TIDAL_CHECK(c.hidden_act == "gelu_new" || c.hidden_act == "gelu", "[config] ", source,
                " field 'activation_function' is not supported for gpt2 (gelu_new or gelu)");
  } else {
    // DeepseekV4Config has no intermediate_size of its own (its attribute_map: moe_intermediate_size).
    if (!c.is_deepseek_v4()) c.intermediate_size = f.need("intermediate_size", 1, kMaxWidth);
    c.num_key_value_heads =
        f.get("num_key_value_heads", defaults.kv_heads > 0 ? defaults.kv_heads : c.num_attention_heads, 1, kMaxHeads);
    c.head_dim = f.get("head_dim", defaults.head_dim, 0, kMaxWidth);
    c.max_position_embeddings = f.get(n.positions, defaults.positions, 1, kMaxPositions);
    c.norm_eps = f.get("rms_norm_eps", 1e-6);
    c.attention_dropout = f.get("attention_dropout", 0.0);
    c.tie_word_embeddings = f.get("tie_word_embeddings", c.is_gemma3());
    // nn.Embedding(vocab, hidden, padding_idx=pad_token_id) in every Llama-family model (Gemma3TextConfig's
    // default is 0, the others' null).
    c.pad_token_id =
        f.get("pad_token_id", int64_t(c.is_gemma3() && !f.present("pad_token_id") ? 0 : -1), 0, c.vocab_size - 1);
    if (c.is_gemma3()) {
      detail::read_gemma3(f, c);  // its RoPE, windows, activation and attention scale
    } else if (c.is_deepseek_v3()) {
      detail::read_deepseek_v3(f, c);  // MLA, its RoPE, its MoE
    } else if (c.is_deepseek_v4()) {
      detail::read_deepseek_v4(f, c);  // its attention, RoPE, MoE and mHC
    } else {
      detail::read_rope(f, c);
      detail::read_sliding_window(f, c);
      c.hidden_act = f.get("hidden_act", "silu");
      // llama and qwen3's attention_bias: biases on q/k/v/o; Mistral and Qwen2 fix theirs (no attention_bias).
      if (c.model_type != "mistral" && c.model_type != "qwen2") c.attention_bias = f.get("attention_bias", false);
      c.qkv_bias = c.model_type == "qwen2";  // Qwen2Attention: q/k/v with biases, o_proj without
      c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
      if (c.model_type == "qwen3_moe") {
        c.num_experts = f.need(f.alias("num_experts", "num_local_experts"), 1, kMaxExperts);
        c.num_experts_per_tok = f.need("num_experts_per_tok", 1, c.num_experts);
        c.moe_intermediate_size = f.need("moe_intermediate_size", 1, kMaxWidth);
        c.norm_topk_prob = f.get("norm_topk_prob", false);
        c.decoder_sparse_step = f.get("decoder_sparse_step", int64_t(1), 1, kMaxLayers);
        c.mlp_only_layers = f.get_array("mlp_only_layers", size_t(kMaxLayers));
        c.router_aux_loss_coef = f.get("router_aux_loss_coef", 0.001);
      }
      TIDAL_CHECK(c.hidden_act == "silu", "[config] ", source, " field 'hidden_act' is not supported for ",
                  c.model_type, " (only silu)");
    }
  }
  c.initializer_range = f.get("initializer_range", 0.02);
  c.torch_dtype = f.get(f.alias("torch_dtype", "dtype"), "float32");  // 5.x writes dtype
  detail::check_unsupported_fields(f, c);
  c.validate(source);
  return c;
}

ModelConfig load_config(const std::string& path) {
  return config_from_json(parse_json(io::read_file(path), "[config] " + path), path);
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
  j["architectures"] = {architecture(c.model_type)};
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.kv_heads();
  j["head_dim"] = c.head_size();  // qwen3 defaults it to 128, not hidden / heads
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.norm_eps;
  j["attention_dropout"] = c.attention_dropout;
  j["pad_token_id"] = c.pad_token_id >= 0 ? nlohmann::json(c.pad_token_id) : nlohmann::json(nullptr);
  if (c.is_gemma3()) {
    j["attention_bias"] = c.attention_bias;
    detail::write_gemma3(c, j);  // its rope fields too
    return j;
  }
  if (c.is_deepseek_v3()) {
    detail::write_deepseek_v3(c, j);
    return j;
  }
  if (c.is_deepseek_v4()) {
    detail::write_deepseek_v4(c, j);
    return j;
  }
  detail::write_rope(c, j);
  j["hidden_act"] = c.hidden_act;
  if (c.model_type != "mistral" && c.model_type != "qwen2") j["attention_bias"] = c.attention_bias;
  detail::write_sliding_window(c, j);
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
