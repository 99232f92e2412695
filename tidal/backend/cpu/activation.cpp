#include "tidal/backend/cpu/activation.h"

#include "tidal/backend/cpu/dispatch.h"
#include "tidal/backend/cpu/elementwise.h"
#include "tidal/backend/cpu/elementwise_loops.h"

namespace tidal::cpu {
namespace {

template <typename A>
inline A silu_grad(A x) {
  const A s = fast_sigmoid(x);
  return s * (A(1) + x * (A(1) - s));
}

// dgate and dup together: five operands (two outputs, three inputs) of one shape.
template <typename T>
void swiglu_backward_both(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate,
                          const Tensor& up) {
  using A = acc_t<T>;
  const Shape& shape = dgate.shape();
  const std::array<const Tensor*, 5> ops{&dgate, &dup, &g, &gate, &up};
  std::array<char*, 5> base;
  std::array<Shape, 5> strides;
  for (int k = 0; k < 5; ++k) {
    base[size_t(k)] = static_cast<char*>(ops[size_t(k)]->raw_data());
    strides[size_t(k)] = broadcast_byte_strides(*ops[size_t(k)], shape);
  }
  auto loop = make_loop<5>(shape, base, strides);
  for_each(loop, kElementwiseGrain, [&](const std::array<char*, 5>& p, const std::array<int64_t, 5>& s, int64_t n) {
    bool unit = true;
    for (int k = 0; k < 5; ++k) unit = unit && s[size_t(k)] == int64_t(sizeof(T));
    if (unit) {
      T* dg = reinterpret_cast<T*>(p[0]);
      T* du = reinterpret_cast<T*>(p[1]);
      const T* gp = reinterpret_cast<const T*>(p[2]);
      const T* a = reinterpret_cast<const T*>(p[3]);
      const T* b = reinterpret_cast<const T*>(p[4]);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const A x = A(a[i]), gv = A(gp[i]), sg = fast_sigmoid(x);
        dg[i] = T(gv * A(b[i]) * sg * (A(1) + x * (A(1) - sg)));
        du[i] = T(gv * x * sg);
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      const A x = load<T>(p[3] + i * s[3]), gv = load<T>(p[2] + i * s[2]), sg = fast_sigmoid(x);
      *reinterpret_cast<T*>(p[0] + i * s[0]) = T(gv * load<T>(p[4] + i * s[4]) * sg * (A(1) + x * (A(1) - sg)));
      *reinterpret_cast<T*>(p[1] + i * s[1]) = T(gv * x * sg);
    }
  });
}

}  // namespace

void gelu_forward(const Tensor& out, const Tensor& x, bool tanh_approx) {
  dispatch_float(x.dtype(), "gelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (tanh_approx) return unary_loop<T>(out, x, [](A v) { return gelu_tanh(v); });
    unary_loop<T>(out, x, [](A v) { return gelu_erf(v); });
  });
}

void gelu_backward(const Tensor& dx, const Tensor& g, const Tensor& x, bool tanh_approx) {
  dispatch_float(x.dtype(), "gelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (tanh_approx) return binary_loop<T>(dx, g, x, [](A gv, A v) { return gv * gelu_tanh_grad(v); });
    binary_loop<T>(dx, g, x, [](A gv, A v) { return gv * gelu_erf_grad(v); });
  });
}

void silu_forward(const Tensor& out, const Tensor& x) {
  dispatch_float(x.dtype(), "silu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    unary_loop<T>(out, x, [](A v) { return v * fast_sigmoid(v); });
  });
}

void silu_backward(const Tensor& dx, const Tensor& g, const Tensor& x) {
  dispatch_float(x.dtype(), "silu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    binary_loop<T>(dx, g, x, [](A gv, A v) { return gv * silu_grad(v); });
  });
}

void swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up) {
  dispatch_float(gate.dtype(), "swiglu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    binary_loop<T>(out, gate, up, [](A a, A b) { return a * fast_sigmoid(a) * b; });
  });
}

void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate, const Tensor& up) {
  dispatch_float(gate.dtype(), "swiglu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (dgate.defined() && dup.defined()) return swiglu_backward_both<T>(dgate, dup, g, gate, up);
    if (dgate.defined())
      return ternary_loop<T>(dgate, g, gate, up, [](A gv, A a, A b) { return gv * b * silu_grad(a); });
    if (dup.defined()) binary_loop<T>(dup, g, gate, [](A gv, A a) { return gv * a * fast_sigmoid(a); });
  });
}

}  // namespace tidal::cpu
