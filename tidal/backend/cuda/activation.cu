#include "tidal/backend/cuda/activation_launch.h"
#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/elementwise_loops.cuh"

namespace tidal::cuda {
namespace {

// --- backend/cpu/activation.h's formulas, on f32 or f64
template <class A>
__device__ __forceinline__ A gelu_tanh(A x) {
  const A u2 = A(2 * 0.7978845608028654) * (x + A(0.044715) * x * x * x);
  return x * fast_sigmoid(u2);
}
template <class A>
__device__ __forceinline__ A gelu_tanh_grad(A x) {
  const A s = fast_sigmoid(A(2 * 0.7978845608028654) * (x + A(0.044715) * x * x * x));
  const A du2 = A(2 * 0.7978845608028654) * (A(1) + A(3 * 0.044715) * x * x);
  return s + x * s * (A(1) - s) * du2;
}
template <class A>
__device__ __forceinline__ A gelu_erf(A x) {
  return A(0.5) * x * (A(1) + fast_erf(x * A(0.7071067811865476)));
}
template <class A>
__device__ __forceinline__ A gelu_erf_grad(A x) {
  const A cdf = A(0.5) * (A(1) + fast_erf(x * A(0.7071067811865476)));
  return cdf + x * A(0.3989422804014327) * fast_exp(A(-0.5) * x * x);
}
template <class A>
__device__ __forceinline__ A silu_grad(A x) {
  const A s = fast_sigmoid(x);
  return s * (A(1) + x * (A(1) - s));
}

template <class A, bool TANH>
struct GeluForward {
  __device__ __forceinline__ A operator()(A x) const { return TANH ? gelu_tanh(x) : gelu_erf(x); }
};
template <class A, bool TANH>
struct GeluBackward {
  __device__ __forceinline__ A operator()(A g, A x) const { return g * (TANH ? gelu_tanh_grad(x) : gelu_erf_grad(x)); }
};
template <class A>
struct SiluForward {
  __device__ __forceinline__ A operator()(A x) const { return x * fast_sigmoid(x); }
};
template <class A>
struct SiluBackward {
  __device__ __forceinline__ A operator()(A g, A x) const { return g * silu_grad(x); }
};
// The gate activations of a gated MLP (the CPU's SiluGate / GeluTanhGate): act(x), and act(x) with act'(x).
struct SiluGate {
  template <class A>
  __device__ __forceinline__ static A value(A x) {
    return x * fast_sigmoid(x);
  }
  template <class A>
  __device__ __forceinline__ static void both(A x, A& f, A& df) {
    const A s = fast_sigmoid(x);
    f = x * s;
    df = s * (A(1) + x * (A(1) - s));
  }
};
struct GeluTanhGate {
  template <class A>
  __device__ __forceinline__ static A value(A x) {
    return gelu_tanh(x);
  }
  template <class A>
  __device__ __forceinline__ static void both(A x, A& f, A& df) {
    const A s = fast_sigmoid(A(2 * 0.7978845608028654) * (x + A(0.044715) * x * x * x));
    const A du2 = A(2 * 0.7978845608028654) * (A(1) + A(3 * 0.044715) * x * x);
    f = x * s;
    df = s + x * s * (A(1) - s) * du2;
  }
};

template <class A, class Act>
struct GluForward {
  __device__ __forceinline__ A operator()(A a, A b) const { return Act::value(a) * b; }
};
template <class A, class Act>
struct GluGate {  // dgate alone
  __device__ __forceinline__ A operator()(A g, A a, A b) const {
    A f, df;
    Act::both(a, f, df);
    return g * b * df;
  }
};
template <class A, class Act>
struct GluUp {  // dup alone
  __device__ __forceinline__ A operator()(A g, A a) const { return g * Act::value(a); }
};

// Both gradients in one pass (the CPU's glu_backward_both).
template <class T, class Act>
__device__ __forceinline__ void glu_both(T g, T gate, T up, T& dg, T& du) {
  using A = acc_t<T>;
  A f, df;
  Act::both(load_work(gate), f, df);
  const A gv = load_work(g);
  dg = store_work<T>(gv * load_work(up) * df);
  du = store_work<T>(gv * f);
}

template <class T, class Act>
__global__ void __launch_bounds__(kThreads)
    glu_backward_strided(Strided dgate, Strided dup, Strided g, Strided gate, Strided up, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T dg, du;
    glu_both<T, Act>(static_cast<const T*>(g.data)[at(g, i)], static_cast<const T*>(gate.data)[at(gate, i)],
                     static_cast<const T*>(up.data)[at(up, i)], dg, du);
    static_cast<T*>(dgate.data)[at(dgate, i)] = dg;
    static_cast<T*>(dup.data)[at(dup, i)] = du;
  }
}

template <class T, class Act>
__global__ void __launch_bounds__(kThreads)
    glu_backward_vec(T* dgate, T* dup, const T* g, const T* gate, const T* up, int64_t n) {
  constexpr int V = 16 / int(sizeof(T));
  const int64_t nvec = n / V, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = tid; v < nvec; v += stride) {
    Vec16<T> gv, a, b, dg, du;
    gv.u = __ldg(reinterpret_cast<const uint4*>(g) + v);
    a.u = __ldg(reinterpret_cast<const uint4*>(gate) + v);
    b.u = __ldg(reinterpret_cast<const uint4*>(up) + v);
#pragma unroll
    for (int j = 0; j < V; ++j) glu_both<T, Act>(gv.t[j], a.t[j], b.t[j], dg.t[j], du.t[j]);
    reinterpret_cast<uint4*>(dgate)[v] = dg.u;
    reinterpret_cast<uint4*>(dup)[v] = du.u;
  }
  for (int64_t i = nvec * V + tid; i < n; i += stride) glu_both<T, Act>(g[i], gate[i], up[i], dgate[i], dup[i]);
}

template <class T, class Act>
void glu_backward_both(cudaStream_t stream, const Strided& dgate, const Strided& dup, const Strided& g,
                       const Strided& gate, const Strided& up, int64_t n) {
  bool vec = !std::is_same_v<T, double>;  // f64 takes the strided loop (see run_map)
  for (const Strided* s : {&dgate, &dup, &g, &gate, &up}) vec = vec && is_flat(*s) && is_aligned16(s->data);
  if (vec) {
    constexpr int64_t V = 16 / int64_t(sizeof(T));
    glu_backward_vec<T, Act><<<grid_for((n + V - 1) / V), kThreads, 0, stream>>>(
        static_cast<T*>(dgate.data), static_cast<T*>(dup.data), static_cast<const T*>(g.data),
        static_cast<const T*>(gate.data), static_cast<const T*>(up.data), n);
  } else {
    glu_backward_strided<T, Act><<<grid_for(n), kThreads, 0, stream>>>(dgate, dup, g, gate, up, n);
  }
  TIDAL_CUDA_CHECK_LAUNCH();
}

template <class T, class Act>
void glu_backward_as(cudaStream_t stream, const Strided& dgate, const Strided& dup, const Strided& g,
                     const Strided& gate, const Strided& up, int64_t n) {
  if (dgate.data && dup.data) {
    glu_backward_both<T, Act>(stream, dgate, dup, g, gate, up, n);
  } else if (dgate.data) {
    const Strided ins[3] = {g, gate, up};
    run_map<T, T, 3>(stream, dgate, ins, n, GluGate<acc_t<T>, Act>{});
  } else if (dup.data) {
    const Strided ins[2] = {g, gate};
    run_map<T, T, 2>(stream, dup, ins, n, GluUp<acc_t<T>, Act>{});
  }
}

}  // namespace

void launch_gelu_forward(cudaStream_t stream, const Strided& out, const Strided& x, int64_t n, bool tanh_approx) {
  const Strided ins[1] = {x};
  TIDAL_CUDA_FLOATING(x.dtype, "gelu", T, {
    if (tanh_approx)
      run_map<T, T, 1>(stream, out, ins, n, GeluForward<acc_t<T>, true>{});
    else
      run_map<T, T, 1>(stream, out, ins, n, GeluForward<acc_t<T>, false>{});
  });
}

void launch_gelu_backward(cudaStream_t stream, const Strided& dx, const Strided& g, const Strided& x, int64_t n,
                          bool tanh_approx) {
  const Strided ins[2] = {g, x};
  TIDAL_CUDA_FLOATING(x.dtype, "gelu", T, {
    if (tanh_approx)
      run_map<T, T, 2>(stream, dx, ins, n, GeluBackward<acc_t<T>, true>{});
    else
      run_map<T, T, 2>(stream, dx, ins, n, GeluBackward<acc_t<T>, false>{});
  });
}

void launch_silu_forward(cudaStream_t stream, const Strided& out, const Strided& x, int64_t n) {
  const Strided ins[1] = {x};
  TIDAL_CUDA_FLOATING(x.dtype, "silu", T, run_map<T, T, 1>(stream, out, ins, n, SiluForward<acc_t<T>>{}));
}

void launch_silu_backward(cudaStream_t stream, const Strided& dx, const Strided& g, const Strided& x, int64_t n) {
  const Strided ins[2] = {g, x};
  TIDAL_CUDA_FLOATING(x.dtype, "silu", T, run_map<T, T, 2>(stream, dx, ins, n, SiluBackward<acc_t<T>>{}));
}

void launch_glu_forward(cudaStream_t stream, const Strided& out, const Strided& gate, const Strided& up, int64_t n,
                        GluActivation act) {
  const Strided ins[2] = {gate, up};
  TIDAL_CUDA_FLOATING(gate.dtype, glu_name(act), T, {
    if (act == GluActivation::silu)
      run_map<T, T, 2>(stream, out, ins, n, GluForward<acc_t<T>, SiluGate>{});
    else
      run_map<T, T, 2>(stream, out, ins, n, GluForward<acc_t<T>, GeluTanhGate>{});
  });
}

void launch_glu_backward(cudaStream_t stream, const Strided& dgate, const Strided& dup, const Strided& g,
                         const Strided& gate, const Strided& up, int64_t n, GluActivation act) {
  if (n == 0) return;
  TIDAL_CUDA_FLOATING(gate.dtype, glu_name(act), T, {
    if (act == GluActivation::silu)
      glu_backward_as<T, SiluGate>(stream, dgate, dup, g, gate, up, n);
    else
      glu_backward_as<T, GeluTanhGate>(stream, dgate, dup, g, gate, up, n);
  });
}

}  // namespace tidal::cuda
