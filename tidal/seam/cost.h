#pragma once
// Kernel costs, the seam's side of the meta device's cost-recording kernels
// (backend/meta/cost_kernels.cpp, Note [Cost kernels]): while a cost sink is installed,
// kernels_for(meta tensor) returns kernels that report what they would compute (FLOPs, bytes read
// plus written, a kind, a dtype) from shapes and dtypes alone, never touching data. Off by default:
// without a sink a meta tensor runs nothing. The sink is a callback an upper layer installs
// (plan/kernel_records.h tags each record with the phase, layer and module); the cost model
// (plan/cost_model.h) turns the records into time.
#include <cstdint>
#include <functional>

#include "tidal/dtype.h"

namespace tidal {

// What a kernel is bound by, as the cost model rates it (docs/planning.md, "The cost model").
enum class CostKind : uint8_t {
  gemm,           // matrix products: FLOP-rated at the GEMM rate of the dtype
  attention,      // fused (flash) attention: FLOP-rated at the attention rate
  memory,         // elementwise, norms, softmax, reductions, indexing, random, loss rows: bandwidth
  optimizer,      // the AdamW update: bandwidth
  copy,           // device copies and dtype conversions: bandwidth
  host_transfer,  // copies between host memory and the device
};
inline constexpr int kNumCostKinds = 6;
const char* cost_kind_name(CostKind k);

// One kernel call (or one BLAS call of a fused kernel: the chunked loss reports each chunk's GEMMs).
struct KernelCost {
  const char* kernel = "";  // the Kernels method ("matmul", "flash_attention_backward", ...)
  CostKind kind = CostKind::memory;
  DType dtype = DType::f32;  // the dtype the kernel computes on (its main operand's)
  int64_t flops = 0;         // floating-point operations (a multiply-add is 2)
  int64_t bytes = 0;         // bytes read plus bytes written, each tensor once
};

using CostSink = std::function<void(const KernelCost&)>;

// Installs `sink` (an empty function removes it). Process-wide: one dry run at a time.
void set_cost_sink(CostSink sink);
bool cost_sink_installed();
// Hands one kernel call's cost to the installed sink (none: nothing). The cost kernels call it.
void report_cost(const KernelCost& cost);

// FLOPs of the cpu flash kernels' tiles (the masked entries of a causal tile are computed too; the
// tiles a sliding window or the causal mask hides entirely are skipped, as the kernels skip them).
// q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv) as shapes; mask: FlashArgs' causal, window
// diagonal and key_rate.
int64_t flash_forward_flops(int64_t B, int64_t Hq, int64_t T, int64_t S, int64_t D, int64_t Dv, bool causal,
                            int64_t window = 0, int64_t diagonal = 0, int64_t key_rate = 0);
int64_t flash_backward_flops(int64_t B, int64_t Hq, int64_t T, int64_t S, int64_t D, int64_t Dv, bool causal,
                             bool with_dq, int64_t window = 0, int64_t diagonal = 0, int64_t key_rate = 0);

}  // namespace tidal
