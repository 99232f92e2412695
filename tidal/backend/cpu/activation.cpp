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

// The gate activations of a gated MLP: value(x) = act(x) and, in one go, both act(x) and act'(x).
struct SiluGate {
  template <typename A>
  static A value(A x) {
    return x * fast_sigmoid(x);
  }
  template <typename A>
  static void both(A x, A& f, A& df) {
    const A s = fast_sigmoid(x);
    f = x * s;
    df = s * (A(1) + x * (A(1) - s));
  }
};
struct GeluTanhGate {
  template <typename A>
  static A value(A x) {
    return gelu_tanh(x);
  }
  template <typename A>
  static void both(A x, A& f, A& df) {
    const A s = fast_sigmoid(A(2 * 0.7978845608028654) * (x + A(0.044715) * x * x * x));
    const A du2 = A(2 * 0.7978845608028654) * (A(1) + A(3 * 0.044715) * x * x);
    f = x * s;
    df = s + x * s * (A(1) - s) * du2;
  }
};

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
template <typename T, class Act>
void glu_backward_both(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate, const Tensor& up) {
  using A = acc_t<T>;
  // One contiguous run: dg/du out, gp/a/b in.
  const auto run = [](T * dg, T * du, const T* gp, const T* a, const T* b, int64_t n) __attribute__((flatten)) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      A f, df;
      Act::both(A(a[i]), f, df);
      const A gv = A(gp[i]);
      dg[i] = store_as<T>(gv * A(b[i]) * df);
      du[i] = store_as<T>(gv * f);
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
               A f, df;
               Act::both(load<T>(p[3] + i * s[3]), f, df);
               const A gv = load<T>(p[2] + i * s[2]);
               *reinterpret_cast<T*>(p[0] + i * s[0]) = store_as<T>(gv * load<T>(p[4] + i * s[4]) * df);
               *reinterpret_cast<T*>(p[1] + i * s[1]) = store_as<T>(gv * f);
             }
           });
}

template <typename T, class Act>
void glu_forward_as(const Tensor& out, const Tensor& gate, const Tensor& up) {
  using A = acc_t<T>;
  map2<T>(out, gate, up, [](A a, A b) { return Act::value(a) * b; });
}

template <typename T, class Act>
void glu_backward_as(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate, const Tensor& up) {
  using A = acc_t<T>;
  if (dgate.defined() && dup.defined()) return glu_backward_both<T, Act>(dgate, dup, g, gate, up);
  if (dgate.defined()) {
    return map3<T>(dgate, g, gate, up, [](A gv, A a, A b) {
      A f, df;
      Act::both(a, f, df);
      return gv * b * df;
    });
  }
  if (dup.defined()) map2<T>(dup, g, gate, [](A gv, A a) { return gv * Act::value(a); });
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

// out = act(gate) * up.
void CpuKernels::glu_forward(Stream&, const Tensor& out, const Tensor& gate, const Tensor& up, GluActivation act) {
  dispatch_float(gate.dtype(), glu_name(act), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (act == GluActivation::silu) return glu_forward_as<T, SiluGate>(out, gate, up);
    glu_forward_as<T, GeluTanhGate>(out, gate, up);
  });
}

// dgate = g * up * act'(gate), dup = g * act(gate), in one pass; either may be undefined (not needed).
void CpuKernels::glu_backward(Stream&, const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate,
                              const Tensor& up, GluActivation act) {
  dispatch_float(gate.dtype(), glu_name(act), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (act == GluActivation::silu) return glu_backward_as<T, SiluGate>(dgate, dup, g, gate, up);
    glu_backward_as<T, GeluTanhGate>(dgate, dup, g, gate, up);
  });
}

}  // namespace tidal::cpu
