#pragma once
// The norm family's launchers (norm.cu), called by norm.cpp. x, g, out, dx: contiguous (rows, cols) of
// `dtype`; mean/rstd: (rows) in the accumulate dtype (f32, f64 for f64); weight/bias: (cols) of
// `dtype`, nullptr when undefined. A nullptr output is not wanted.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/dtype.h"

namespace tidal::cuda {

struct NormShape {
  DType dtype = DType::f32;
  int64_t rows = 0, cols = 0;
  int64_t chunks = 1;          // backward: the workspace's partial-sum rows (norm_row_chunks)
  double weight_offset = 0.0;  // RMS norm: NormArgs::weight_offset (Gemma's (1 + w), applied before rounding)
};

void launch_layer_norm_forward(cudaStream_t stream, const NormShape& s, double eps, void* out, void* mean, void* rstd,
                               const void* x, const void* weight, const void* bias);
// workspace: (chunks, 2, cols) accumulate dtype, needed when dweight or dbias is wanted.
void launch_layer_norm_backward(cudaStream_t stream, const NormShape& s, void* dx, void* dweight, void* dbias,
                                void* workspace, const void* g, const void* x, const void* mean, const void* rstd,
                                const void* weight);
void launch_rms_norm_forward(cudaStream_t stream, const NormShape& s, double eps, void* out, void* rstd, const void* x,
                             const void* weight);
// workspace: (chunks, cols) accumulate dtype, needed when dweight is wanted.
void launch_rms_norm_backward(cudaStream_t stream, const NormShape& s, void* dx, void* dweight, void* workspace,
                              const void* g, const void* x, const void* rstd, const void* weight);

}  // namespace tidal::cuda
