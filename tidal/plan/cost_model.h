#pragma once
// The cost model: a training step's time predicted from the kernels a dry run records (dry_run.h:
// its steady-state step, kernel_records.h) and a device profile (device_profile.h). A roofline per
// kernel, plus the host copies of activation offload and the swap optimizer and the data-parallel
// collectives, each hidden behind the compute it overlaps or exposed. See docs/planning.md, "The
// cost model".
#include <cstdint>

#include "tidal/plan/device_profile.h"
#include "tidal/plan/dry_run.h"
#include "tidal/seam/cost.h"
#include "tidal/train/arguments.h"

namespace tidal::plan {

struct StepTime {
  double total_s = 0;                 // compute_s + exposed_copy_s + exposed_comm_s
  double compute_s = 0;               // every kernel: gemm + attention + memory + optimizer + overhead
  double gemm_s = 0;                  // matrix products (the chunked loss's GEMMs included)
  double attention_s = 0;             // flash attention forward and backward
  double memory_s = 0;                // elementwise, norms, softmax, reductions, indexing, device copies
  double optimizer_s = 0;             // AdamW updates
  double overhead_s = 0;              // kernels × kernel_overhead_s
  double recompute_s = 0;             // the part of compute_s spent replaying forwards (recompute phase)
  double copy_s = 0;                  // host <-> device copies: offload, swap optimizer, kernels' host transfers
  double exposed_copy_s = 0;          // the part of copy_s compute does not hide
  double hidden_copy_fraction = 1.0;  // 1 - exposed_copy_s / copy_s (1 without copies)
  double comm_s = 0;                  // collectives: data-parallel, all-to-all, ring (all_to_all_s, ring_s)
  double exposed_comm_s = 0;          // the part of comm_s compute does not hide
  double all_to_all_s = 0;            // expert parallelism's token dispatch and return (exposed: blocking)
  double ring_s = 0;                  // context parallelism's K/V blocks and dK/dV around the ring (eager:
                                      // their all-gather and reduce-scatter)
  double exposed_ring_s = 0;          // the part of ring_s attention does not hide
  int64_t kernels = 0;                // kernel calls (records)
  int64_t flops = 0;                  // their FLOPs
};

// A kernel's time on `profile`: max(flops / rate, bytes / memory_bandwidth) + kernel_overhead_s,
// where rate is the GEMM or attention rate of its dtype (f32 rates for f64) and a memory, optimizer
// or copy kernel is bandwidth-bound (rate ignored). A host transfer runs at the h2d / d2h bandwidth
// (taken as the slower of the two). Rates of 0 are refused (tidal::Error naming the field).
double kernel_time_s(const KernelCost& k, const DeviceProfile& profile);

// The step of `run` (its `kernels`, recorded by dry_run) under `args` on `profile`, on the ranks of
// args.parallel (under --context-parallel-size C they are C x the data-parallel ranks, each CP group
// of C reading the same samples). Offload and swap-optimizer copies are taken from `args` (the bytes
// from the estimator and from the dry run's optimizer_state peak), so a dry run without them (the dry
// run refuses them today) can be costed with them.
StepTime predict_step_time(const DryRun& run, const train::TrainArgs& args, const DeviceProfile& profile);

}  // namespace tidal::plan
