#pragma once
// The sparse attention family's launchers (sparse_attention.cu), called by sparse_attention.cpp: attention over
// per-query kept keys (ops/sparse_attention.h; the CPU's backend/cpu/sparse_attention.cpp). q (B, Hq, T, D), keys
// (B, Hkv, W, D), values (B, Hkv, W, Dv), out (B, Hq, T, Dv) with any strides, one floating dtype; kept (B, T, k)
// i32 contiguous (-1: an empty slot); lse, dlse (B, Hq, T) and the workspace contiguous in the accumulate type (f32
// for bf16 and f32, f64 for f64).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/dtype.h"

namespace tidal::cuda {

// A (B, H, L, D) tensor: data and element strides. p null: not written (an undefined gradient).
struct SparseView {
  void* p = nullptr;
  int64_t s[4] = {};
};

struct SparseDims {
  int64_t b = 0, hq = 0, t = 0, d = 0, hkv = 1, w = 0, dv = 0, k = 0;
};

// The dynamic shared memory a forward row's block takes, in bytes: its k scores (the backward's P and dS go to the
// workspace). Its block reduction takes at most kSparseStaticSharedBytes more.
inline int64_t sparse_attention_forward_shared_bytes(DType dtype, int64_t k) {
  return k * (dtype == DType::f64 ? 8 : 4);
}
inline constexpr int64_t kSparseStaticSharedBytes = 32 * 8;

// One block per (b, i, h) row: the scores of its kept keys, their softmax, out = P V and lse (out 0 and lse -inf
// for a row with no key kept).
void launch_sparse_attention_forward(cudaStream_t stream, DType dtype, const SparseDims& n, double scale,
                                     const SparseView& out, void* lse, const SparseView& q, const SparseView& keys,
                                     const SparseView& values, const int32_t* kept);

// Backward, one block per (b, i, h) row: P and dS = P (dP - delta) of its slots into prob and dscore ((B, T, Hq, k)
// each, 0 on empty slots), delta = rowsum(dout * out) - dlse (dlse null: 0), and dq = scale dS K (dq.p null: not
// written).
void launch_sparse_attention_backward_rows(cudaStream_t stream, DType dtype, const SparseDims& n, double scale,
                                           const SparseView& dq, void* prob, void* dscore, const SparseView& dout,
                                           const void* dlse, const SparseView& q, const SparseView& keys,
                                           const SparseView& values, const int32_t* kept, const SparseView& out,
                                           const void* lse);

// Backward, one block per (b, kv head, key): dk = scale sum dS q and dv = sum P dout over the slots that read the
// key, in the order of `pairs` (the `count` slots r * k + j of non-empty kept entries, grouped by (b, key) in
// increasing order and in row order within a key: the CPU's inverted index) and the group's heads in order. An
// output whose p is null is not written.
void launch_sparse_attention_backward_keys(cudaStream_t stream, DType dtype, const SparseDims& n, double scale,
                                           const SparseView& dk, const SparseView& dv, const void* prob,
                                           const void* dscore, const SparseView& q, const SparseView& dout,
                                           const int32_t* kept, const int64_t* pairs, int64_t count);

}  // namespace tidal::cuda
