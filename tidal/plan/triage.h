#pragma once
// `tidal plan`: will a training configuration fit a memory budget, and if not, which memory
// features make it fit — chosen in the triage order (chunked loss / fused ops, recompute, async
// offload, swap optimizer, then a smaller micro-batch), each step on top of those before it, with
// the step peak tidal's estimator predicts after each (the same numbers as the out-of-memory
// advice, oom_advice.h). Runs on shapes alone: nothing is allocated, any preset size works.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tidal/plan/dry_run.h"
#include "tidal/plan/oom_advice.h"

namespace tidal::plan {

struct PlanStep {
  Suggestion suggestion;  // what to turn on (its `with` is the settings after it)
  int64_t peak = 0;       // the predicted step peak with this and every earlier step on
};

// The prediction covers parameters, gradients, optimizer states, saved activations and logits
// exactly, but not the backward pass's transient gradients nor the caching allocator's reserved but
// unallocated bytes (reserved - allocated): measured up to ~9% above it when chunked loss and
// recompute together take the logits and activations down. A plan therefore aims at the budget
// less a headroom.
inline constexpr double kDefaultPlanHeadroom = 0.10;

struct Plan {
  StepPeak start;               // the configuration as given
  int64_t budget = 0;           // bytes
  int64_t target = 0;           // budget less the headroom: what the plan fits the prediction into
  std::vector<PlanStep> steps;  // empty when it fits as given
  bool fits = false;            // the last prediction (start's without steps) is within the target
  // The flags to add to the command line: each kind (chunked loss, attention, recompute, offload,
  // swap optimizer, batch) once, a later recompute step replacing an earlier one.
  std::string flags() const;
};

// Greedy in the triage order: while the prediction is above the budget, take the first group that
// still has a step with a positive saving; in it, the step with the smallest saving that is enough
// alone, else the one with the largest saving. Sharding (unavailable) is skipped; expert and context
// parallelism (suggest_parallel) are a group after sharding's and before recompute.
Plan make_plan(const models::ModelConfig& m, const TriageSettings& s, int64_t budget,
               double headroom = kDefaultPlanHeadroom);

// What `tidal plan` prints.
std::string format_plan(const Plan& p, const models::ModelConfig& m, const TriageSettings& s);

// What `tidal plan --dry-run` prints: the dry run's device peak beside the estimator's `predicted`
// one, which rank it is (of several), the host peak, the bytes of each category at the peak and its
// own peak (host_offload: the host's), and the activations saved per layer; with `saved_table` the
// table of every tensor the first micro-batch saved for backward (--report-memory), else a line
// saying how to ask for it.
std::string format_dry_run(const DryRun& d, const std::optional<StepPeak>& predicted, bool saved_table);

}  // namespace tidal::plan
