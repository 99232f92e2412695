#include "tidal/backend/cpu/activation.h"

#include <tuple>

#include "tidal/backend/cpu/elementwise_loops.h"
#include "tidal/backend/cpu/kernels.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

template <typename A>
inline A silu_grad(A x) {
  const A s = fast_sigmoid(x);
  return s * (A(1) + x * (A(1) - s));
}

bool all_contiguous(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && !t->is_contiguous()) return false;
  return true;
}

// out[i] = f(in[i]...) over contiguous operands as one flat loop, storing through store_as (the
// strided loops of elementwise_loops.h convert with BFloat16's scalar constructor).
template <typename T, typename F, typename... In>
void flat_map(const Tensor& out, F f, const In&... in) {
  T* o = out.data<T>();
  const auto ptrs = std::make_tuple(in.template data<T>()...);
  parallel_for(0, out.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    std::apply(
        [&](const auto*... p) __attribute__((flatten)) {  // inline f fully, or the loop stays scalar
#pragma omp simd
          for (int64_t i = b; i < e; ++i) o[i] = store_as<T>(f(acc_t<T>(p[i])...));
        },
        ptrs);
  });
}

// out = f(x): flat when contiguous, else the strided loop.
template <typename T, typename F>
void map1(const Tensor& out, const Tensor& x, F f) {
  if (all_contiguous({&out, &x}))
    flat_map<T>(out, f, x);
  else
    unary_loop<T>(out, x, f);
}

template <typename T, typename F>
void map2(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  if (all_contiguous({&out, &a, &b}))
    flat_map<T>(out, f, a, b);
  else
    binary_loop<T>(out, a, b, f);
}

template <typename T, typename F>
void map3(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, F f) {
  if (all_contiguous({&out, &a, &b, &c}))
    flat_map<T>(out, f, a, b, c);
  else
    ternary_loop<T>(out, a, b, c, f);
}

// dgate and dup together: five operands (two outputs, three inputs) of one shape.
template <typename T>
void swiglu_backward_both(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate,
                          const Tensor& up) {
  using A = acc_t<T>;
  // One contiguous run: dg/du out, gp/a/b in.
  const auto run = [](T * dg, T * du, const T* gp, const T* a, const T* b, int64_t n) __attribute__((flatten)) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const A x = A(a[i]), gv = A(gp[i]), sg = fast_sigmoid(x);
      dg[i] = store_as<T>(gv * A(b[i]) * sg * (A(1) + x * (A(1) - sg)));
      du[i] = store_as<T>(gv * x * sg);
    }
  };
  if (all_contiguous({&dgate, &dup, &g, &gate, &up})) {  // split the flat range (for_each would not)
    T* dg = dgate.data<T>();
    T* du = dup.data<T>();
    const T *gp = g.data<T>(), *a = gate.data<T>(), *b = up.data<T>();
    parallel_for(0, dgate.numel(), kElementwiseGrain,
                 [&](int64_t i0, int64_t i1) { run(dg + i0, du + i0, gp + i0, a + i0, b + i0, i1 - i0); });
    return;
  }
  const Shape& shape = dgate.shape();
  const std::array<const Tensor*, 5> ops{&dgate, &dup, &g, &gate, &up};
  std::array<char*, 5> base;
  std::array<Shape, 5> strides;
  for (size_t k = 0; k < 5; ++k) {
    base[k] = static_cast<char*>(ops[k]->raw_data());
    strides[k] = broadcast_byte_strides(*ops[k], shape);
  }
  for_each(make_loop<5>(shape, base, strides), kElementwiseGrain,
           [&](const std::array<char*, 5>& p, const std::array<int64_t, 5>& s, int64_t n) {
             bool unit = true;
             for (size_t k = 0; k < 5; ++k) unit = unit && s[k] == int64_t(sizeof(T));
             if (unit) {
               run(reinterpret_cast<T*>(p[0]), reinterpret_cast<T*>(p[1]), reinterpret_cast<const T*>(p[2]),
                   reinterpret_cast<const T*>(p[3]), reinterpret_cast<const T*>(p[4]), n);
               return;
             }
             for (int64_t i = 0; i < n; ++i) {
               const A x = load<T>(p[3] + i * s[3]), gv = load<T>(p[2] + i * s[2]), sg = fast_sigmoid(x);
               const A dg = gv * load<T>(p[4] + i * s[4]) * sg * (A(1) + x * (A(1) - sg));
               *reinterpret_cast<T*>(p[0] + i * s[0]) = store_as<T>(dg);
               *reinterpret_cast<T*>(p[1] + i * s[1]) = store_as<T>(gv * x * sg);
             }
           });
}

}  // namespace

// out = gelu(x); tanh_approx picks the tanh form over the exact erf form.
void CpuKernels::gelu_forward(Stream&, const Tensor& out, const Tensor& x, bool tanh_approx) {
  dispatch_float(x.dtype(), "gelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (tanh_approx) return map1<T>(out, x, [](A v) { return gelu_tanh(v); });
    map1<T>(out, x, [](A v) { return gelu_erf(v); });
  });
}

// dx = g * gelu'(x).
void CpuKernels::gelu_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& x, bool tanh_approx) {
  dispatch_float(x.dtype(), "gelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (tanh_approx) return map2<T>(dx, g, x, [](A gv, A v) { return gv * gelu_tanh_grad(v); });
    map2<T>(dx, g, x, [](A gv, A v) { return gv * gelu_erf_grad(v); });
  });
}

// out = x * sigmoid(x).
void CpuKernels::silu_forward(Stream&, const Tensor& out, const Tensor& x) {
  dispatch_float(x.dtype(), "silu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    map1<T>(out, x, [](A v) { return v * fast_sigmoid(v); });
  });
}

void CpuKernels::silu_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& x) {
  dispatch_float(x.dtype(), "silu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    map2<T>(dx, g, x, [](A gv, A v) { return gv * silu_grad(v); });
  });
}

// out = silu(gate) * up.
void CpuKernels::swiglu_forward(Stream&, const Tensor& out, const Tensor& gate, const Tensor& up) {
  dispatch_float(gate.dtype(), "swiglu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    map2<T>(out, gate, up, [](A a, A b) { return a * fast_sigmoid(a) * b; });
  });
}

// dgate = g * up * silu'(gate), dup = g * silu(gate), in one pass; either may be undefined (not needed).
void CpuKernels::swiglu_backward(Stream&, const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate,
                                 const Tensor& up) {
  dispatch_float(gate.dtype(), "swiglu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = acc_t<T>;
    if (dgate.defined() && dup.defined()) return swiglu_backward_both<T>(dgate, dup, g, gate, up);
    if (dgate.defined()) return map3<T>(dgate, g, gate, up, [](A gv, A a, A b) { return gv * b * silu_grad(a); });
    if (dup.defined()) map2<T>(dup, g, gate, [](A gv, A a) { return gv * a * fast_sigmoid(a); });
  });
}

}  // namespace tidal::cpu
