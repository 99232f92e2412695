#pragma once
// Helpers of the elementwise, random and activation CUDA tests (namespace testing::ew, so that other
// families' helpers cannot collide with these inline functions): moving a CPU tensor to the GPU (and back),
// the CPU's and the GPU's kernels called directly, and comparisons with a tolerance from the dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tidal/ops/random.h"
#include "tidal/rng.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal::testing::ew {

inline const Device kGpu = Device::cuda(0);

// A contiguous copy of `t` on the GPU (Tensor::to(Device) does not copy cpu <-> cuda yet).
inline Tensor to_gpu(const Tensor& t) { return from_vector(t.to_vector<double>(), t.shape(), t.dtype(), kGpu); }

inline Kernels& cpu_kernels() { return device_kernels(Device::cpu()); }
inline Kernels& gpu_kernels() { return device_kernels(kGpu); }
inline Stream& cpu_stream() { return current_stream(Device::cpu()); }
inline Stream& gpu_stream() { return current_stream(kGpu); }

// |gpu - cpu| <= atol + rtol |cpu| elementwise (NaNs must match), reporting the first few differences.
inline void expect_close(const Tensor& cpu, const Tensor& gpu, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  ASSERT_EQ(cpu.dtype(), gpu.dtype()) << what;
  const std::vector<double> c = cpu.to_vector<double>(), g = gpu.contiguous().to_vector<double>();
  int bad = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const bool ok = std::isnan(c[i]) ? std::isnan(g[i]) : std::fabs(g[i] - c[i]) <= atol + rtol * std::fabs(c[i]);
    if (!ok && ++bad <= 5) ADD_FAILURE() << what << ": element " << i << " cpu " << c[i] << " gpu " << g[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << c.size() << " elements differ";
}

// Bit for bit (as doubles, which hold every value of every dtype exactly; NaNs must match).
inline void expect_equal(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  expect_close(cpu, gpu, 0.0, 0.0, what);
}

// The dtype's tolerance for results computed in floating point: f32 ~1e-5 relative, bf16 ~1e-2, f64 ~1e-12;
// integers exact.
inline void expect_matches(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  switch (cpu.dtype()) {
    case DType::f32: return expect_close(cpu, gpu, 1e-5, 1e-6, what);
    case DType::bf16: return expect_close(cpu, gpu, 1e-2, 1e-2, what);
    case DType::f64: return expect_close(cpu, gpu, 1e-12, 1e-13, what);
    default: return expect_equal(cpu, gpu, what);
  }
}

// Uniform values in [lo, hi) of dtype `dtype` on the CPU (drawn in f64, then converted).
inline Tensor uniform_cpu(const Shape& shape, DType dtype, double lo, double hi, uint64_t seed) {
  manual_seed(seed);
  std::vector<double> v = rand(shape, DType::f64).to_vector<double>();
  for (double& x : v) x = lo + (hi - lo) * x;
  if (dtype != DType::f32 && dtype != DType::bf16 && dtype != DType::f64)
    for (double& x : v) x = std::floor(x);
  return from_vector(v, shape, dtype);
}

inline std::string label(const char* op, DType dtype, int64_t n) {
  return std::string(op) + " " + std::string(dtype_name(dtype)) + " n=" + std::to_string(n);
}

}  // namespace tidal::testing::ew
