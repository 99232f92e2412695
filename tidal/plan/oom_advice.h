#pragma once
// Out-of-memory advice for `tidal train`: when the device limit is exceeded, the message shows the
// breakdown at that moment and then the next steps in the triage order — chunked loss / fused ops,
// sharding, recompute (selective, then full), async offload, swap optimizer — each with the saving
// tidal's estimator predicts for this model and batch, skipping what is already on. Every
// suggestion is a small function of the model config, the batch shape and the current settings, so
// a feature that lands later only adds its field to memory::MemoryConfig. The flags of a suggestion
// are train/memory_flags.h's spelling of the configuration it changes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tidal/allocator.h"
#include "tidal/memory/memory_config.h"
#include "tidal/models/config.h"
#include "tidal/ops/attention.h"
#include "tidal/plan/step_peak.h"
#include "tidal/train/arguments.h"

namespace tidal::plan {

// A step of the triage order, and what the advice calls it ("chunked loss", "recompute (selective)", ...).
enum class TriageStep {
  chunked_loss,
  fused_ops,
  sharding,  // saves only with several ranks; on one, its note says what N ranks would
  expert_parallel,
  context_parallel,
  recompute_selective,
  recompute_full,
  async_offload,
  swap_optimizer,
  batch,  // a smaller micro-batch: outside the triage order, the last resort
};
const char* name(TriageStep step);

struct Suggestion {
  TriageStep step = TriageStep::chunked_loss;
  std::string flags;    // to add to the command line ("" when there is nothing to add)
  int64_t saving = 0;   // predicted bytes saved at the step's peak
  std::string note;     // where the number comes from, or why it is not available
  TriageSettings with;  // the settings with this step taken (unchanged for sharding)
};

// The suggestions, one small function each (nullopt: already on, or it would save nothing).
std::optional<Suggestion> suggest_chunked_loss(const models::ModelConfig& m, const TriageSettings& s);
std::optional<Suggestion> suggest_fused_attention(const models::ModelConfig& m, const TriageSettings& s);
Suggestion suggest_sharding(const models::ModelConfig& m, const TriageSettings& s);
// Expert parallelism (MoE models) and context parallelism with several ranks, each at the largest size
// tidal train runs on them (check_expert_parallel, check_context_parallel): the ranks' layout, in the
// sharding group of the triage order (after sharding, before recompute).
std::vector<Suggestion> suggest_parallel(const models::ModelConfig& m, const TriageSettings& s);
// That step (expert_parallel or context_parallel) at size n: nullopt where tidal train would not run it or it saves
// nothing.
std::optional<Suggestion> suggest_parallel_size(const models::ModelConfig& m, const TriageSettings& s, TriageStep step,
                                                int n);
std::vector<Suggestion> suggest_recompute(const models::ModelConfig& m, const TriageSettings& s);
std::optional<Suggestion> suggest_offload(const models::ModelConfig& m, const TriageSettings& s);
std::optional<Suggestion> suggest_swap_optimizer(const models::ModelConfig& m, const TriageSettings& s);
std::optional<Suggestion> suggest_smaller_micro_batch(const models::ModelConfig& m, const TriageSettings& s);

// Each suggestion's saving is the drop of this prediction when its setting is turned on.

// The step's place in the triage order: 1 chunked loss / fused ops, 2 sharding (and expert and context
// parallelism), 3 recompute, 4 async offload, 5 swap optimizer, 6 a smaller micro-batch (not in the
// order: the last resort).
int triage_group(TriageStep step);

// All of them in the triage order.
std::vector<Suggestion> triage(const models::ModelConfig& m, const TriageSettings& s);
// The advice as text: "What to try, in the triage order ..."; with a device limit (bytes, 0: none)
// it marks what would be enough alone.
// DeepSeek-V4's recompute step names its own flags (--recompute-csa-attention, --mhc-recompute) that are not on,
// with what they take off the peak and off the activations kept after forward (memory/deepseek_v4_savings.h).
std::string oom_advice(const models::ModelConfig& m, const TriageSettings& s, int64_t limit = 0);
// The allocator's message (what failed, the breakdown at that moment) with its generic hint
// replaced by the advice; `planner` (the search's choice for the limit, plan/auto_memory.h), when not
// empty, replaces the line that points to `tidal plan`.
std::string out_of_memory_message(const OutOfMemory& e, const models::ModelConfig& m, const TriageSettings& s,
                                  const std::string& planner = "");

}  // namespace tidal::plan
