#pragma once
// Model configuration: the fields of a Hugging Face config.json for the architectures tidal builds
// (model_type gpt2, llama, mistral, qwen2, qwen3, qwen3_moe, gemma3_text, deepseek_v3, deepseek_v4), with HF's names
// and defaults, plus built-in presets.
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tidal/dtype.h"
#include "tidal/ops/rope_scaling.h"

namespace tidal::models {

// Limits on what a config (a config.json from a stranger, a flag, a checkpoint) may ask for, checked by
// validate() before anything is allocated. Each is tens of times the largest published model's value
// (docs/reliability.md, "Limits on what a file may ask for"), so a 1T-parameter model still plans.
inline constexpr int64_t kMaxLayers = 4096;                    // largest published: ~160
inline constexpr int64_t kMaxWidth = int64_t(1) << 20;         // hidden, intermediate, head_dim; largest: 53248
inline constexpr int64_t kMaxHeads = int64_t(1) << 16;         // largest: 128
inline constexpr int64_t kMaxVocab = int64_t(1) << 24;         // largest: 262144
inline constexpr int64_t kMaxPositions = int64_t(1) << 24;     // largest: 10485760 (Llama 4 Scout)
inline constexpr int64_t kMaxExperts = 4096;                   // largest: 384 (Kimi K2)
inline constexpr int64_t kMaxExpertsInAll = int64_t(1) << 17;  // experts x sparse layers; largest: 23040 (K2)
inline constexpr int64_t kMaxParameters = int64_t(1) << 45;    // ~35T; largest: ~1T

// The model types tidal builds, as config.json's model_type names them.
inline constexpr const char* kModelTypes[] = {"gpt2",      "llama",       "mistral",     "qwen2",      "qwen3",
                                              "qwen3_moe", "gemma3_text", "deepseek_v3", "deepseek_v4"};
bool is_model_type(std::string_view type);
// "gpt2, llama, ...": for messages.
std::string model_type_list();

struct ModelConfig {
  std::string model_type;  // one of kModelTypes
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;              // gpt2: n_embd
  int64_t intermediate_size = 0;        // gpt2: n_inner (null: 4 * n_embd)
  int64_t num_hidden_layers = 0;        // gpt2: n_layer
  int64_t num_attention_heads = 0;      // gpt2: n_head
  int64_t num_key_value_heads = 0;      // grouped-query heads (0: = num_attention_heads)
  int64_t head_dim = 0;                 // 0: hidden_size / num_attention_heads (qwen3 sets it)
  int64_t max_position_embeddings = 0;  // gpt2: n_positions
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;  // rope_scaling (4.x) / rope_parameters (5.x): models/config_rope.cpp
  double norm_eps = 1e-5;    // rms_norm_eps / layer_norm_epsilon
  bool tie_word_embeddings = false;
  bool attention_bias = false;     // biases on q/k/v/o projections (llama attention_bias)
  bool qkv_bias = false;           // biases on q/k/v only (qwen2)
  bool qk_norm = false;            // RMSNorm of each head's q and k (qwen3, qwen3_moe)
  std::string hidden_act;          // gelu_new (gpt2) | silu
  double attention_dropout = 0.0;  // gpt2: attn_pdrop
  double hidden_dropout = 0.0;     // gpt2: resid_pdrop (and embd_pdrop)
  double initializer_range = 0.02;
  std::string torch_dtype = "float32";
  // The Llama family's embedding padding_idx (Hugging Face's pad_token_id): that row of embed_tokens gets
  // no gradient from the lookups. -1: none. (GPT-2's wte has none.)
  int64_t pad_token_id = -1;
  // Sliding-window attention (mistral, and qwen2/qwen3 with use_sliding_window): a sliding layer's query
  // at position p sees the keys at positions p - sliding_window < q <= p (ops/attention.h).
  int64_t sliding_window = 0;            // 0: every layer attends to all earlier tokens
  std::vector<std::string> layer_types;  // per layer: full_attention | sliding_attention (empty: all full)
  // Gemma 3: attention scores scaled by query_pre_attn_scalar^-1/2 (0: head_dim^-1/2), and the sliding
  // layers' own RoPE base with the default rope type (rope_local_base_freq; 0: one table for all).
  double query_pre_attn_scalar = 0;
  double rope_local_theta = 0;
  // Gemma 3's layer rule when the file gives no layer_types: every sliding_window_pattern-th layer is
  // full, the rest slide (0: layer_types as given). --num-layers re-applies it.
  int64_t sliding_window_pattern = 0;
  // Mixture of experts (qwen3_moe).
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  double router_aux_loss_coef = 0.001;
  // Token dropping (Megatron-LM's --moe-expert-capacity-factor, --moe-token-drop-policy,
  // --moe-pad-expert-input-to-capacity; not fields of config.json; models/moe.h): each expert takes at
  // most ceil(N x k / num_experts x factor) of a forward's N tokens' (token, expert) slots, the others
  // are dropped. 0: no capacity, nothing dropped.
  double moe_expert_capacity_factor = 0;
  enum class DropPolicy { probs, position };
  DropPolicy moe_token_drop_policy = DropPolicy::probs;  // probs: keep the highest weights; position: the earliest
  bool moe_pad_expert_input_to_capacity = false;         // every expert runs `capacity` rows (zero-weight padding)
  // DeepSeek-V3 (deepseek_v3; models/deepseek_v3.h). Multi-head latent attention: queries through a
  // low-rank q_a_proj -> RMSNorm -> q_b_proj (q_lora_rank 0: one q_proj), keys and values from a shared
  // latent of kv_lora_rank (kv_a_proj_with_mqa -> RMSNorm -> kv_b_proj) plus one rotary key of
  // qk_rope_head_dim shared by all heads. A query/key head is qk_nope_head_dim + qk_rope_head_dim wide, a
  // value head v_head_dim; head_dim is qk_rope_head_dim (the rotary part, as transformers sets it).
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;  // > 0: MLA
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool rope_interleave = false;  // the rotary dims of q_b/kv_a's outputs come in (x0, x1) pairs
  // Its MoE: sigmoid scores, a per-expert correction bias added for the choice only (aux-loss-free
  // balancing), the top-k chosen within the topk_group best of n_group expert groups (a group scored by
  // its two best experts), weights renormalized (norm_topk_prob) and times routed_scaling_factor, shared
  // experts (one MLP of n_shared_experts x moe_intermediate_size) on every token; the first
  // first_k_dense_replace layers dense.
  enum class RouterScore { softmax, sigmoid };
  RouterScore router_score = RouterScore::softmax;
  bool router_expert_bias = false;  // e_score_correction_bias, a buffer of each router
  int64_t n_group = 1, topk_group = 1;
  double routed_scaling_factor = 1.0;
  int64_t n_shared_experts = 0;
  int64_t first_k_dense_replace = 0;
  // Megatron-LM's --moe-router-enable-expert-bias with --moe-router-bias-update-rate (not a field of
  // config.json): after each step every router's bias moves by this rate towards balance, + for an expert
  // that took fewer tokens than the mean over the experts, - for one that took more (Router). 0: frozen.
  double moe_router_bias_update_rate = 0;
  // Multi-token prediction modules the checkpoint holds (num_nextn_predict_layers): transformers' causal LM
  // neither builds nor trains them; tidal builds the first mtp_num_layers of them.
  int64_t num_nextn_predict_layers = 0;
  // Megatron-LM's --mtp-num-layers (not a field of config.json): the multi-token-prediction depths the model
  // builds and trains (DeepSeek-V3's MTP modules, models/mtp.h), saved as model.layers.<num_hidden_layers + k>.
  // A checkpoint written with them says num_nextn_predict_layers = mtp_num_layers. 0: none.
  int64_t mtp_num_layers = 0;

  // DeepSeek-V4 (deepseek_v4; models/config_deepseek_v4.h has the fields, models/deepseek_v4.h the model).
  struct DeepseekV4 {
    int64_t hc_mult = 0;  // mHC residual streams (models/hyper_connection.h)
    int64_t hc_sinkhorn_iters = 20;
    double hc_eps = 1e-6;
    int64_t o_groups = 0;        // grouped output projection: o_groups groups of heads,
    int64_t o_lora_rank = 0;     // each projected to o_lora_rank, then o_b_proj to hidden
    int64_t rope_dim = 0;        // head_dim * partial_rotary_factor: each head's trailing rotary channels
    double swiglu_limit = 0;     // clamp of the experts' gate (max) and up (both sides) projections; 0: none
    std::vector<bool> hash_moe;  // per layer: mlp_layer_types hash_moe (experts from the tid2eid table)
    // The compressed layers (HCA, CSA): their q/kv RoPE and their entries' take compress_rope_theta, scaled
    // by rope_parameters.compress (default or yarn; V4-Flash and V4-Pro: yarn, factor 16).
    double compress_rope_theta = 160000.0;
    RopeScaling compress_rope_scaling;
    int64_t compress_rate_csa = 4, compress_rate_hca = 128;
    int64_t index_n_heads = 0, index_head_dim = 0, index_topk = 0;
  };
  DeepseekV4 v4;

  bool is_gpt2() const { return model_type == "gpt2"; }
  bool is_deepseek_v4() const { return model_type == "deepseek_v4"; }
  bool is_heavily_compressed(int64_t layer) const {
    return is_deepseek_v4() && layer_types.at(size_t(layer)) == "heavily_compressed_attention";
  }
  bool is_sparse_compressed(int64_t layer) const {
    return is_deepseek_v4() && layer_types.at(size_t(layer)) == "compressed_sparse_attention";
  }
  bool is_compressed(int64_t layer) const { return is_heavily_compressed(layer) || is_sparse_compressed(layer); }
  bool is_gemma3() const { return model_type == "gemma3_text"; }
  bool is_deepseek_v3() const { return model_type == "deepseek_v3"; }
  bool is_mla() const { return kv_lora_rank > 0; }
  // A query/key head's width and a value head's: MLA's qk_nope + qk_rope and v_head_dim, else head_size().
  int64_t qk_head_size() const { return is_mla() ? qk_nope_head_dim + qk_rope_head_dim : head_size(); }
  int64_t v_head_size() const { return is_mla() ? v_head_dim : head_size(); }
  // Elements of one token's keys and values together (what context parallelism moves between ranks).
  int64_t kv_elements_per_token() const { return kv_heads() * (qk_head_size() + v_head_size()); }
  // The attention's softmax scale: 0 for 1/sqrt(head_size) (AttentionOptions::scale).
  double attention_scale() const;
  // Layer `layer`'s RoPE: Gemma 3's sliding layers take rope_local_theta unscaled, the rest rope_frequencies.
  RopeFrequencies layer_rope_frequencies(int64_t layer, int64_t seq_len) const;
  bool is_moe() const { return num_experts > 0; }
  // The window of layer `layer`'s attention: sliding_window for a sliding layer, 0 (none) otherwise.
  int64_t attention_window(int64_t layer) const;
  // Sets num_hidden_layers (--num-layers): layer_types follows when all its entries are one type;
  // per-layer types of another count are refused (they say which layers slide).
  void set_num_layers(int64_t layers);
  int64_t kv_heads() const { return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  // The rotary frequencies of a run of `seq_len` positions (the rope type's scaling applied).
  RopeFrequencies rope_frequencies(int64_t seq_len) const;
  // Hugging Face's Qwen3-MoE rule: layer l is sparse unless listed in mlp_only_layers, every
  // decoder_sparse_step-th layer; DeepSeek-V3's: from layer first_k_dense_replace on.
  bool is_moe_layer(int64_t layer) const;
  // Throws tidal::Error naming the first inconsistent field (e.g. heads not dividing hidden size) or the
  // first one past the limits above; `source` (a file) prefixes the message when given.
  void validate(std::string_view source = {}) const;
  // The parameter count (embeddings, attention, MLP or experts, norms), each product checked: an Error
  // instead of a wrapped count for a config no machine could hold.
  int64_t parameter_count() const;
};

// From a parsed config.json / a file; unknown model types, missing fields, fields of the wrong JSON kind,
// sizes past the limits and fields that change the math in a way tidal does not implement (a sliding
// window, a rope type it lacks, ...: docs/interop.md) are errors naming `source`, the field and its
// value. `fields_read`, when given, receives every top-level key the reader looked at (read or checked).
ModelConfig config_from_json(const nlohmann::json& j, std::string_view source = "config.json",
                             std::set<std::string>* fields_read = nullptr);
ModelConfig load_config(const std::string& path);
// The config.json a Hugging Face loader understands.
nlohmann::json config_to_json(const ModelConfig& c);

struct Preset {
  std::string name;
  std::string description;
  ModelConfig config;
};
// The tiny ones for tests and demos (tiny-gpt2, tiny-llama, tiny-qwen3, tiny-qwen3-moe, tiny-mistral,
// tiny-qwen2, small-gpt2) and published sizes: GPT-2, Llama 3.1/3.2, Mistral 7B, Qwen2.5, Qwen3
// (`tidal presets` lists them).
const std::vector<Preset>& presets();
// Throws listing the valid names.
ModelConfig preset(const std::string& name);

}  // namespace tidal::models
