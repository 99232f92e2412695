#pragma once
// The softmax family's launchers (softmax.cu), called by softmax.cpp. All tensors contiguous, one
// floating dtype.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/backend/cuda/doc_span.h"
#include "tidal/dtype.h"

namespace tidal::cuda {

// out = softmax (log_softmax when `log`) of x over n of its (outer, n, inner) view.
void launch_softmax_forward(cudaStream_t stream, DType dtype, void* out, const void* x, int64_t outer, int64_t n,
                            int64_t inner, bool log);
// From the output y: softmax dx = y * (g - sum(g * y)); log_softmax dx = g - exp(y) * sum(g).
void launch_softmax_backward(cudaStream_t stream, DType dtype, void* dx, const void* g, const void* y, int64_t outer,
                             int64_t n, int64_t inner, bool log);
// probs = softmax(scale * scores) over rows of s_len, row r being query r % t_len; with `causal` it
// sees keys j <= i + s_len - t_len (bottom-right aligned), with a window W > 0 too only the W keys
// ending there, with documents none before its document's start (attention_mask.cuh; row r is of
// sample r / rows_per_sample), and the rest get 0.
void launch_scaled_masked_softmax_forward(cudaStream_t stream, DType dtype, void* probs, const void* scores,
                                          int64_t rows, int64_t t_len, int64_t s_len, double scale, bool causal,
                                          int64_t window, const DocSpan& docs, int64_t rows_per_sample);
// grad_scores = scale * probs * (grad_probs - rowsum(grad_probs * probs)).
void launch_scaled_masked_softmax_backward(cudaStream_t stream, DType dtype, void* grad_scores, const void* grad_probs,
                                           const void* probs, int64_t rows, int64_t s_len, double scale);

}  // namespace tidal::cuda
