#pragma once
// The loss family's launchers (loss.cu), called by loss.cpp and chunked_loss.cpp. Targets are
// contiguous i32/i64; logits rows have a unit inner stride and one row stride; the per-row outputs
// (loss, lse) are contiguous in the accumulate dtype (f32 for bf16).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/dtype.h"

namespace tidal::cuda {

// The first row whose target is outside [0, vocab) and not `ignore`, or -1. scratch: one device
// int64. Synchronizes the stream.
int64_t launch_find_bad_target(cudaStream_t stream, const void* targets, DType tdt, int64_t rows, int64_t vocab,
                               int64_t ignore, int64_t* scratch);
// Rows whose target is not `ignore`. scratch: one device int64. Synchronizes the stream.
int64_t launch_count_not_ignored(cudaStream_t stream, const void* targets, DType tdt, int64_t rows, int64_t ignore,
                                 int64_t* scratch);
// lse[r] = log Σ exp(logits[r]), loss[r] = lse[r] - logits[r, target]; both 0 for ignored rows.
void launch_cross_entropy_forward(cudaStream_t stream, void* loss, void* lse, const void* logits, DType ldt,
                                  const void* targets, DType tdt, int64_t rows, int64_t vocab, int64_t row_stride,
                                  int64_t ignore);
// dlogits (rows, vocab) contiguous = (softmax - onehot) * s_r, s_r = scale * row_grad[r] (row_grad in the
// logits' dtype, or null: scale); ignored rows 0.
void launch_cross_entropy_backward(cudaStream_t stream, void* dlogits, const void* logits, DType ldt, const void* lse,
                                   const void* targets, DType tdt, const void* row_grad, double scale, int64_t rows,
                                   int64_t vocab, int64_t row_stride, int64_t ignore);
// The chunked loss's rows, in place on x (rows, vocab) contiguous f32/f64: loss[r] = lse - x[target]
// (0 when ignored); with `grad`, each row becomes (softmax - onehot) * s (zeros when ignored).
void launch_loss_rows_inplace(cudaStream_t stream, void* x, DType dt, const void* targets, DType tdt, void* loss,
                              int64_t rows, int64_t vocab, int64_t ignore, double s, bool grad);
// Σ loss[r] over r in row order, in f64 on the host (the CPU backend's order): copies the (rows) f32/f64
// values back and synchronizes the stream.
double sum_rows_in_order(cudaStream_t stream, const void* loss, DType acc, int64_t rows);

}  // namespace tidal::cuda
