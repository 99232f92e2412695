#pragma once
// CPU kernels of the norm family over contiguous (rows, cols) inputs, normalizing each row.
// Statistics (mean, rstd) are in the accumulate dtype: f32 for f32/bf16, f64 for f64.
//
// Note [Deterministic parameter gradients]: dweight/dbias sum over all rows. Rows are split into
// fixed chunks (norm_row_chunks, a function of the row count only), each chunk writes its partial
// sums to its own workspace row, and the partials are added in chunk order: the result is the same
// for any number of threads, with no atomics.
#include <cstdint>

#include "tidal/backend/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

// How many row chunks the parameter-gradient reduction uses (the workspace's first dim).
int64_t norm_row_chunks(int64_t rows);

// out = (x - mean) * rstd * weight + bias; weight and bias (cols) may be undefined.
// mean/rstd (rows) receive the statistics.
void layer_norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                        const Tensor& weight, const Tensor& bias, const NormArgs& a);
// dx, dweight, dbias (each undefined when not needed) from g (rows, cols) and the saved statistics.
// workspace: (norm_row_chunks(rows), 2, cols) acc dtype when dweight or dbias is wanted.
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& workspace,
                         const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                         const NormArgs& a);

// out = weight * round_to_T(x * rstd), rstd = 1 / sqrt(mean(x^2) + eps) (Hugging Face's LlamaRMSNorm:
// normalized in f32, cast back to the input dtype, then scaled); weight may be undefined.
void rms_norm_forward(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight, const NormArgs& a);
// workspace: (norm_row_chunks(rows), cols) acc dtype when dweight is wanted.
void rms_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& workspace, const Tensor& g,
                       const Tensor& x, const Tensor& rstd, const Tensor& weight, const NormArgs& a);

}  // namespace tidal::cpu
