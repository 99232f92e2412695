#pragma once
// A device profile: the rates from which tidal's cost model (train/cost_model.h) predicts the time of
// a training step. `tidal plan --calibrate` measures this machine into a profile file; built-in
// profiles describe common accelerators (their sources cited in docs/planning.md) so that a step can
// be planned for hardware that is not here. Rates are achieved ones (what kernels reach), not peaks.
#include <cstdint>
#include <string>

namespace tidal::train {

struct DeviceProfile {
  std::string name;    // "NVIDIA H100 80GB SXM", "AMD EPYC 9R14, 2 threads (calibrated)"
  std::string source;  // where the figures come from: a datasheet, or "tidal plan --calibrate, DATE"
  int64_t memory_bytes = 0;  // device memory; 0 when not known (then --memory gives the budget)
  // Matrix products (bf16: bf16 operands, f32 accumulation), FLOP/s on large operands.
  double gemm_flops_f32 = 0;
  double gemm_flops_bf16 = 0;
  // Flash attention forward and backward, FLOP/s (counted as 4·B·H·Tq·Tk·D forward, causal half).
  double attention_flops_f32 = 0;
  double attention_flops_bf16 = 0;
  double memory_bandwidth = 0;    // bytes/s an elementwise kernel reads plus writes
  double d2h_bandwidth = 0;       // device to host copies, bytes/s (offload, swap optimizer)
  double h2d_bandwidth = 0;       // host to device copies, bytes/s
  double disk_bandwidth = 0;      // offload spill-file writes and reads, bytes/s
  double kernel_overhead_s = 0;   // fixed cost of each kernel (dispatch, launch latency), seconds
  double collective_bandwidth = 0;  // per-rank bus bandwidth of all-reduce / reduce-scatter / all-gather, bytes/s
  double collective_latency_s = 0;  // fixed cost of each collective, seconds
};

}  // namespace tidal::train
