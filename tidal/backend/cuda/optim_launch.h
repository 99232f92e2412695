#pragma once
// The optimizer family's launchers (optim.cu), called by optim.cpp. Contiguous tensors.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "tidal/dtype.h"

namespace tidal::cuda {

// device_partials[c] = Σ x² over elements [c·chunk, (c+1)·chunk) of x (n, dtype), in f64, with the CPU
// backend's order (optim.cpp chunk_sum_of_squares: 32 interleaved accumulators, then a halving tree).
// device_partials: ⌈n/chunk⌉ device doubles; queued only (sum_of_squares_many reads them all back at once).
void launch_sum_of_squares(cudaStream_t stream, const void* x, DType dtype, int64_t n, int64_t chunk,
                           double* device_partials);

// The scalars of one AdamW update, torch.optim.AdamW's (rounded to the state's type by the kernel).
struct AdamWScalars {
  double decay = 1, beta1 = 0.9, one_minus_beta1 = 0.1, beta2 = 0.999, one_minus_beta2 = 0.001;
  double step_size = 0, bc2_sqrt = 1, eps = 1e-8;
};
// One AdamW update of n elements: param and grad in `dtype`, exp_avg/exp_avg_sq (and master, for bf16
// params: then non-null) in its accumulate type.
void launch_adamw(cudaStream_t stream, DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                  void* master, int64_t n, const AdamWScalars& s);

// --- the multi-tensor AdamW (apex's and PyTorch's multi_tensor_apply): a table of up to
// kAdamWTensorsPerLaunch tensors and kAdamWBlocksPerLaunch chunks of kAdamWChunk elements travels as the
// kernel's parameter (under 4 KiB), one block per chunk; a tensor's chunks may span launches.
inline constexpr int kAdamWTensorsPerLaunch = 30;
inline constexpr int kAdamWBlocksPerLaunch = 320;
inline constexpr int64_t kAdamWChunk = 65536;

// What the tensors of one launch_adamw_multi call are: param and grad in f32, f64 or bf16 (then with
// an f32 master), or a bf16 param whose grad is f32 (--bf16's f32 sums): master updated, then param
// written from it as the copy kernel converts.
enum class AdamWForm : uint8_t { f32, f64, bf16, bf16_f32_grad };
inline constexpr int kAdamWForms = 4;

// One tensor of a multi-tensor update: launch_adamw's pointers (master non-null for both bf16 forms), n
// elements, its scalars.
struct AdamWTensorJob {
  void* param = nullptr;
  const void* grad = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  void* master = nullptr;
  int64_t n = 0;
  AdamWScalars s;
};
// Every job's AdamW update, all of one form, bit for bit what launch_adamw of each gives (and, for
// bf16_f32_grad, launch_adamw of the f32 master then the copy kernel's f32 -> bf16): the same
// per-element code (optim.cu adamw_element), each element independent of the others.
void launch_adamw_multi(cudaStream_t stream, AdamWForm form, const std::vector<AdamWTensorJob>& jobs);

// dst[i] += rows[0][i], then += rows[1][i], ... in order, each add rounded to the storage type (bf16: the binary
// add kernel's float add then round), bit for bit one add kernel per row (Kernels::add_rows_inplace; a
// reduce-scatter's sum of every rank's parts). Rows travel in tables of kAddRowsPerLaunch pointers (the kernel's
// parameter); more rows take more launches, in order. n elements each, contiguous, floating `dtype`.
inline constexpr int kAddRowsPerLaunch = 64;
void launch_add_rows(cudaStream_t stream, DType dtype, void* dst, const std::vector<const void*>& rows, int64_t n);

}  // namespace tidal::cuda
