#pragma once
// The attention family's launchers (attention.cu), called by attention.cpp (and matmul.cpp's scale).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/backend/cuda/doc_span.h"
#include "tidal/backend/cuda/strided.h"

namespace tidal::cuda {

// x[i] *= factor over x's n elements (floating dtypes).
void launch_scale(cudaStream_t stream, const Strided& x, int64_t n, double factor);

// A (B, H, L, D) tensor: data and element strides.
struct View4 {
  const void* p = nullptr;
  int64_t s[4] = {};
};

// delta[r] = sum_c dout[b, h, i, c] * out[b, h, i, c] - dlse[r] for r = (b*hq + h)*t + i < rows, in the
// accumulate type (f32 for bf16; f64 for f64). dlse (FlashArgs::lse_grad, the accumulate type) null: 0. `dtype`:
// dout's and out's.
void launch_flash_row_dot(cudaStream_t stream, DType dtype, const View4& dout, const View4& out, const void* dlse,
                          void* delta, int64_t rows, int64_t hq, int64_t t, int64_t dv);

// One (batch b, kv head) group of g query heads h0 .. h0+g-1, query rows row0 .. row0+rows-1: (g, rows,
// S) row-major buffers in the accumulate type (f32 for bf16 and f32, f64 for f64).
struct FlashRows {
  DType dtype = DType::f32;         // q's
  void* s = nullptr;                // in: scale * q k^T; out: the (dropped) probabilities
  void* dp = nullptr;               // backward: in dout v^T, out dS
  void* p16 = nullptr;              // bf16: the probabilities rounded to bf16 for the next product
  void* ds16 = nullptr;             // bf16 backward: dS rounded
  void* lse = nullptr;              // the group's (g, T) rows of the (B, Hq, T) log-sum-exp
  const void* delta = nullptr;      // backward: the group's (g, T) rows of rowsum(dout * out)
  int64_t g = 1, t = 0, s_len = 0;  // t: all the query rows (the mask; lse's head stride)
  int64_t row0 = 0, rows = 0;       // this chunk's query rows
  bool causal = false;
  int64_t window = 0, diagonal = 0;  // FlashArgs' sliding window and diagonal shift (attention_mask.cuh)
  int64_t key_rate = 0;              // FlashArgs' compressed keys (attention_mask.cuh)
  DocSpan docs;                      // FlashArgs' packed documents (sample b's rows)
  double dropout_p = 0;
  uint64_t seed = 0;
  // Philox position of (h, i, j): rng_start + ((b*hq + h)*rng_rows + i)*rng_cols + j, with the row
  // and column offsets folded into rng_start.
  uint64_t rng_start = 0;
  int64_t b = 0, h0 = 0, hq = 1, rng_rows = 0, rng_cols = 0;
};

// Forward: per row, softmax over the visible keys (masked keys and rows with none get 0; lse = +inf
// for those rows), times the dropout factors.
void launch_flash_softmax_forward(cudaStream_t stream, const FlashRows& a);
// Backward: P = exp(s - lse); s <- P*z (for dV), dp <- P*(dp*z - delta) (dS).
void launch_flash_softmax_backward(cudaStream_t stream, const FlashRows& a);

}  // namespace tidal::cuda
