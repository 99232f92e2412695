// The CUDA elementwise kernels against the CPU backend's on the same inputs: every Unary, Binary and
// Compare op, where, masked_fill, copy between every pair of dtypes, add_inplace; odd sizes, broadcast
// and non-contiguous operands, the contiguous vector path and its unaligned fallback.
#include <gtest/gtest.h>

#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/elementwise_compare.h"
#include "tidal/ops/elementwise.h"

namespace tidal {
namespace {

using testing::ew::cpu_kernels;
using testing::ew::cpu_stream;
using testing::ew::expect_equal;
using testing::ew::expect_matches;
using testing::ew::gpu_kernels;
using testing::ew::gpu_stream;
using testing::ew::kGpu;
using testing::ew::label;
using testing::ew::to_gpu;
using testing::ew::uniform_cpu;

const int64_t kSizes[] = {1, 7, 1000, 4097};
const DType kFloating[] = {DType::f32, DType::bf16, DType::f64};
const DType kIntegers[] = {DType::i32, DType::i64, DType::u8};

// The unary kernel on both backends (x on the CPU; its GPU copy); the outputs (cpu, gpu).
std::pair<Tensor, Tensor> run_unary(Unary op, const Tensor& x, double s) {
  Tensor c = empty(x.shape(), x.dtype()), g = empty(x.shape(), x.dtype(), kGpu);
  cpu_kernels().unary(cpu_stream(), op, c, x, s);
  gpu_kernels().unary(gpu_stream(), op, g, to_gpu(x), s);
  return {c, g};
}

TEST(CudaElementwise, EveryFloatingUnaryOpMatchesTheCpu) {
  TIDAL_REQUIRE_CUDA();
  struct Case {
    Unary op;
    double s, lo, hi;
  };
  const Case cases[] = {
      {Unary::neg, 0, -3, 3},           {Unary::exp, 0, -20, 20},         {Unary::log, 0, 0.01, 50},
      {Unary::sqrt, 0, 0, 50},          {Unary::rsqrt, 0, 0.01, 50},      {Unary::abs, 0, -3, 3},
      {Unary::sign, 0, -3, 3},          {Unary::tanh, 0, -5, 5},          {Unary::sigmoid, 0, -20, 20},
      {Unary::relu, 0, -3, 3},          {Unary::square, 0, -3, 3},        {Unary::reciprocal, 0, 0.1, 9},
      {Unary::sin, 0, -20, 20},         {Unary::cos, 0, -20, 20},         {Unary::add_scalar, 1.25, -3, 3},
      {Unary::mul_scalar, -0.7, -3, 3}, {Unary::rsub_scalar, 2.5, -3, 3}, {Unary::rdiv_scalar, 3, 0.1, 9},
      {Unary::pow_scalar, 2.0, -3, 3},  {Unary::pow_scalar, 0.5, 0, 9},   {Unary::pow_scalar, 1.7, 0, 9},
      {Unary::clamp_min, 0.3, -3, 3},   {Unary::clamp_max, -0.2, -3, 3},
  };
  for (DType dt : kFloating)
    for (int64_t n : kSizes)
      for (const Case& k : cases) {
        const Tensor x = uniform_cpu({n}, dt, k.lo, k.hi, uint64_t(n) * 31 + int(k.op));
        auto [c, g] = run_unary(k.op, x, k.s);
        expect_matches(c, g, label("unary", dt, n) + " op " + std::to_string(int(k.op)) + " s " + std::to_string(k.s));
      }
}

TEST(CudaElementwise, IntegerUnaryOpsAreExact) {
  TIDAL_REQUIRE_CUDA();
  const Unary ops[] = {Unary::neg,         Unary::abs,       Unary::add_scalar, Unary::mul_scalar,
                       Unary::rsub_scalar, Unary::clamp_min, Unary::clamp_max,  Unary::square};
  for (DType dt : kIntegers)
    for (int64_t n : kSizes)
      for (Unary op : ops) {
        const Tensor x = uniform_cpu({n}, dt, dt == DType::u8 ? 0 : -100, 100, uint64_t(n) + int(op));
        auto [c, g] = run_unary(op, x, 3.0);
        expect_equal(c, g, label("unary", dt, n) + " op " + std::to_string(int(op)));
      }
}

TEST(CudaElementwise, UnaryOnStridedAndUnalignedInputs) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloating) {
    const Tensor x = uniform_cpu({33, 65}, dt, -3, 3, 5);
    const Tensor xg = to_gpu(x);
    // A transpose, a column slice (unaligned, not contiguous) and a flat view starting one element in.
    expect_matches(exp(x.t()).contiguous(), exp(xg.t()), label("exp transposed", dt, x.numel()));
    expect_matches(tanh(x.narrow(1, 1, 60)).contiguous(), tanh(xg.narrow(1, 1, 60)), label("tanh narrow", dt, 1980));
    const Tensor flat = x.reshape({33 * 65}).narrow(0, 1, 2000), flat_g = xg.reshape({33 * 65}).narrow(0, 1, 2000);
    expect_matches(sigmoid(flat), sigmoid(flat_g), label("sigmoid unaligned", dt, 2000));
    expect_matches(mul(flat, flat), mul(flat_g, flat_g), label("mul unaligned", dt, 2000));
  }
}

TEST(CudaElementwise, EveryBinaryOpWithBroadcastMatchesTheCpu) {
  TIDAL_REQUIRE_CUDA();
  const Binary ops[] = {Binary::add, Binary::sub,     Binary::mul,    Binary::div,
                        Binary::pow, Binary::maximum, Binary::minimum};
  const std::vector<std::pair<Shape, Shape>> shapes = {{{1}, {1}},         {{7}, {7}},          {{1000}, {1000}},
                                                       {{4097}, {4097}},   {{7, 1000}, {1000}}, {{7, 1}, {7, 333}},
                                                       {{3, 1, 5}, {4, 1}}};
  for (DType dt : kFloating)
    for (const auto& [sa, sb] : shapes)
      for (Binary op : ops)
        for (double alpha : {1.0, -0.5}) {
          const double lo = op == Binary::pow ? 0.1 : -3;
          const Tensor a = uniform_cpu(sa, dt, lo, 3, 11), b = uniform_cpu(sb, dt, op == Binary::div ? 0.5 : lo, 3, 12);
          const Shape out_shape = broadcast_shapes(sa, sb, "test");
          Tensor c = empty(out_shape, dt), g = empty(out_shape, dt, kGpu);
          cpu_kernels().binary(cpu_stream(), op, c, a, b, alpha);
          gpu_kernels().binary(gpu_stream(), op, g, to_gpu(a), to_gpu(b), alpha);
          expect_matches(
              c, g,
              label("binary", dt, c.numel()) + " op " + std::to_string(int(op)) + " alpha " + std::to_string(alpha));
        }
}

TEST(CudaElementwise, IntegerBinaryOpsAreExact) {
  TIDAL_REQUIRE_CUDA();
  const Binary ops[] = {Binary::add, Binary::sub, Binary::mul, Binary::div, Binary::maximum, Binary::minimum};
  for (DType dt : kIntegers)
    for (int64_t n : kSizes)
      for (Binary op : ops) {
        const double lo = dt == DType::u8 ? 0 : -50;
        const Tensor a = uniform_cpu({n}, dt, lo, 50, 21), b = uniform_cpu({n}, dt, lo, 50, 22);  // b has zeros
        Tensor c = empty({n}, dt), g = empty({n}, dt, kGpu);
        cpu_kernels().binary(cpu_stream(), op, c, a, b, 2.0);
        gpu_kernels().binary(gpu_stream(), op, g, to_gpu(a), to_gpu(b), 2.0);
        expect_equal(c, g, label("binary", dt, n) + " op " + std::to_string(int(op)));
      }
}

TEST(CudaElementwise, BinaryOnTransposedOperandsAndTheVectorPath) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloating) {
    const Tensor a = uniform_cpu({129, 67}, dt, -3, 3, 31), b = uniform_cpu({67, 129}, dt, -3, 3, 32);
    expect_matches(add(a, b.t(), 0.25), add(to_gpu(a), to_gpu(b).t(), 0.25), label("add transposed", dt, a.numel()));
    const int64_t big = (1 << 20) + 3;  // the vector loop and a tail
    const Tensor x = uniform_cpu({big}, dt, -3, 3, 33), y = uniform_cpu({big}, dt, -3, 3, 34);
    const Tensor xg = to_gpu(x), yg = to_gpu(y);
    expect_matches(sub(x, y, 0.5), sub(xg, yg, 0.5), label("sub vector path", dt, big));
    expect_matches(div(x, add(y, 4.0)), div(xg, add(yg, 4.0)), label("div vector path", dt, big));
  }
}

TEST(CudaElementwise, CompareOpsAreExact) {
  TIDAL_REQUIRE_CUDA();
  const Compare ops[] = {Compare::eq, Compare::ne, Compare::lt, Compare::le, Compare::gt, Compare::ge};
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8})
    for (int64_t n : kSizes)
      for (Compare op : ops) {
        // Small integers (held exactly by every dtype), so that ties happen.
        const std::vector<double> av = uniform_cpu({n}, DType::i64, 0, 5, 41).to_vector<double>();
        const std::vector<double> bv = uniform_cpu({n}, DType::i64, 0, 5, 42).to_vector<double>();
        const Tensor x = from_vector(av, {n}, dt), y = from_vector(bv, {n}, dt);
        Tensor c = empty({n}, DType::u8), g = empty({n}, DType::u8, kGpu);
        cpu_kernels().compare(cpu_stream(), op, c, x, y);
        gpu_kernels().compare(gpu_stream(), op, g, to_gpu(x), to_gpu(y));
        expect_equal(c, g, label("compare", dt, n) + " op " + std::to_string(int(op)));
        cpu_kernels().compare_scalar(cpu_stream(), op, c, x, 2.0);
        gpu_kernels().compare_scalar(gpu_stream(), op, g, to_gpu(x), 2.0);
        expect_equal(c, g, label("compare_scalar", dt, n) + " op " + std::to_string(int(op)));
      }
}

TEST(CudaElementwise, WhereAndMaskedFillWithBroadcastMasks) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8}) {
    const Tensor a = uniform_cpu({7, 1000}, dt, 0, 100, 51), b = uniform_cpu({1000}, dt, 0, 100, 52);
    const Tensor cond = uniform_cpu({7, 1}, DType::u8, 0, 2, 53), mask = uniform_cpu({1000}, DType::u8, 0, 2, 54);
    expect_equal(where(cond, a, b), where(to_gpu(cond), to_gpu(a), to_gpu(b)), label("where", dt, a.numel()));
    expect_equal(masked_fill(a, mask, 7.3), masked_fill(to_gpu(a), to_gpu(mask), 7.3),
                 label("masked_fill", dt, a.numel()));
    expect_equal(masked_fill(a.t(), cond.t(), -2.0).contiguous(), masked_fill(to_gpu(a).t(), to_gpu(cond).t(), -2.0),
                 label("masked_fill transposed", dt, a.numel()));
  }
}

TEST(CudaElementwise, CopyBetweenEveryPairOfDtypes) {
  TIDAL_REQUIRE_CUDA();
  const DType all[] = {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u8};
  for (DType src : all)
    for (DType dst : all)
      for (int64_t n : {int64_t(1), int64_t(7), int64_t(4097)}) {
        const Tensor x = uniform_cpu({n}, src, 0, 250, 61 + uint64_t(n));  // in every dtype's range
        Tensor c = empty({n}, dst), g = empty({n}, dst, kGpu);
        cpu_kernels().copy(cpu_stream(), c, x);
        gpu_kernels().copy(gpu_stream(), g, to_gpu(x));
        expect_equal(c, g, label("copy", src, n) + " to " + std::string(dtype_name(dst)));
      }
  // Negative floats truncate toward zero; f32 to bf16 rounds to nearest even.
  const Tensor x = uniform_cpu({4097}, DType::f32, -1000, 1000, 62);
  for (DType dst : {DType::i32, DType::i64, DType::bf16}) {
    Tensor c = empty({4097}, dst), g = empty({4097}, dst, kGpu);
    cpu_kernels().copy(cpu_stream(), c, x);
    gpu_kernels().copy(gpu_stream(), g, to_gpu(x));
    expect_equal(c, g, label("copy negative f32", dst, 4097));
  }
}

TEST(CudaElementwise, CopyOfTransposedAndBroadcastSources) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloating) {
    const Tensor x = uniform_cpu({65, 129}, dt, -3, 3, 71);
    const Tensor xg = to_gpu(x);
    expect_equal(x.t().contiguous(), xg.t().contiguous(), label("copy transposed", dt, x.numel()));
    Tensor c = empty({129, 65}, DType::f32), g = empty({129, 65}, DType::f32, kGpu);
    cpu_kernels().copy(cpu_stream(), c, x.t());
    gpu_kernels().copy(gpu_stream(), g, xg.t());
    expect_equal(c, g, label("copy transposed to f32", dt, x.numel()));
    const Tensor row = uniform_cpu({129}, dt, -3, 3, 72);
    Tensor cb = empty({65, 129}, dt), gb = empty({65, 129}, dt, kGpu);
    cpu_kernels().copy(cpu_stream(), cb, row);
    gpu_kernels().copy(gpu_stream(), gb, to_gpu(row));
    expect_equal(cb, gb, label("copy broadcast", dt, cb.numel()));
  }
}

TEST(CudaElementwise, AddInplaceWithAlphaAndBroadcast) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i64})
    for (int64_t n : kSizes) {
      const Tensor d = uniform_cpu({3, n}, dt, -50, 50, 81), s = uniform_cpu({n}, dt, -50, 50, 82);
      Tensor c = d.contiguous(), g = to_gpu(d);
      cpu_kernels().add_inplace(cpu_stream(), c, s, -2.0);
      gpu_kernels().add_inplace(gpu_stream(), g, to_gpu(s), -2.0);
      expect_matches(c, g, label("add_inplace", dt, n));
    }
}

}  // namespace
}  // namespace tidal
