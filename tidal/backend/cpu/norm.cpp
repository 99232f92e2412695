// CPU kernels of the norm family over contiguous (rows, cols) inputs, normalizing each row.
// Statistics (mean, rstd) are in the accumulate dtype: f32 for f32/bf16, f64 for f64.
//
// Note [Deterministic parameter gradients]: dweight/dbias sum over all rows. Rows are split into
// fixed chunks (norm_row_chunks, a function of the row count only), each chunk writes its partial
// sums to its own workspace row, and the partials are added in chunk order: the result is the same
// for any number of threads, with no atomics.
#include "tidal/backend/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tidal/backend/cpu/activation.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

constexpr int64_t kMaxChunks = 64;     // partial-sum rows of the workspace
constexpr int64_t kMinChunkRows = 16;  // below this a chunk is not worth a workspace row
constexpr int64_t kRowGrainElems = 16384;

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, kRowGrainElems / std::max<int64_t>(cols, 1)); }

// How many row chunks the parameter-gradient reduction uses (the workspace's first dim).
int64_t row_chunks(int64_t rows) {
  return std::clamp<int64_t>((rows + kMinChunkRows - 1) / kMinChunkRows, 1, kMaxChunks);
}

// Calls f(std::true_type / std::false_type) for whether `p` is set, so inner loops have no branch.
template <typename F>
void with_flag(bool on, F&& f) {
  if (on)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// Adds the chunk partials ws[k][slot] (stride `chunk_stride` per chunk) in chunk order into out (cols).
template <typename T, typename A>
void combine_chunks(T* out, const A* ws, int64_t chunks, int64_t chunk_stride, int64_t cols) {
  constexpr int64_t kBlock = 256;
  parallel_for(0, (cols + kBlock - 1) / kBlock, 4, [&](int64_t b, int64_t e) {
    A acc[kBlock];
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t c0 = blk * kBlock, w = std::min(kBlock, cols - c0);
      std::fill(acc, acc + w, A(0));
      for (int64_t k = 0; k < chunks; ++k) {
        const A* src = ws + k * chunk_stride + c0;
#pragma omp simd
        for (int64_t c = 0; c < w; ++c) acc[c] += src[c];
      }
      for (int64_t c = 0; c < w; ++c) out[c0 + c] = store_as<T>(acc[c]);
    }
  });
}

// A (C) parameter in the accumulate type (converted once for bf16); p is nullptr when undefined.
template <typename T>
struct AccParam {
  std::vector<acc_t<T>> buf;
  const acc_t<T>* p = nullptr;
  AccParam(const Tensor& t, int64_t n) {
    if (!t.defined()) return;
    if constexpr (!std::is_same_v<T, acc_t<T>>) buf.resize(size_t(n));
    p = acc_row(t.data<T>(), n, buf.data());
  }
};

// Per-task row buffers for bf16 (empty for f32/f64, whose rows are read in place).
template <typename T>
std::vector<acc_t<T>> row_buffer(int64_t n) {
  return std::vector<acc_t<T>>(std::is_same_v<T, acc_t<T>> ? 0 : size_t(n));
}

// Calls row(r, x_row) for every row, in parallel; rows come in the accumulate type.
template <typename T, typename F>
void for_rows(int64_t rows, int64_t C, const T* xp, F&& row) {
  parallel_for(0, rows, row_grain(C), [&](int64_t r0, int64_t r1) {
    std::vector<acc_t<T>> xbuf = row_buffer<T>(C);
    for (int64_t r = r0; r < r1; ++r) row(r, acc_row(xp + r * C, C, xbuf.data()));
  });
}

template <typename T>
void layer_norm_forward_typed(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                              const Tensor& weight, const Tensor& bias, const NormArgs& a) {
  using A = acc_t<T>;
  const int64_t C = a.cols;
  const T* xp = x.data<T>();
  T* yp = out.data<T>();
  A* mp = mean.data<A>();
  A* rp = rstd.data<A>();
  const AccParam<T> w(weight, C), b(bias, C);
  const A inv_c = A(1) / A(C), eps = A(a.eps);
  with_flag(w.p != nullptr, [&](auto has_w) {
    with_flag(b.p != nullptr, [&](auto has_b) {
      for_rows(a.rows, C, xp, [&](int64_t r, const A* xr) {
        const A* wv = w.p;  // locals: a captured member would be reloaded (gathered) in the loop
        const A* bv = b.p;
        T* yr = yp + r * C;
        A s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; ++c) s += xr[c];
        const A mu = s * inv_c;
        A v = 0;  // two passes over the row (in L1): no cancellation as in E[x^2] - E[x]^2
#pragma omp simd reduction(+ : v)
        for (int64_t c = 0; c < C; ++c) v += (xr[c] - mu) * (xr[c] - mu);
        const A rs = A(1) / std::sqrt(v * inv_c + eps);
        mp[r] = mu;
        rp[r] = rs;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          A y = (xr[c] - mu) * rs;
          if constexpr (decltype(has_w)::value) y *= wv[c];
          if constexpr (decltype(has_b)::value) y += bv[c];
          yr[c] = store_as<T>(y);
        }
      });
    });
  });
}

// Calls row(r, g_row, x_row, partial) for every row, in parallel over the fixed row chunks of Note
// [Deterministic parameter gradients]. Rows come in the accumulate type; `partial` is the chunk's
// zeroed workspace block (slots x C), or nullptr when ws is.
template <typename T, typename F>
void for_chunked_rows(int64_t rows, int64_t C, const T* gp, const T* xp, acc_t<T>* ws, int64_t slots, F&& row) {
  using A = acc_t<T>;
  const int64_t chunks = row_chunks(rows), per = (rows + chunks - 1) / chunks;
  parallel_for(0, chunks, 1, [&](int64_t kb, int64_t ke) {
    std::vector<A> gbuf = row_buffer<T>(C), xbuf = row_buffer<T>(C);
    for (int64_t k = kb; k < ke; ++k) {
      A* partial = ws ? ws + k * slots * C : nullptr;
      if (partial) std::fill(partial, partial + slots * C, A(0));
      for (int64_t r = k * per; r < std::min(rows, (k + 1) * per); ++r)
        row(r, acc_row(gp + r * C, C, gbuf.data()), acc_row(xp + r * C, C, xbuf.data()), partial);
    }
  });
}

template <typename T>
void layer_norm_backward_typed(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& workspace,
                               const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                               const Tensor& weight, const NormArgs& a) {
  using A = acc_t<T>;
  const int64_t C = a.cols, rows = a.rows;
  const T* gp = g.data<T>();
  const T* xp = x.data<T>();
  const A* mp = mean.data<A>();
  const A* rp = rstd.data<A>();
  const AccParam<T> w(weight, C);
  T* dxp = dx.defined() ? dx.data<T>() : nullptr;
  A* ws = dweight.defined() || dbias.defined() ? workspace.data<A>() : nullptr;
  const A inv_c = A(1) / A(C);
  with_flag(w.p != nullptr, [&](auto has_w) {
    with_flag(ws != nullptr, [&](auto has_params) {
      constexpr bool kW = decltype(has_w)::value, kP = decltype(has_params)::value;
      for_chunked_rows(rows, C, gp, xp, ws, 2, [&](int64_t r, const A* gr, const A* xr, A* pw) {
        const A* wv = w.p;              // a local: a captured member would be reloaded (gathered) in the loop
        A* pb = kP ? pw + C : nullptr;  // pw: this chunk's partial dweight, pb: its partial dbias
        const A mu = mp[r], rs = rp[r];
        A s1 = 0, s2 = 0;  // sum(dxhat), sum(dxhat * xhat)
#pragma omp simd reduction(+ : s1, s2)
        for (int64_t c = 0; c < C; ++c) {
          const A xh = (xr[c] - mu) * rs;
          const A dy = kW ? gr[c] * wv[c] : gr[c];
          s1 += dy;
          s2 += dy * xh;
          if constexpr (kP) {
            pw[c] += gr[c] * xh;
            pb[c] += gr[c];
          }
        }
        if (!dxp) return;
        const A m1 = s1 * inv_c, m2 = s2 * inv_c;
        T* dr = dxp + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const A dy = kW ? gr[c] * wv[c] : gr[c];
          dr[c] = store_as<T>(rs * (dy - m1 - (xr[c] - mu) * rs * m2));
        }
      });
    });
  });
  const int64_t chunks = row_chunks(rows);
  if (dweight.defined()) combine_chunks(dweight.data<T>(), ws, chunks, 2 * C, C);
  if (dbias.defined()) combine_chunks(dbias.data<T>(), ws + C, chunks, 2 * C, C);
}

// Gemma's effective weight, offset + w in the accumulate dtype; empty when offset is 0 (or no weight).
template <typename A>
std::vector<A> offset_weight(const A* w, int64_t C, double offset) {
  if (offset == 0.0 || w == nullptr) return {};
  std::vector<A> out(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) out[size_t(c)] = A(offset) + w[c];
  return out;
}

template <typename T>
void rms_norm_forward_typed(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                            const NormArgs& a) {
  using A = acc_t<T>;
  const int64_t C = a.cols;
  const T* xp = x.data<T>();
  T* yp = out.data<T>();
  A* rp = rstd.data<A>();
  const AccParam<T> w(weight, C);
  const std::vector<A> shifted = offset_weight(w.p, C, a.weight_offset);
  const A* wv = shifted.empty() ? w.p : shifted.data();
  const A inv_c = A(1) / A(C), eps = A(a.eps);
  with_flag(!shifted.empty(), [&](auto gemma) {
    with_flag(wv != nullptr, [&](auto has_w) {
      for_rows(a.rows, C, xp, [&](int64_t r, const A* xr) {
        T* yr = yp + r * C;
        A s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; ++c) s += xr[c] * xr[c];
        const A rs = A(1) / std::sqrt(s * inv_c + eps);
        rp[r] = rs;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          if constexpr (decltype(gemma)::value)  // Gemma: times (offset + w) in A, rounded once
            yr[c] = store_as<T>(xr[c] * rs * wv[c]);
          else if constexpr (decltype(has_w)::value)  // rounded to T before the weight, as Hugging Face's
            yr[c] = store_as<T>(A(store_as<T>(xr[c] * rs)) * wv[c]);  // hidden_states.to(input_dtype)
          else
            yr[c] = store_as<T>(xr[c] * rs);
        }
      });
    });
  });
}

template <typename T>
void rms_norm_backward_typed(const Tensor& dx, const Tensor& dweight, const Tensor& workspace, const Tensor& g,
                             const Tensor& x, const Tensor& rstd, const Tensor& weight, const NormArgs& a) {
  using A = acc_t<T>;
  const int64_t C = a.cols, rows = a.rows;
  const T* gp = g.data<T>();
  const T* xp = x.data<T>();
  const A* rp = rstd.data<A>();
  const AccParam<T> w(weight, C);
  const std::vector<A> shifted = offset_weight(w.p, C, a.weight_offset);  // dy = g * (offset + w)
  const A* weff = shifted.empty() ? w.p : shifted.data();
  T* dxp = dx.defined() ? dx.data<T>() : nullptr;
  A* ws = dweight.defined() ? workspace.data<A>() : nullptr;
  const A inv_c = A(1) / A(C);
  with_flag(weff != nullptr, [&](auto has_w) {
    with_flag(ws != nullptr, [&](auto has_params) {
      constexpr bool kW = decltype(has_w)::value, kP = decltype(has_params)::value;
      for_chunked_rows(rows, C, gp, xp, ws, 1, [&](int64_t r, const A* gr, const A* xr, A* pw) {
        const A* wv = weff;
        const A rs = rp[r];
        A s = 0;  // sum(dy * n)
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; ++c) {
          const A n = xr[c] * rs;
          s += (kW ? gr[c] * wv[c] : gr[c]) * n;
          if constexpr (kP) pw[c] += gr[c] * n;
        }
        if (!dxp) return;
        const A m = s * inv_c;
        T* dr = dxp + r * C;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          const A dy = kW ? gr[c] * wv[c] : gr[c];
          dr[c] = store_as<T>(rs * (dy - xr[c] * rs * m));
        }
      });
    });
  });
  const int64_t chunks = row_chunks(rows);
  if (dweight.defined()) combine_chunks(dweight.data<T>(), ws, chunks, C, C);
}

}  // namespace

int64_t CpuKernels::norm_row_chunks(int64_t rows) const { return row_chunks(rows); }

// out = (x - mean) * rstd * weight + bias; weight and bias (cols) may be undefined.
// mean/rstd (rows) receive the statistics.
void CpuKernels::layer_norm_forward(Stream&, const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                                    const Tensor& weight, const Tensor& bias, const NormArgs& a) {
  dispatch_float(x.dtype(), "layer_norm", [&](auto tag) {
    layer_norm_forward_typed<typename decltype(tag)::type>(out, mean, rstd, x, weight, bias, a);
  });
}

// dx, dweight, dbias (each undefined when not needed) from g (rows, cols) and the saved statistics.
// workspace: (norm_row_chunks(rows), 2, cols) acc dtype when dweight or dbias is wanted.
void CpuKernels::layer_norm_backward(Stream&, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                     const Tensor& workspace, const Tensor& g, const Tensor& x, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& weight, const NormArgs& a) {
  dispatch_float(x.dtype(), "layer_norm", [&](auto tag) {
    layer_norm_backward_typed<typename decltype(tag)::type>(dx, dweight, dbias, workspace, g, x, mean, rstd, weight, a);
  });
}

// out = weight * round_to_T(x * rstd), rstd = 1 / sqrt(mean(x^2) + eps) (Hugging Face's LlamaRMSNorm:
// normalized in f32, cast back to the input dtype, then scaled); weight may be undefined.
void CpuKernels::rms_norm_forward(Stream&, const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                                  const NormArgs& a) {
  dispatch_float(x.dtype(), "rms_norm",
                 [&](auto tag) { rms_norm_forward_typed<typename decltype(tag)::type>(out, rstd, x, weight, a); });
}

// workspace: (norm_row_chunks(rows), cols) acc dtype when dweight is wanted.
void CpuKernels::rms_norm_backward(Stream&, const Tensor& dx, const Tensor& dweight, const Tensor& workspace,
                                   const Tensor& g, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                                   const NormArgs& a) {
  dispatch_float(x.dtype(), "rms_norm", [&](auto tag) {
    rms_norm_backward_typed<typename decltype(tag)::type>(dx, dweight, workspace, g, x, rstd, weight, a);
  });
}

}  // namespace tidal::cpu
