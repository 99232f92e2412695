#pragma once
// Typed elementwise loops built on loops.h: f runs on the accumulate type (f32 for f32/bf16, f64
// for f64), loads and stores convert. Contiguous inner runs take a vectorizable path.
#include "tidal/backend/cpu/loops.h"
#include "tidal/backend/cpu/vec_math.h"
#include "tidal/dtype.h"

namespace tidal::cpu {

template <typename T>
inline acc_t<T> load(const char* p) {
  return acc_t<T>(*reinterpret_cast<const T*>(p));
}

// out = f(in), both of type T (or Out for the output).
template <typename T, typename Out = T, typename F>
void unary_loop(const Tensor& out, const Tensor& in, F f) {
  const Shape& shape = out.shape();
  auto loop = make_loop<2>(shape, {static_cast<char*>(out.raw_data()), static_cast<char*>(in.raw_data())},
                           {broadcast_byte_strides(out, shape), broadcast_byte_strides(in, shape)});
  for_each(loop, kElementwiseGrain, [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    if (s[0] == int64_t(sizeof(Out)) && s[1] == int64_t(sizeof(T))) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = store_as<Out>(f(acc_t<T>(x[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) *reinterpret_cast<Out*>(p[0] + i * s[0]) = Out(f(load<T>(p[1] + i * s[1])));
    }
  });
}

// out = f(a, b); a and b broadcast to out's shape.
template <typename T, typename Out = T, typename F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  const Shape& shape = out.shape();
  auto loop = make_loop<3>(
      shape, {static_cast<char*>(out.raw_data()), static_cast<char*>(a.raw_data()), static_cast<char*>(b.raw_data())},
      {broadcast_byte_strides(out, shape), broadcast_byte_strides(a, shape), broadcast_byte_strides(b, shape)});
  for_each(loop, kElementwiseGrain, [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
    Out* o = reinterpret_cast<Out*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    const int64_t so = s[0], sa = s[1], sb = s[2], t = sizeof(T);
    if (so == int64_t(sizeof(Out)) && sa == t && sb == t) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = store_as<Out>(f(acc_t<T>(x[i]), acc_t<T>(y[i])));
    } else if (so == int64_t(sizeof(Out)) && sa == t && sb == 0) {
      const acc_t<T> yv = acc_t<T>(y[0]);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = store_as<Out>(f(acc_t<T>(x[i]), yv));
    } else if (so == int64_t(sizeof(Out)) && sa == 0 && sb == t) {
      const acc_t<T> xv = acc_t<T>(x[0]);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = store_as<Out>(f(xv, acc_t<T>(y[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<Out*>(p[0] + i * so) = Out(f(load<T>(p[1] + i * sa), load<T>(p[2] + i * sb)));
    }
  });
}

// out = f(a, b, c) for three same-typed inputs broadcast to out's shape.
template <typename T, typename F>
void ternary_loop(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, F f) {
  const Shape& shape = out.shape();
  auto loop = make_loop<4>(shape,
                           {static_cast<char*>(out.raw_data()), static_cast<char*>(a.raw_data()),
                            static_cast<char*>(b.raw_data()), static_cast<char*>(c.raw_data())},
                           {broadcast_byte_strides(out, shape), broadcast_byte_strides(a, shape),
                            broadcast_byte_strides(b, shape), broadcast_byte_strides(c, shape)});
  for_each(loop, kElementwiseGrain, [&](const std::array<char*, 4>& p, const std::array<int64_t, 4>& s, int64_t n) {
    const int64_t t = sizeof(T);
    if (s[0] == t && s[1] == t && s[2] == t && s[3] == t) {
      T* o = reinterpret_cast<T*>(p[0]);
      const T* x = reinterpret_cast<const T*>(p[1]);
      const T* y = reinterpret_cast<const T*>(p[2]);
      const T* z = reinterpret_cast<const T*>(p[3]);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) o[i] = store_as<T>(f(acc_t<T>(x[i]), acc_t<T>(y[i]), acc_t<T>(z[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<T*>(p[0] + i * s[0]) =
            T(f(load<T>(p[1] + i * s[1]), load<T>(p[2] + i * s[2]), load<T>(p[3] + i * s[3])));
    }
  });
}

}  // namespace tidal::cpu
