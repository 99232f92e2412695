#pragma once
// Activation recompute policies with Megatron-LM / MindSpeed-LLM's flags and rules (docs/recompute.md):
//   --recompute-granularity full|selective   --recompute-method uniform|block   --recompute-num-layers N
//   --recompute-activation-function [--recompute-activation-function-num-layers M]
//   --recompute-norm [--recompute-norm-num-layers M]
//   --recompute-modules core_attn,mlp,norm,moe_act,moe,mla_up_proj
//   --recompute-csa-attention   --mhc-recompute   (MindSpeed-LLM's, DeepSeek-V4 only)
// A RecomputeConfig (parsed from those flags by train/memory_flags.h) is validated against the model
// and turned into a per-layer plan the models follow.
#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tidal/models/config.h"
#include "tidal/models/layer_recompute.h"

namespace tidal::memory {

enum class Granularity { none, full, selective };
enum class RecomputeMethod { none, uniform, block };
// mla_up_proj (Megatron-LM's): multi-head latent attention's up-projections and RoPE (models/mla.h) run
// again in backward instead of keeping the queries, keys and values (and their internals).
enum class RecomputeModule { core_attn, mlp, norm, moe_act, moe, mla_up_proj };
inline constexpr std::array<RecomputeModule, 6> kRecomputeModules = {
    RecomputeModule::core_attn, RecomputeModule::mlp, RecomputeModule::norm,
    RecomputeModule::moe_act,   RecomputeModule::moe, RecomputeModule::mla_up_proj};
// Their flag spellings: "none", "full", "selective"; "none", "uniform", "block"; "core_attn", "mlp", ...
const char* name(Granularity g);
const char* name(RecomputeMethod m);
const char* name(RecomputeModule m);
std::string module_list(const std::vector<RecomputeModule>& modules);  // "core_attn,mlp": the flag's value

struct RecomputeConfig {
  Granularity granularity = Granularity::none;
  RecomputeMethod method = RecomputeMethod::none;
  int64_t num_layers = -1;  // --recompute-num-layers (full only); -1: not given
  bool activation_function = false;
  int64_t activation_num_layers = -1;  // -1: every layer eligible
  bool norm = false;
  int64_t norm_num_layers = -1;
  std::vector<RecomputeModule> modules;  // --recompute-modules (selective), in the order given
  // --recompute-csa-attention: DeepSeek-V4's compressed attention (CSA: compressor, indexer, sparse attention; HCA:
  // compressor, attention) in one checkpoint per compressed layer (models/deepseek_v4_attention.h).
  bool csa_attention = false;
  // --mhc-recompute: DeepSeek-V4's mHC mappings (the attention's pre and post, the MLP's pre) recomputed in
  // backward (models/deepseek_v4.h).
  bool mhc = false;

  bool operator==(const RecomputeConfig&) const = default;
  bool any() const { return granularity != Granularity::none || activation_function || norm || csa_attention || mhc; }
  // A short description: "full uniform 1", "selective core_attn", "activation-function (layers 0-3)", ...
  std::string describe() const;
  nlohmann::json to_json() const;
};

// What each layer does: models::LayerRecompute (models/layer_recompute.h), the plan's entry type.
using models::LayerRecompute;

// Checks Megatron / MindSpeed's rules and the model (layer counts, MoE modules). Throws tidal::Error
// with the rule that was broken, naming the flags.
void validate_recompute(const RecomputeConfig& c, const models::ModelConfig& model);

// The per-layer plan (MindSpeed's layer choice: with full-block recompute of N layers, the next M
// layers get activation / norm recompute; a layer never gets both).
std::vector<LayerRecompute> plan_recompute(const RecomputeConfig& c, const models::ModelConfig& model);

// --metrics-json's "recompute" summary: the mode, each recomputed layer with its policies ("full",
// "core_attn", "mlp", "moe", "moe_act", "mla_up_proj", "csa_attention", "mhc", "activation", "norm") and the time
// spent recomputing.
nlohmann::json recompute_stats_json(const RecomputeConfig& c, const std::vector<LayerRecompute>& plan,
                                    double recompute_ms);

}  // namespace tidal::memory
