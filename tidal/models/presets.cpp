// Built-in model presets (`--model NAME`, `tidal presets`). The real sizes follow the published
// Hugging Face config.json of each model; the tiny ones are for tests and demos.
#include "tidal/base/error.h"
#include "tidal/models/config.h"

namespace tidal::models {
namespace {

ModelConfig gpt2(int64_t vocab, int64_t hidden, int64_t layers, int64_t heads, int64_t positions, double dropout) {
  ModelConfig c;
  c.model_type = "gpt2";
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = 4 * hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.max_position_embeddings = positions;
  c.norm_eps = 1e-5;
  c.hidden_act = "gelu_new";
  c.attention_dropout = dropout;
  c.hidden_dropout = dropout;
  c.tie_word_embeddings = true;
  return c;
}

ModelConfig llama_like(const char* type, int64_t vocab, int64_t hidden, int64_t ffn, int64_t layers, int64_t heads,
                       int64_t kv_heads, int64_t head_dim, int64_t positions, double theta, bool tied) {
  ModelConfig c;
  c.model_type = type;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = ffn;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.max_position_embeddings = positions;
  c.rope_theta = theta;
  c.norm_eps = 1e-6;
  c.hidden_act = "silu";
  c.tie_word_embeddings = tied;
  c.qk_norm = std::string(type) == "qwen3" || std::string(type) == "qwen3_moe";
  c.qkv_bias = std::string(type) == "qwen2";
  return c;
}

// Llama 3.1 / 3.2's rope_type llama3 (their config.json: low 1, high 4, original 8192 positions).
ModelConfig llama3(ModelConfig c, double factor) {
  c.rope_scaling.type = RopeType::llama3;
  c.rope_scaling.factor = factor;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  c.norm_eps = 1e-5;
  return c;
}

ModelConfig with_eps(ModelConfig c, double eps) {
  c.norm_eps = eps;
  return c;
}

// Gemma 3's text model: GeGLU, QK-norm, every `pattern`-th layer full and the rest sliding over
// `window` keys, RoPE 1e6 (linear x`factor` on 4B and up) on full layers and 10000 on sliding ones.
ModelConfig gemma3(int64_t vocab, int64_t hidden, int64_t ffn, int64_t layers, int64_t heads, int64_t kv_heads,
                   int64_t head_dim, int64_t positions, int64_t window, int64_t pattern, double factor,
                   double query_scalar) {
  ModelConfig c =
      llama_like("gemma3_text", vocab, hidden, ffn, layers, heads, kv_heads, head_dim, positions, 1000000.0, true);
  c.hidden_act = "gelu_pytorch_tanh";
  c.qk_norm = true;
  c.rope_local_theta = 10000.0;
  c.query_pre_attn_scalar = query_scalar;
  if (factor > 1) {
    c.rope_scaling.type = RopeType::linear;
    c.rope_scaling.factor = factor;
  }
  c.sliding_window = window;
  c.sliding_window_pattern = pattern;
  c.set_num_layers(layers);  // the pattern's layer types
  return c;
}

// Every layer attends within `window` keys (Mistral 7B v0.1).
ModelConfig sliding(ModelConfig c, int64_t window) {
  c.sliding_window = window;
  c.layer_types.assign(size_t(c.num_hidden_layers), "sliding_attention");
  return c;
}

ModelConfig moe(ModelConfig c, int64_t experts, int64_t top_k, int64_t moe_ffn, std::vector<int64_t> dense_layers) {
  c.num_experts = experts;
  c.num_experts_per_tok = top_k;
  c.moe_intermediate_size = moe_ffn;
  c.norm_topk_prob = true;
  c.mlp_only_layers = std::move(dense_layers);
  c.router_aux_loss_coef = 0.001;
  return c;
}

// DeepSeek-V3's shape: MLA (q LoRA `q_rank`, kv latent `kv_rank`, heads of nope + rope for q/k and `v` for
// values, interleaved rotary dims), E routed experts of `moe_ffn` in `groups` groups (the best `top_groups`
// kept), top-k x `scaling`, one shared expert, the first `dense` layers dense; no auxiliary loss.
struct DeepseekShape {
  int64_t vocab, hidden, ffn, layers, heads, q_rank, kv_rank, nope, rope, v, positions;
  int64_t experts, top_k, moe_ffn, groups, top_groups, dense;
  double scaling;
};
ModelConfig deepseek_v3(const DeepseekShape& s) {
  ModelConfig c = llama_like("deepseek_v3", s.vocab, s.hidden, s.ffn, s.layers, s.heads, s.heads, s.rope, s.positions,
                             10000.0, false);
  c.q_lora_rank = s.q_rank;
  c.kv_lora_rank = s.kv_rank;
  c.qk_nope_head_dim = s.nope;
  c.qk_rope_head_dim = s.rope;
  c.v_head_dim = s.v;
  c.rope_interleave = true;
  c.num_experts = s.experts;
  c.num_experts_per_tok = s.top_k;
  c.moe_intermediate_size = s.moe_ffn;
  c.norm_topk_prob = true;
  c.router_score = ModelConfig::RouterScore::sigmoid;
  c.router_expert_bias = true;
  c.router_aux_loss_coef = 0;
  c.n_group = s.groups;
  c.topk_group = s.top_groups;
  c.routed_scaling_factor = s.scaling;
  c.n_shared_experts = 1;
  c.first_k_dense_replace = s.dense;
  return c;
}

// DeepSeek-V3's config.json: yarn x40 over 4096 original positions, mscale and mscale_all_dim 1, one MTP module.
ModelConfig deepseek_v3_671b() {
  ModelConfig c =
      deepseek_v3({129280, 7168, 18432, 61, 128, 1536, 512, 128, 64, 128, 163840, 256, 8, 2048, 8, 4, 3, 2.5});
  c.rope_scaling.type = RopeType::yarn;
  c.rope_scaling.factor = 40;
  c.rope_scaling.original_max_position_embeddings = 4096;
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 1.0;
  c.num_nextn_predict_layers = 1;
  return c;
}

std::vector<Preset> make_presets() {
  std::vector<Preset> p = {
      {"tiny-gpt2", "2 layers, hidden 64, 4 heads, vocab 512 (tests and demos)", gpt2(512, 64, 2, 4, 256, 0.0)},
      {"tiny-llama", "2 layers, hidden 64, 4 heads / 2 kv heads, SwiGLU 176, vocab 512",
       llama_like("llama", 512, 64, 176, 2, 4, 2, 0, 256, 10000.0, false)},
      {"tiny-qwen3", "2 layers, hidden 64, 4 heads / 2 kv heads of 16, QK-norm, tied, vocab 512",
       llama_like("qwen3", 512, 64, 192, 2, 4, 2, 16, 256, 1000000.0, true)},
      {"tiny-qwen3-moe", "2 layers (dense, then 8 experts top-2 of 32), hidden 64, vocab 512",
       moe(llama_like("qwen3_moe", 512, 64, 128, 2, 4, 2, 16, 256, 1000000.0, false), 8, 2, 32, {0})},
      {"tiny-mistral", "2 layers, hidden 64, 4 heads / 2 kv heads, sliding window of 8 keys, vocab 512",
       sliding(llama_like("mistral", 512, 64, 176, 2, 4, 2, 0, 256, 10000.0, false), 8)},
      {"tiny-qwen2", "2 layers, hidden 64, 4 heads / 2 kv heads, q/k/v biases, tied, vocab 512",
       llama_like("qwen2", 512, 64, 176, 2, 4, 2, 0, 256, 1000000.0, true)},
      {"tiny-gemma3",
       "4 layers (3 sliding over 8 keys, 1 full), hidden 64, 4 heads / 2 kv heads of 16, GeGLU, vocab 512",
       gemma3(512, 64, 128, 4, 4, 2, 16, 256, 8, 4, 1.0, 16.0)},
      {"tiny-deepseek-v3",
       "3 layers (dense, then 8 experts in 4 groups top-2 of 32 + 1 shared), hidden 64, MLA (q LoRA 32, kv latent "
       "32, heads of 16 + 8 rotary / 16), vocab 512",
       deepseek_v3({512, 64, 128, 3, 4, 32, 32, 16, 8, 16, 256, 8, 2, 32, 4, 2, 1, 2.5})},
      {"small-gpt2", "4 layers, hidden 256, 4 heads, vocab 8192, 1024 positions", gpt2(8192, 256, 4, 4, 1024, 0.0)},
      {"gpt2-124m", "GPT-2 small: 12 layers, hidden 768, 12 heads, vocab 50257", gpt2(50257, 768, 12, 12, 1024, 0.1)},
      {"gpt2-350m", "GPT-2 medium: 24 layers, hidden 1024, 16 heads, vocab 50257",
       gpt2(50257, 1024, 24, 16, 1024, 0.1)},
      {"llama3.2-1b", "Llama-3.2-1B: 16 layers, hidden 2048, 32 heads / 8 kv heads of 64, llama3 RoPE x32, tied",
       llama3(llama_like("llama", 128256, 2048, 8192, 16, 32, 8, 64, 131072, 500000.0, true), 32.0)},
      {"llama3.2-3b", "Llama-3.2-3B: 28 layers, hidden 3072, 24 heads / 8 kv heads of 128, llama3 RoPE x32, tied",
       llama3(llama_like("llama", 128256, 3072, 8192, 28, 24, 8, 128, 131072, 500000.0, true), 32.0)},
      {"llama3.1-8b", "Llama-3.1-8B: 32 layers, hidden 4096, 32 heads / 8 kv heads, llama3 RoPE x8",
       llama3(llama_like("llama", 128256, 4096, 14336, 32, 32, 8, 128, 131072, 500000.0, false), 8.0)},
      {"llama3.1-70b", "Llama-3.1-70B: 80 layers, hidden 8192, 64 heads / 8 kv heads, llama3 RoPE x8",
       llama3(llama_like("llama", 128256, 8192, 28672, 80, 64, 8, 128, 131072, 500000.0, false), 8.0)},
      {"mistral-7b", "Mistral-7B-v0.3: 32 layers, hidden 4096, 32 heads / 8 kv heads, vocab 32768, no window",
       with_eps(llama_like("mistral", 32768, 4096, 14336, 32, 32, 8, 128, 32768, 1000000.0, false), 1e-5)},
      {"mistral-7b-v0.1", "Mistral-7B-v0.1: as mistral-7b with vocab 32000, RoPE base 10000, a 4096-key window",
       sliding(with_eps(llama_like("mistral", 32000, 4096, 14336, 32, 32, 8, 128, 32768, 10000.0, false), 1e-5), 4096)},
      {"qwen2.5-0.5b", "Qwen2.5-0.5B: 24 layers, hidden 896, 14 heads / 2 kv heads of 64, q/k/v biases, tied",
       llama_like("qwen2", 151936, 896, 4864, 24, 14, 2, 64, 32768, 1000000.0, true)},
      {"qwen2.5-1.5b", "Qwen2.5-1.5B: 28 layers, hidden 1536, 12 heads / 2 kv heads of 128, q/k/v biases, tied",
       llama_like("qwen2", 151936, 1536, 8960, 28, 12, 2, 128, 32768, 1000000.0, true)},
      {"qwen2.5-3b", "Qwen2.5-3B: 36 layers, hidden 2048, 16 heads / 2 kv heads of 128, q/k/v biases, tied",
       llama_like("qwen2", 151936, 2048, 11008, 36, 16, 2, 128, 32768, 1000000.0, true)},
      {"qwen2.5-7b", "Qwen2.5-7B: 28 layers, hidden 3584, 28 heads / 4 kv heads of 128, q/k/v biases",
       llama_like("qwen2", 152064, 3584, 18944, 28, 28, 4, 128, 32768, 1000000.0, false)},
      {"qwen2.5-14b", "Qwen2.5-14B: 48 layers, hidden 5120, 40 heads / 8 kv heads of 128, q/k/v biases",
       with_eps(llama_like("qwen2", 152064, 5120, 13824, 48, 40, 8, 128, 32768, 1000000.0, false), 1e-5)},
      {"qwen2.5-32b", "Qwen2.5-32B: 64 layers, hidden 5120, 40 heads / 8 kv heads of 128, q/k/v biases",
       with_eps(llama_like("qwen2", 152064, 5120, 27648, 64, 40, 8, 128, 32768, 1000000.0, false), 1e-5)},
      {"qwen2.5-72b", "Qwen2.5-72B: 80 layers, hidden 8192, 64 heads / 8 kv heads of 128, q/k/v biases",
       with_eps(llama_like("qwen2", 152064, 8192, 29568, 80, 64, 8, 128, 32768, 1000000.0, false), 1e-5)},
      {"gemma3-1b",
       "Gemma-3-1B: 26 layers (5 sliding over 512 keys, then 1 full), hidden 1152, 4 heads / 1 kv head of 256",
       gemma3(262144, 1152, 6912, 26, 4, 1, 256, 32768, 512, 6, 1.0, 256.0)},
      {"gemma3-4b",
       "Gemma-3-4B's text model: 34 layers (5 sliding over 1024 keys, then 1 full), hidden 2560, 8 heads / 4 kv "
       "heads of 256, linear RoPE x8",
       gemma3(262208, 2560, 10240, 34, 8, 4, 256, 131072, 1024, 6, 8.0, 256.0)},
      {"gemma3-12b",
       "Gemma-3-12B's text model: 48 layers (5 sliding over 1024 keys, then 1 full), hidden 3840, 16 heads / 8 kv "
       "heads of 256, linear RoPE x8",
       gemma3(262208, 3840, 15360, 48, 16, 8, 256, 131072, 1024, 6, 8.0, 256.0)},
      {"gemma3-27b",
       "Gemma-3-27B's text model: 62 layers (5 sliding over 1024 keys, then 1 full), hidden 5376, 32 heads / 16 kv "
       "heads of 128, linear RoPE x8",
       gemma3(262208, 5376, 21504, 62, 32, 16, 128, 131072, 1024, 6, 8.0, 168.0)},
      {"qwen3-0.6b", "Qwen3-0.6B: 28 layers, hidden 1024, 16 heads / 8 kv heads of 128, tied",
       llama_like("qwen3", 151936, 1024, 3072, 28, 16, 8, 128, 40960, 1000000.0, true)},
      {"qwen3-1.7b", "Qwen3-1.7B: 28 layers, hidden 2048, 16 heads / 8 kv heads of 128, tied",
       llama_like("qwen3", 151936, 2048, 6144, 28, 16, 8, 128, 40960, 1000000.0, true)},
      {"qwen3-8b", "Qwen3-8B: 36 layers, hidden 4096, 32 heads / 8 kv heads of 128",
       llama_like("qwen3", 151936, 4096, 12288, 36, 32, 8, 128, 40960, 1000000.0, false)},
      {"qwen3-30b-a3b", "Qwen3-30B-A3B: 48 layers, hidden 2048, 128 experts top-8 of 768, 32 heads / 4 kv heads",
       moe(llama_like("qwen3_moe", 151936, 2048, 6144, 48, 32, 4, 128, 40960, 1000000.0, false), 128, 8, 768, {})},
      {"deepseek-v3",
       "DeepSeek-V3 (671B, 37B active): 61 layers (3 dense), hidden 7168, MLA 128 heads, 256 experts in 8 groups "
       "top-8 of 2048 + 1 shared, yarn RoPE x40",
       deepseek_v3_671b()},
  };
  for (Preset& x : p) x.config.validate();
  return p;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = make_presets();
  return all;
}

ModelConfig preset(const std::string& name) {
  std::string names;
  for (const Preset& p : presets()) {
    if (p.name == name) return p.config;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  detail::throw_error(detail::str_cat("unknown model preset '", name, "'; valid presets are ", names));
}

}  // namespace tidal::models
