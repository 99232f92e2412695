#pragma once
// Helpers of the reduction family's CUDA tests: random inputs on both devices, comparison with a
// tolerance from the dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tidal/tensor.h"

namespace tidal::testing {

inline std::vector<double> random_values(int64_t n, uint64_t seed, double lo = -2.0, double hi = 2.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = d(rng);
  return v;
}

inline Tensor on_cuda(const Tensor& t) {
  return from_vector(t.to_vector<double>(), t.shape(), t.dtype(), Device::cuda(0));
}

// A leaf of (B, L, H, D) memory order on `device` with values in [-1, 1), and its (B, H, L, D) view: tidal's usual
// attention inputs, transposed projections.
struct LeafView {
  Tensor leaf, view;
};
inline LeafView heads_leaf(int64_t b, int64_t h, int64_t l, int64_t d, DType dtype, uint64_t seed, Device device) {
  Tensor leaf = from_vector(random_values(b * l * h * d, seed, -1.0, 1.0), {b, l, h, d}, dtype, device);
  leaf.set_requires_grad(true);
  return {leaf, leaf.transpose(1, 2)};
}

inline Tensor random_cpu(const Shape& shape, DType dtype, uint64_t seed) {
  return from_vector(random_values(shape.numel(), seed), shape, dtype, Device::cpu());
}

inline double tolerance(DType t) { return t == DType::bf16 ? 2e-2 : t == DType::f64 ? 1e-12 : 2e-5; }
// The attention kernels' (flash with log-sum-exp, sparse): sums over a row's keys in another order than the CPU's.
inline double attention_tolerance(DType t) { return t == DType::f64 ? 1e-10 : t == DType::bf16 ? 2e-2 : 1e-4; }

// |gpu - cpu| <= tol * (1 + |cpu|) elementwise (the GPU tensor read back contiguous).
inline void expect_close(const Tensor& gpu, const Tensor& cpu, double tol, const char* what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const std::vector<double> a = gpu.to_vector<double>(), b = cpu.to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < a.size() && bad < 5; ++i) {
    if (std::isnan(b[i]) && std::isnan(a[i])) continue;
    if (!(std::fabs(a[i] - b[i]) <= tol * (1.0 + std::fabs(b[i])))) {
      ADD_FAILURE() << what << ": element " << i << " gpu " << a[i] << " cpu " << b[i];
      ++bad;
    }
  }
}

inline void expect_equal(const Tensor& gpu, const Tensor& cpu, const char* what) { expect_close(gpu, cpu, 0.0, what); }

// |gpu - cpu| <= tol * max(1, max |cpu|) elementwise, infinities equal (attention's log-sum-exps of rows that see no
// key): for sums over many terms, whose rounding scales with the largest of them rather than with each result.
inline void expect_close_to_scale(const Tensor& gpu, const Tensor& cpu, double tol, const char* what) {
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const std::vector<double> a = gpu.to_vector<double>(), b = cpu.to_vector<double>();
  double scale = 1;
  for (double x : b)
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  int bad = 0;
  for (size_t i = 0; i < a.size() && bad < 5; ++i) {
    const bool ok = std::isinf(b[i]) ? a[i] == b[i] : std::fabs(a[i] - b[i]) <= tol * scale;
    if (!ok) {
      ADD_FAILURE() << what << ": element " << i << " gpu " << a[i] << " cpu " << b[i] << " (scale " << scale << ")";
      ++bad;
    }
  }
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (std::signbit(x[i]) != std::signbit(y[i]) || !(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))))
      return false;
  return true;
}

inline const DType kFloatTypes[] = {DType::f32, DType::bf16, DType::f64};

}  // namespace tidal::testing
