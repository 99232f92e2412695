// The CUDA index family against the CPU backend on the same inputs: gather, scatter_add (both
// schedules), index_select/index_add, range checks, topk (small and large k, ties, NaN), argsort,
// bincount. Every result exact. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tidal/ops/index.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

Tensor to_cuda(const Tensor& t) {
  return from_vector(t.contiguous().to_vector<double>(), t.shape(), t.dtype(), Device::cuda(0));
}

// Values with many ties (small integers) so ordering rules show.
Tensor random_values(const Shape& shape, DType dtype, int levels, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& x : v) x = double(int(rng() % uint32_t(levels))) * 0.25 - 2.0;
  return from_vector(v, shape, dtype);
}
Tensor random_index(const Shape& shape, int64_t limit, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& x : v) x = double(rng() % uint64_t(limit));
  return from_vector(v, shape, dtype);
}

std::vector<double> randn_like_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = normal(rng);
  return v;
}
// Some NaNs and negative zeros among the values (NaN sorts as the largest; -0 ties with +0).
std::vector<double> with_nans(std::vector<double> v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (i % 11 == 3) v[i] = std::nan("");
    if (i % 7 == 2) v[i] = -0.0;
  }
  return v;
}

void expect_same(const Tensor& cpu, const Tensor& cuda) {
  ASSERT_EQ(cpu.shape(), cuda.shape());
  ASSERT_EQ(cpu.dtype(), cuda.dtype());
  const std::vector<double> a = cpu.contiguous().to_vector<double>(), b = cuda.to_vector<double>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != a[i] && b[i] != b[i]) continue;  // NaN in both
    ASSERT_EQ(a[i], b[i]) << "at " << i;
  }
}

TEST(CudaIndex, GatherMatchesCpuOverDimsAndDtypes) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i64}) {
    for (int dim : {0, 1, 2}) {
      Tensor x = random_values({7, 33, 5}, dt, 50, 1);
      Shape is{7, 33, 5};
      is[dim] = 9;
      Tensor idx = random_index(is, x.shape()[dim], DType::i64, 2 + dim);
      expect_same(gather(x, dim, idx), gather(to_cuda(x), dim, to_cuda(idx)));
    }
  }
  Tensor x = random_values({40, 6}, DType::f32, 100, 3);  // non-contiguous x and a transposed i32 index
  Tensor idx = random_index({40, 6}, 40, DType::i32, 4);
  expect_same(gather(x.t(), 1, idx.t()), gather(to_cuda(x).t(), 1, to_cuda(idx).t()));
}

TEST(CudaIndex, ScatterAddMatchesCpuBitForBit) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32}) {
    for (int dim : {0, 1}) {
      Tensor self = random_values({13, 17}, dt, 30, 5);
      Shape is{13, 17};
      is[dim] = 1000;  // many sources per element: rounding order matters for floats
      Tensor src = random_values(is, dt, 400, 6);
      Tensor idx = random_index(is, self.shape()[dim], DType::i64, 7);
      expect_same(scatter_add(self, dim, idx, src), scatter_add(to_cuda(self), dim, to_cuda(idx), to_cuda(src)));
    }
  }
}

TEST(CudaIndex, IndexAddAndIndexSelectMatchCpu) {
  TIDAL_REQUIRE_CUDA();
  for (int64_t n : {1, 7, 1000, 4097}) {  // n >= 64 takes the sorted schedule
    for (DType dt : {DType::f32, DType::bf16}) {
      Tensor self = random_values({97, 24}, dt, 40, 8);
      Tensor src = from_vector(randn_like_values(n * 24, 9), {n, 24}, dt);
      Tensor idx = random_index({n}, 97, DType::i32, 10);
      expect_same(index_add(self, 0, idx, src), index_add(to_cuda(self), 0, to_cuda(idx), to_cuda(src)));
      expect_same(index_select(self, 0, idx), index_select(to_cuda(self), 0, to_cuda(idx)));
    }
  }
}

TEST(CudaIndex, RangeChecksBincountAndMax) {
  TIDAL_REQUIRE_CUDA();
  for (int64_t n : {1, 7, 1000, 100000}) {
    Tensor idx = random_index({n}, 256, DType::i64, 11);
    expect_same(bincount(idx, 4), bincount(to_cuda(idx), 4));
    Tensor big = random_index({n}, 20000, DType::i32, 12);  // more bins than the shared-memory path takes
    expect_same(bincount(big), bincount(to_cuda(big)));
  }
  std::vector<double> v(5000, 3.0);
  v[4321] = 300;
  v[4500] = -1;
  Tensor bad = from_vector(v, {5000}, DType::i64);
  EXPECT_THROW(gather(to_cuda(from_vector(std::vector<double>(10, 1.0), {10})), 0, to_cuda(bad)), std::exception);
  try {
    index_select(to_cuda(from_vector(std::vector<double>(10, 1.0), {10})), 0, to_cuda(bad));
    FAIL() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos) << e.what();  // the first bad position
  }
  EXPECT_THROW(bincount(to_cuda(bad)), std::exception);  // negative value
}

TEST(CudaIndex, TopKMatchesCpuWithTiesAndNaN) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i64}) {
    for (int64_t k : {1, 2, 8, 16, 17, 40}) {
      for (bool largest : {true, false}) {
        for (bool sorted : {true, false}) {
          SCOPED_TRACE(::testing::Message() << dt << " k " << k << " largest " << largest << " sorted " << sorted);
          Tensor x = random_values({37, 64}, dt, 9, 13);  // many ties
          if (dt == DType::f32) x = from_vector(with_nans(x.to_vector<double>()), x.shape(), dt);
          const TopKResult a = topk(x, k, 1, largest, sorted), b = topk(to_cuda(x), k, 1, largest, sorted);
          expect_same(a.values, b.values);
          expect_same(a.indices, b.indices);
          const TopKResult c = topk(x.t(), k, 0, largest, sorted), d = topk(to_cuda(x).t(), k, 0, largest, sorted);
          expect_same(c.values, d.values);  // rows along dim 0 of a transposed view: inner > 1
          expect_same(c.indices, d.indices);
        }
      }
    }
  }
  Tensor router = from_vector(randn_like_values(4097 * 256, 14), {4097, 256});  // MoE routing shape
  const TopKResult a = topk(router, 8), b = topk(to_cuda(router), 8);
  expect_same(a.values, b.values);
  expect_same(a.indices, b.indices);
}

TEST(CudaIndex, ArgsortIsStableAndMatchesCpu) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8}) {
    for (bool desc : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dt << " descending " << desc);
      Tensor x = random_values({9, 1000}, dt == DType::u8 ? DType::f32 : dt, 12, 15);
      if (dt == DType::u8)
        x = from_vector(random_index({9, 1000}, 7, DType::i64, 16).to_vector<double>(), {9, 1000}, dt);
      if (dt == DType::f32) x = from_vector(with_nans(x.to_vector<double>()), x.shape(), dt);
      expect_same(argsort(x, 1, desc), argsort(to_cuda(x), 1, desc));
      expect_same(argsort(x, 0, desc), argsort(to_cuda(x), 0, desc));  // inner > 1
      Tensor flat = x.reshape({9000});
      expect_same(argsort(flat, 0, desc), argsort(to_cuda(flat), 0, desc));  // one row: radix sort
    }
  }
  Tensor experts = random_index({8 * 4097}, 64, DType::i64, 17);  // MoE dispatch: sort token slots by expert
  expect_same(argsort(experts), argsort(to_cuda(experts)));
}

}  // namespace
}  // namespace tidal
