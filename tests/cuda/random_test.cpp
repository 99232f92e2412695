// The CUDA random kernels draw the CPU backend's bits: the same uniforms, integers, dropout masks and
// outputs for the same seed and stream positions (a recompute or a CPU-vs-GPU check relies on it), at
// any start (not only multiples of 4) and for pieces of a larger tensor (dropout_rows). Normals agree
// to a few ulp, ~98.5% exactly (philox.cuh: log/cos/sin are not the CPU's libm).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/elementwise_compare.h"
#include "tidal/ops/random.h"

namespace tidal {
namespace {

using testing::ew::cpu_kernels;
using testing::ew::cpu_stream;
using testing::ew::expect_equal;
using testing::ew::gpu_kernels;
using testing::ew::gpu_stream;
using testing::ew::kGpu;
using testing::ew::label;
using testing::ew::to_gpu;
using testing::ew::uniform_cpu;

const int64_t kSizes[] = {1, 7, 1000, 4097};
const DType kFloating[] = {DType::f32, DType::bf16, DType::f64};
const uint64_t kStarts[] = {0, 1, 2, 3, 4, 1003, (uint64_t(1) << 34) + 5};

TEST(CudaRandom, UniformsAreBitIdenticalAtAnyStart) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloating)
    for (int64_t n : kSizes)
      for (uint64_t start : kStarts) {
        Tensor c = empty({n}, dt), g = empty({n}, dt, kGpu);
        cpu_kernels().random_fill(cpu_stream(), c, Distribution::uniform, 1234, start);
        gpu_kernels().random_fill(gpu_stream(), g, Distribution::uniform, 1234, start);
        expect_equal(c, g, label("uniform", dt, n) + " start " + std::to_string(start));
      }
}

TEST(CudaRandom, NormalsAgreeToAFewUlpAndMostlyExactly) {
  TIDAL_REQUIRE_CUDA();
  for (uint64_t start : kStarts) {
    const int64_t n = 4097;
    Tensor c = empty({n}, DType::f32), g = empty({n}, DType::f32, kGpu);
    cpu_kernels().random_fill(cpu_stream(), c, Distribution::normal, 99, start);
    gpu_kernels().random_fill(gpu_stream(), g, Distribution::normal, 99, start);
    const std::vector<float> cv = c.to_vector<float>(), gv = g.to_vector<float>();
    int exact = 0;
    for (int64_t i = 0; i < n; ++i) {
      int32_t cb, gb;
      std::memcpy(&cb, &cv[size_t(i)], 4);
      std::memcpy(&gb, &gv[size_t(i)], 4);
      ASSERT_LE(std::llabs(int64_t(cb) - int64_t(gb)), 4)
          << "start " << start << " i " << i << ": " << cv[size_t(i)] << " vs " << gv[size_t(i)];
      exact += cb == gb;
    }
    EXPECT_GE(exact, n * 95 / 100) << "start " << start;
  }
  for (DType dt : {DType::bf16, DType::f64}) {  // the same floats, converted
    Tensor c = empty({1000}, dt), g = empty({1000}, dt, kGpu);
    cpu_kernels().random_fill(cpu_stream(), c, Distribution::normal, 5, 8);
    gpu_kernels().random_fill(gpu_stream(), g, Distribution::normal, 5, 8);
    testing::ew::expect_close(c, g, dt == DType::bf16 ? 8e-3 : 1e-6, 1e-5, label("normal", dt, 1000));
  }
}

TEST(CudaRandom, PublicOpsDrawTheSameStream) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloating) {
    manual_seed(17);
    const Tensor c = rand({3, 1001}, dt);
    manual_seed(17);
    const Tensor g = rand({3, 1001}, dt, kGpu);
    expect_equal(c, g, label("rand", dt, 3003));
  }
  for (DType dt : {DType::i32, DType::i64}) {
    manual_seed(18);
    const Tensor c = randint(-7, 1000003, {4097}, dt);
    manual_seed(18);
    const Tensor g = randint(-7, 1000003, {4097}, dt, kGpu);
    expect_equal(c, g, label("randint", dt, 4097));
  }
}

TEST(CudaRandom, RandintIsBitIdenticalAtAnyStart) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::i32, DType::i64})
    for (int64_t n : kSizes)
      for (uint64_t start : kStarts) {
        Tensor c = empty({n}, dt), g = empty({n}, dt, kGpu);
        cpu_kernels().randint_fill(cpu_stream(), c, -5, 123457, 77, start);
        gpu_kernels().randint_fill(gpu_stream(), g, -5, 123457, 77, start);
        expect_equal(c, g, label("randint", dt, n) + " start " + std::to_string(start));
      }
}

TEST(CudaRandom, DropoutMasksAndOutputsAreBitIdentical) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloating)
    for (int64_t n : kSizes)
      for (uint64_t start : kStarts)
        for (double p : {0.1, 0.5, 0.9}) {
          const Tensor x = uniform_cpu({n}, dt, -3, 3, uint64_t(n));
          const double scale = 1.0 / (1.0 - p);
          Tensor co = empty({n}, dt), cm = empty({n}, DType::u8);
          Tensor go = empty({n}, dt, kGpu), gm = empty({n}, DType::u8, kGpu);
          cpu_kernels().dropout_forward(cpu_stream(), co, cm, x, p, scale, 4242, start);
          gpu_kernels().dropout_forward(gpu_stream(), go, gm, to_gpu(x), p, scale, 4242, start);
          const std::string what = label("dropout", dt, n) + " start " + std::to_string(start);
          expect_equal(cm, gm, what + " mask");
          expect_equal(co, go, what + " out");
          // backward: dx = g * mask * scale
          const Tensor gr = uniform_cpu({n}, dt, -1, 1, 3);
          Tensor cd = empty({n}, dt), gd = empty({n}, dt, kGpu);
          cpu_kernels().dropout_backward(cpu_stream(), cd, gr, cm, scale);
          gpu_kernels().dropout_backward(gpu_stream(), gd, to_gpu(gr), gm, scale);
          expect_equal(cd, gd, what + " backward");
        }
}

TEST(CudaRandom, DropoutOpDrawsTheCpuMask) {
  TIDAL_REQUIRE_CUDA();
  const Tensor x = uniform_cpu({5, 333}, DType::f32, -2, 2, 8);
  manual_seed(23);
  (void)rand({3}, DType::f32);  // move the stream to a position that is not 0
  const Tensor c = dropout(x, 0.3);
  manual_seed(23);
  (void)rand({3}, DType::f32, kGpu);
  const Tensor g = dropout(to_gpu(x), 0.3);
  expect_equal(c, g, "dropout op");
}

// dropout_rows_forward on both backends with the same arguments.
void check_rows(DropoutRowsArgs a, DType dt, double p, const std::string& what) {
  const Shape shape{a.outer, a.rows, a.inner};
  const Tensor x = uniform_cpu(shape, dt, -3, 3, 91);
  const double scale = 1.0 / (1.0 - p);
  Tensor co = empty(shape, dt), cm = empty(shape, DType::u8);
  Tensor go = empty(shape, dt, kGpu), gm = empty(shape, DType::u8, kGpu);
  cpu_kernels().dropout_rows_forward(cpu_stream(), a, co, cm, x, p, scale);
  gpu_kernels().dropout_rows_forward(gpu_stream(), a, go, gm, to_gpu(x), p, scale);
  expect_equal(cm, gm, what + " mask");
  expect_equal(co, go, what + " out");
}

TEST(CudaRandom, DropoutRowsIsBitIdenticalWithAndWithoutARowMap) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloating)
    for (int64_t inner : {int64_t(1), int64_t(7), int64_t(1000), int64_t(4097)})
      for (uint64_t start : {uint64_t(0), uint64_t(4), uint64_t(1003)}) {
        DropoutRowsArgs a;
        a.outer = 2;
        a.rows = 3;
        a.inner = inner;
        a.global_rows = 8;
        a.global_inner = inner + 5;  // a column piece of wider rows
        a.row_offset = 2;
        a.col_offset = 3;
        a.seed = 555;
        a.start = start;
        const std::string what = label("dropout_rows", dt, inner) + " start " + std::to_string(start);
        check_rows(a, dt, 0.4, what + " offsets");
        const std::vector<int64_t> map = {7, 0, 5};
        a.row_map = map.data();
        check_rows(a, dt, 0.4, what + " row map");
      }
}

TEST(CudaRandom, DropoutRowsPiecesMakeTheWholeMask) {
  TIDAL_REQUIRE_CUDA();
  manual_seed(31);
  const RowFrame frame = reserve_row_frame(2, 6, 37, {4, 1, 5});
  const Tensor x = uniform_cpu({2, 3, 37}, DType::bf16, -1, 1, 92);
  const Tensor c = dropout_rows(x, 0.25, frame), g = dropout_rows(to_gpu(x), 0.25, frame);
  expect_equal(c, g, "dropout_rows op");
}

}  // namespace
}  // namespace tidal
