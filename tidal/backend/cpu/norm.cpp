#include "tidal/backend/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "tidal/backend/cpu/dispatch.h"
#include "tidal/backend/cpu/parallel.h"

namespace tidal::cpu {
namespace {

constexpr int64_t kMaxChunks = 64;     // partial-sum rows of the workspace
constexpr int64_t kMinChunkRows = 16;  // below this a chunk is not worth a workspace row
constexpr int64_t kRowGrainElems = 16384;

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, kRowGrainElems / std::max<int64_t>(cols, 1)); }

// Calls f(std::true_type / std::false_type) for whether `p` is set, so inner loops have no branch.
template <typename F>
void with_flag(bool on, F&& f) {
  if (on) f(std::true_type{});
  else f(std::false_type{});
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
      for (int64_t c = 0; c < w; ++c) out[c0 + c] = T(acc[c]);
    }
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
  const T* wp = weight.defined() ? weight.data<T>() : nullptr;
  const T* bp = bias.defined() ? bias.data<T>() : nullptr;
  const A inv_c = A(1) / A(C), eps = A(a.eps);
  with_flag(wp != nullptr, [&](auto has_w) {
    with_flag(bp != nullptr, [&](auto has_b) {
      parallel_for(0, a.rows, row_grain(C), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const T* xr = xp + r * C;
          T* yr = yp + r * C;
          A s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t c = 0; c < C; ++c) s += A(xr[c]);
          const A mu = s * inv_c;
          A v = 0;  // two passes over the row (in L1): no cancellation as in E[x^2] - E[x]^2
#pragma omp simd reduction(+ : v)
          for (int64_t c = 0; c < C; ++c) {
            const A d = A(xr[c]) - mu;
            v += d * d;
          }
          const A rs = A(1) / std::sqrt(v * inv_c + eps);
          mp[r] = mu;
          rp[r] = rs;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            A y = (A(xr[c]) - mu) * rs;
            if constexpr (decltype(has_w)::value) y *= A(wp[c]);
            if constexpr (decltype(has_b)::value) y += A(bp[c]);
            yr[c] = T(y);
          }
        }
      });
    });
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
  const T* wp = weight.defined() ? weight.data<T>() : nullptr;
  T* dxp = dx.defined() ? dx.data<T>() : nullptr;
  const bool params = dweight.defined() || dbias.defined();
  A* ws = params ? workspace.data<A>() : nullptr;
  const int64_t chunks = norm_row_chunks(rows), per = (rows + chunks - 1) / chunks;
  const A inv_c = A(1) / A(C);
  with_flag(wp != nullptr, [&](auto has_w) {
    constexpr bool kW = decltype(has_w)::value;
    parallel_for(0, chunks, 1, [&](int64_t kb, int64_t ke) {
      for (int64_t k = kb; k < ke; ++k) {
        A* pw = ws ? ws + k * 2 * C : nullptr;  // this chunk's partial dweight, then dbias
        A* pb = pw ? pw + C : nullptr;
        if (pw) std::fill(pw, pw + 2 * C, A(0));
        for (int64_t r = k * per; r < std::min(rows, (k + 1) * per); ++r) {
          const T* gr = gp + r * C;
          const T* xr = xp + r * C;
          const A mu = mp[r], rs = rp[r];
          if (pw) {
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) {
              const A gv = A(gr[c]);
              pw[c] += gv * (A(xr[c]) - mu) * rs;
              pb[c] += gv;
            }
          }
          if (!dxp) continue;
          A s1 = 0, s2 = 0;  // sum(dxhat), sum(dxhat * xhat)
#pragma omp simd reduction(+ : s1, s2)
          for (int64_t c = 0; c < C; ++c) {
            A dy = A(gr[c]);
            if constexpr (kW) dy *= A(wp[c]);
            s1 += dy;
            s2 += dy * (A(xr[c]) - mu) * rs;
          }
          const A m1 = s1 * inv_c, m2 = s2 * inv_c;
          T* dr = dxp + r * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            A dy = A(gr[c]);
            if constexpr (kW) dy *= A(wp[c]);
            dr[c] = T(rs * (dy - m1 - (A(xr[c]) - mu) * rs * m2));
          }
        }
      }
    });
  });
  if (dweight.defined()) combine_chunks(dweight.data<T>(), ws, chunks, 2 * C, C);
  if (dbias.defined()) combine_chunks(dbias.data<T>(), ws + C, chunks, 2 * C, C);
}

template <typename T>
void rms_norm_forward_typed(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                            const NormArgs& a) {
  using A = acc_t<T>;
  const int64_t C = a.cols;
  const T* xp = x.data<T>();
  T* yp = out.data<T>();
  A* rp = rstd.data<A>();
  const T* wp = weight.defined() ? weight.data<T>() : nullptr;
  const A inv_c = A(1) / A(C), eps = A(a.eps);
  with_flag(wp != nullptr, [&](auto has_w) {
    parallel_for(0, a.rows, row_grain(C), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* xr = xp + r * C;
        T* yr = yp + r * C;
        A s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < C; ++c) s += A(xr[c]) * A(xr[c]);
        const A rs = A(1) / std::sqrt(s * inv_c + eps);
        rp[r] = rs;
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) {
          // Rounded to T before the weight, as hidden_states.to(input_dtype) in Hugging Face.
          if constexpr (decltype(has_w)::value) yr[c] = T(A(T(A(xr[c]) * rs)) * A(wp[c]));
          else yr[c] = T(A(xr[c]) * rs);
        }
      }
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
  const T* wp = weight.defined() ? weight.data<T>() : nullptr;
  T* dxp = dx.defined() ? dx.data<T>() : nullptr;
  A* ws = dweight.defined() ? workspace.data<A>() : nullptr;
  const int64_t chunks = norm_row_chunks(rows), per = (rows + chunks - 1) / chunks;
  const A inv_c = A(1) / A(C);
  with_flag(wp != nullptr, [&](auto has_w) {
    constexpr bool kW = decltype(has_w)::value;
    parallel_for(0, chunks, 1, [&](int64_t kb, int64_t ke) {
      for (int64_t k = kb; k < ke; ++k) {
        A* pw = ws ? ws + k * C : nullptr;
        if (pw) std::fill(pw, pw + C, A(0));
        for (int64_t r = k * per; r < std::min(rows, (k + 1) * per); ++r) {
          const T* gr = gp + r * C;
          const T* xr = xp + r * C;
          const A rs = rp[r];
          if (pw) {
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) pw[c] += A(gr[c]) * A(xr[c]) * rs;
          }
          if (!dxp) continue;
          A s = 0;  // sum(dy * n)
#pragma omp simd reduction(+ : s)
          for (int64_t c = 0; c < C; ++c) {
            A dy = A(gr[c]);
            if constexpr (kW) dy *= A(wp[c]);
            s += dy * A(xr[c]) * rs;
          }
          const A m = s * inv_c;
          T* dr = dxp + r * C;
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) {
            A dy = A(gr[c]);
            if constexpr (kW) dy *= A(wp[c]);
            dr[c] = T(rs * (dy - A(xr[c]) * rs * m));
          }
        }
      }
    });
  });
  if (dweight.defined()) combine_chunks(dweight.data<T>(), ws, chunks, C, C);
}

}  // namespace

int64_t norm_row_chunks(int64_t rows) {
  return std::clamp<int64_t>((rows + kMinChunkRows - 1) / kMinChunkRows, 1, kMaxChunks);
}

void layer_norm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                        const Tensor& weight, const Tensor& bias, const NormArgs& a) {
  dispatch_float(x.dtype(), "layer_norm", [&](auto tag) {
    layer_norm_forward_typed<typename decltype(tag)::type>(out, mean, rstd, x, weight, bias, a);
  });
}

void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& workspace,
                         const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& weight, const NormArgs& a) {
  dispatch_float(x.dtype(), "layer_norm", [&](auto tag) {
    layer_norm_backward_typed<typename decltype(tag)::type>(dx, dweight, dbias, workspace, g, x, mean, rstd, weight,
                                                            a);
  });
}

void rms_norm_forward(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& weight, const NormArgs& a) {
  dispatch_float(x.dtype(), "rms_norm", [&](auto tag) {
    rms_norm_forward_typed<typename decltype(tag)::type>(out, rstd, x, weight, a);
  });
}

void rms_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& workspace, const Tensor& g,
                       const Tensor& x, const Tensor& rstd, const Tensor& weight, const NormArgs& a) {
  dispatch_float(x.dtype(), "rms_norm", [&](auto tag) {
    rms_norm_backward_typed<typename decltype(tag)::type>(dx, dweight, workspace, g, x, rstd, weight, a);
  });
}

}  // namespace tidal::cpu
