#pragma once
// The optimizer family's launchers (optim.cu), called by optim.cpp. Contiguous tensors.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/dtype.h"

namespace tidal::cuda {

// partials[c] (host) = Σ x² over elements [c·chunk, (c+1)·chunk) of x (n, dtype), in f64, with the CPU
// backend's order (optim.cpp chunk_sum_of_squares: 32 interleaved accumulators, then a halving tree).
// device_partials: ⌈n/chunk⌉ device doubles. Synchronizes the stream.
void launch_sum_of_squares(cudaStream_t stream, const void* x, DType dtype, int64_t n, int64_t chunk,
                           double* device_partials, double* partials);

// The scalars of one AdamW update, torch.optim.AdamW's (rounded to the state's type by the kernel).
struct AdamWScalars {
  double decay = 1, beta1 = 0.9, one_minus_beta1 = 0.1, beta2 = 0.999, one_minus_beta2 = 0.001;
  double step_size = 0, bc2_sqrt = 1, eps = 1e-8;
};
// One AdamW update of n elements: param and grad in `dtype`, exp_avg/exp_avg_sq (and master, for bf16
// params: then non-null) in its accumulate type.
void launch_adamw(cudaStream_t stream, DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                  void* master, int64_t n, const AdamWScalars& s);

}  // namespace tidal::cuda
