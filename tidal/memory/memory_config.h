#pragma once
// One typed memory configuration: every memory feature of a training run as values, not strings.
// `tidal train` parses it once from its flags (train/memory_flags.h, with its inverse), and the
// trainer, the models' offload runner, the estimator, the out-of-memory advice and `tidal plan` all
// read it. The spellings of its choices (what the flags take) live here, one function each way.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tidal/memory/recompute.h"
#include "tidal/models/config.h"

namespace tidal::memory {

// --offload-policy: which saved tensors a block offloads (memory/offload.h: offload_check).
enum class OffloadPolicyKind { all, layer_input, core_attn, min_bytes };
struct OffloadPolicy {
  OffloadPolicyKind kind = OffloadPolicyKind::all;
  int64_t min_bytes = 0;  // min_bytes: tensors of at least this many bytes
  bool operator==(const OffloadPolicy&) const = default;
};
// "all", "layer-input", "core-attn", "min-bytes=N"; the parse throws naming --offload-policy.
std::string name(const OffloadPolicy& p);
OffloadPolicy parse_offload_policy(const std::string& text);

enum class OffloadTarget { host, disk };
const char* name(OffloadTarget t);  // "host", "disk"

// --activation-offload and its --offload-* flags (docs/offload.md).
struct OffloadConfig {
  bool enabled = false;
  OffloadPolicy policy;
  OffloadTarget target = OffloadTarget::host;
  std::string dir;             // disk: where the spill file goes
  int64_t prefetch_depth = 1;  // blocks prefetched ahead in backward
  int64_t host_limit = 0;      // host bytes the offloaded copies may hold; 0: no cap
  bool operator==(const OffloadConfig&) const = default;
  std::string describe() const;  // "all to host", or "none"
};

// --loss-compute-mode default|chunk and --loss-chunk-size N (memory/chunk_loss.h).
struct LossComputeConfig {
  bool chunked = false;
  int64_t chunk_size = 1024;  // tokens per chunk (MindSpeed's default)
  bool operator==(const LossComputeConfig&) const = default;
  std::string describe() const;  // "default" or "chunk (1024 tokens per chunk)"
};

// --swap-optimizer and --swap-optimizer-times K (memory/swap_optimizer.h).
inline constexpr int64_t kSwapOptimizerDefaultTimes = 16;
struct SwapOptimizerConfig {
  bool on = false;
  int64_t times = -1;  // K as given; -1: the default (16, capped at the parameter count by make_adamw)
  bool operator==(const SwapOptimizerConfig&) const = default;
  int64_t requested_times() const { return times < 0 ? kSwapOptimizerDefaultTimes : times; }
};

struct MemoryConfig {
  RecomputeConfig recompute;  // --recompute-*
  // plan_recompute(recompute, model), made once by set_recompute; empty when nothing is recomputed.
  std::vector<LayerRecompute> recompute_plan;
  OffloadConfig offload;
  LossComputeConfig loss;
  SwapOptimizerConfig swap_optimizer;
  // Precision (bf16 parameters and activations) and sharding (optimizer states, gradients and
  // activations split across devices) join here as typed fields when they land, with their flags in
  // train/memory_flags.cpp.

  // Validates `rc` against the model (memory/recompute.h: validate_recompute, which throws naming the
  // flag) and sets it with its plan.
  void set_recompute(const RecomputeConfig& rc, const models::ModelConfig& model);
  bool operator==(const MemoryConfig&) const = default;
};

}  // namespace tidal::memory
