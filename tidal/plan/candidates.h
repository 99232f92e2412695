#pragma once
// The configurations `tidal plan` searches (plan/search.h): the given run with its memory
// switches changed along the triage order and beyond — chunked loss (two chunk sizes), fused
// attention, data-parallel sharding and --overlap-grad-reduce (with several ranks), recompute
// (activation function, norm, selective modules, full block N, full uniform N), activation offload
// (policy, prefetch depth), the swap optimizer (16 or 4 windows), a smaller or larger micro-batch
// with gradient accumulation (the same global batch), and — when not given — expert parallelism (E
// dividing the experts and the ranks; MoE models) and context parallelism (C dividing the ranks, 2C
// the sequence) where tidal train runs them (check_expert_parallel, check_context_parallel). Every candidate is
// validated as `tidal train` validates its flags (its memory flags are re-parsed), so an impossible combination never
// becomes a candidate.
#include <cstdint>
#include <string>
#include <vector>

#include "tidal/ops/attention.h"
#include "tidal/train/arguments.h"

namespace tidal::plan {

struct CandidateConfig {
  train::TrainArgs args;  // the whole configuration: the given run with the changes below
  // What differs from the given run, as flags (memory flags as train/memory_flags.h spells them, then
  // --attention, --micro-batch-size, sharding): what to add, replacing the given memory flags.
  std::string flags;
  // Its place on the recompute ladder: 0 none, growing with the compute a step replays (the search
  // takes, per combination of the other switches, the first rung that fits).
  int recompute_rung = 0;
  std::string recompute;  // "none", "activation function", "full block 4", ...
};

// The recompute ladder for `m`: none, activation function, activation function + norm, selective
// modules (mlp, or moe_act and moe for MoE models; core_attn with eager attention, and always for
// DeepSeek-V4's composed core), DeepSeek-V4's --recompute-csa-attention and --mhc-recompute (alone, together,
// beside core_attn and moe), full block N for N on a ladder of 1 .. layers-1 (every N up to 16 layers, then
// about x1.5 apart; DeepSeek-V4: also with its flags on the other layers), full uniform 1, 2 and 4 (groups
// of N layers).
// Rungs the model refuses (validate_recompute) are left out.
std::vector<memory::RecomputeConfig> recompute_ladder(const models::ModelConfig& m, AttentionKernel attention);

// Every candidate: the product of the switches above, less the combinations `tidal train` refuses.
// The given configuration is candidate 0, as given. On the ranks of given.parallel (sharding
// candidates when > 1); `disk_dir` not empty: offload to a spill file there is a candidate too
// (policies all and layer-input).
std::vector<CandidateConfig> enumerate_candidates(const train::TrainArgs& given, const std::string& disk_dir = "");

// The flags a candidate's configuration differs from `given` by (see CandidateConfig::flags).
std::string changed_flags(const train::TrainArgs& given, const train::TrainArgs& c);

}  // namespace tidal::plan
