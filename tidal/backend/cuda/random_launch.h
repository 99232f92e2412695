#pragma once
// The random family's launchers (random.cu), called by random.cpp. Philox key `seed`; the positions and
// transforms of the CPU backend (backend/cpu/random.cpp), so the GPU draws the CPU's bits. Contiguous
// tensors of n elements.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/dtype.h"
#include "tidal/seam/kernel_args.h"

namespace tidal::cuda {

// out[i] = the uniform (or normal) number of position start + i, in out's floating dtype.
void launch_random_fill(cudaStream_t stream, void* out, DType dtype, int64_t n, bool normal, uint64_t seed,
                        uint64_t start);
// out[i] = low + (bits of position start + i) * range >> 32, in out's index dtype (i32, i64).
void launch_randint_fill(cudaStream_t stream, void* out, DType dtype, int64_t n, int64_t low, uint64_t range,
                         uint64_t seed, uint64_t start);
// Element i draws lane i % 4 of Philox block start / 4 + i / 4 (the CPU's dropout_forward); keep where
// its uniform >= p: out = keep ? x * scale : 0, mask = keep.
void launch_dropout(cudaStream_t stream, void* out, uint8_t* mask, const void* x, DType dtype, int64_t n, float p,
                    double scale, uint64_t seed, uint64_t start);
// The same at the positions of DropoutRowsArgs; a.row_map, when set, points to DEVICE memory.
void launch_dropout_rows(cudaStream_t stream, const DropoutRowsArgs& a, void* out, uint8_t* mask, const void* x,
                         DType dtype, float p, double scale);
// dx = mask ? g * scale : 0.
void launch_dropout_backward(cudaStream_t stream, void* dx, const void* g, const uint8_t* mask, DType dtype, int64_t n,
                             double scale);

}  // namespace tidal::cuda
