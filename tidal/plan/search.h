#pragma once
// `tidal plan`'s search: the fastest configuration that fits a memory budget. Every candidate of
// plan/candidates.h gets the estimator's step peak (cheap); those that may fit get the exact
// peak and the kernels of a meta-device dry run (plan/dry_run.h) and a predicted step time from the
// cost model (plan/cost_model.h) against a device profile (plan/device_profile.h). The search keeps
// the Pareto front of device memory against time, and chooses the fastest candidate whose exact peak
// fits the budget less the headroom.
//
// Pruning ("what cannot win"): a candidate the estimator puts above the budget by more than its
// error is not timed. Activation offload, the swap optimizer and overlapped gradient reduction run the
// same kernels as the configuration without them (they add copies and move collectives, which the cost
// model times from their bytes), and ZeRO-1 those of no_shard, ZeRO-3 those of ZeRO-2, but for the
// update's, which the cost model scales to the shard; so one dry run times every such variant of a
// configuration. The
// first recompute rung that fits is timed for every combination of the other switches; the other
// rungs while the dry runs have recorded fewer than SearchOptions::dry_run_kernels kernels (a bound on
// their work that every rank counts alike, unlike time, so every rank makes the same choice; a large
// MoE model's dry run takes seconds).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tidal/plan/cost_model.h"
#include "tidal/plan/device_profile.h"
#include "tidal/train/arguments.h"

namespace tidal::plan {

struct PlanCandidate {
  size_t index = 0;  // its place among the enumerated candidates (the given one 0)
  train::TrainArgs args;
  std::string flags;      // what differs from the given run (plan_candidates.h)
  std::string recompute;  // its recompute rung, in words
  int recompute_rung = 0;
  int64_t estimated_peak = 0;  // the estimator's step peak (oom_advice.h predict_step_peak)
  int64_t device_peak = 0;     // the dry run's peak when `exact`, else the estimate
  int64_t host_peak = 0;       // the dry run's host peak when `exact` (offload, swap optimizer), else 0
  bool exact = false;
  // Its device peak comes from a dry run: `exact`, or (--overlap-grad-reduce, which a dry run refuses)
  // the dry run without the overlap plus the overlap's change by the estimator.
  bool checked = false;
  bool timed = false;
  StepTime time;        // when `timed`
  bool fits = false;    // device_peak within the target (and, exact, host_peak within the host budget)
  bool pareto = false;  // no timed candidate is both faster and smaller
  std::string why;      // one line: what its switches cost or save
};

// Where a search is, for a progress line (tidal plan prints it on stderr: tools/tidal/plan_progress.h).
struct SearchProgress {
  enum class Phase { estimate, time, verify, done } phase = Phase::estimate;
  int64_t candidates = 0;  // enumerated
  int64_t estimated = 0;   // given the estimator's peak so far
  int64_t may_fit = 0;     // within the estimator's error of the target: the ones the timing phase considers
  int64_t considered = 0;  // of those, looked at by the timing phase so far
  int64_t timed = 0;       // candidates timed so far
  int64_t dry_runs = 0;    // kernel dry runs done so far (the timing phase's; with several workers some run
                           // ahead, and the search may not use them all: PlanSearch::dry_runs counts those used)
  int64_t checks = 0;      // dry runs of candidates' own (their exact peaks) so far
  double best_s = 0;       // the fastest timed candidate the estimator puts within the target (0: none yet)
  std::string best_flags;  // its flags
  // Wall seconds each phase took so far: the estimator, the timing dry runs, the checks.
  double estimate_s = 0, time_s = 0, verify_s = 0;
};

struct SearchOptions {
  int64_t budget = 0;      // device bytes
  double headroom = 0.10;  // fraction of the budget kept free
  DeviceProfile profile;   // for the step time
  // The kernels the timing dry runs may record in all before the optional rungs stop (about 100 dry
  // runs of a dense 8B model, 10 of a 30B MoE at 32k tokens).
  int64_t dry_run_kernels = 1000000;
  // Host memory the run may use (offloaded activations, the swap optimizer's states, staging
  // buffers); 0: no limit. A candidate fits when its exact host peak is within it too.
  int64_t host_budget = 0;
  std::string disk_dir;  // not empty: offload to a spill file in this directory is searched too
  // Processes the dry runs run on at once (plan/dry_run_pool.h; tidal plan: dry_run_workers()). 1: this
  // process, one after another (a caller with threads or MPI must keep 1). The choices are the same.
  int dry_run_workers = 1;
  // Called as the search goes (every few thousand candidates estimated, before each dry run) and once at
  // the end (phase done); may be empty.
  std::function<void(const SearchProgress&)> progress;
};

struct PlanSearch {
  int64_t budget = 0, target = 0;  // the budget and the budget less the headroom
  int64_t host_budget = 0;         // SearchOptions::host_budget
  PlanCandidate given;
  std::vector<PlanCandidate> candidates;  // every timed candidate (the given one too, flags ""), fastest first
  int chosen = -1;                        // index into candidates of the fastest that fits; -1: none
  int64_t enumerated = 0;                 // candidates considered (estimated)
  int64_t dry_runs = 0;                   // dry runs made
  int64_t made_runs = 0;  // timing runs made from two runs' parts instead of run (search.cpp, a loss mode's kernels)
  // Nothing fits: the smallest candidate (by the estimator) and what dominates its peak, in words.
  PlanCandidate smallest;
  std::string nothing_fits;
};

// On the ranks of given.parallel (its world).
PlanSearch search_plans(const train::TrainArgs& given, const SearchOptions& options);

}  // namespace tidal::plan
