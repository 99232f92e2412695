// The composite kernels (seam/kernels.h) on the CPU backend: adamw_multi_step (the CPU's: every tensor's blocks in
// one parallel loop, the bf16 copy in the same pass) is bit for bit each tensor's adamw_step (and, for an f32 master
// with a bf16 copy, the copy after it); sum_of_squares_many (the CPU's: every chunk of every tensor in one loop) is
// each tensor's sum_of_squares; scale_many (the CPU's, one loop) each tensor's unary mul_scalar; add_rows_inplace
// (the CPU's) each row's add_inplace in turn; matmul_bias (the default) is the bias copied into out, then the
// product with beta 1.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tidal/seam/kernels.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

std::vector<double> normal_values(int64_t n, double scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = normal(rng);
  return v;
}

// How one tensor is updated: its param and grad dtypes (a bf16 param with an f32 grad is --bf16's
// main-grad form: an f32 master updated, then a bf16 copy written).
struct Form {
  DType param, grad;
};

// One tensor's operands: every entry of AdamWTensors, owned.
struct Operands {
  Tensor param, grad, exp_avg, exp_avg_sq, master, bf16_param;
  AdamWArgs args;
};

Operands make_operands(Form form, int64_t n, int64_t step, double decay, uint32_t seed) {
  const bool main_grad = form.param == DType::bf16 && form.grad == DType::f32;
  const DType state = form.param == DType::f64 ? DType::f64 : DType::f32;
  Operands o;
  const Tensor p = from_vector(normal_values(n, 1.0, seed), {n}, form.param);  // (n)
  o.grad = from_vector(normal_values(n, 0.5, seed + 1), {n}, form.grad);       // (n)
  o.exp_avg = from_vector(normal_values(n, 0.1, seed + 2), {n}, state);        // (n)
  std::vector<double> v = normal_values(n, 0.1, seed + 3);
  for (double& x : v) x *= x;                 // a second moment is not negative
  o.exp_avg_sq = from_vector(v, {n}, state);  // (n)
  if (main_grad) {
    o.param = p.to(DType::f32);  // the master (n, f32) that adamw_step updates
    o.bf16_param = p;            // (n, bf16)
  } else {
    o.param = p;
    if (form.param == DType::bf16) o.master = p.to(DType::f32);  // (n, f32)
  }
  o.args.lr = 1e-2;
  o.args.weight_decay = decay;
  o.args.step = step;
  return o;
}

std::vector<AdamWTensors> entries(const std::vector<Operands>& ops) {
  std::vector<AdamWTensors> out;
  for (const Operands& o : ops)
    out.push_back({&o.param, &o.grad, &o.exp_avg, &o.exp_avg_sq, &o.master,
                   o.bf16_param.defined() ? &o.bf16_param : nullptr, o.args});
  return out;
}

// Both sets of operands updated, a and b, hold the same bits.
void expect_same_bits(const std::vector<Operands>& a, const std::vector<Operands>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor* x[] = {&a[i].param, &a[i].exp_avg, &a[i].exp_avg_sq, &a[i].master, &a[i].bf16_param};
    const Tensor* y[] = {&b[i].param, &b[i].exp_avg, &b[i].exp_avg_sq, &b[i].master, &b[i].bf16_param};
    const char* names[] = {"param", "exp_avg", "exp_avg_sq", "master", "bf16_param"};
    for (int k = 0; k < 5; ++k) {
      ASSERT_EQ(x[k]->defined(), y[k]->defined());
      if (!x[k]->defined()) continue;
      EXPECT_EQ(std::memcmp(x[k]->raw_data(), y[k]->raw_data(), size_t(x[k]->nbytes())), 0)
          << "tensor " << i << " (" << x[k]->numel() << " " << x[k]->dtype() << "): " << names[k] << " differs";
    }
  }
}

TEST(CompositeKernels, AdamWMultiStepIsEachTensorsAdamWStep) {
  Kernels& cpu = device_kernels(Device::cpu());
  Stream& stream = current_stream(Device::cpu());
  const Form forms[] = {
      {DType::f32, DType::f32}, {DType::bf16, DType::bf16}, {DType::f64, DType::f64}, {DType::bf16, DType::f32}};
  std::vector<Operands> multi, single;
  uint32_t seed = 1;
  for (const Form& form : forms)
    for (int64_t n : {1, 7, 1000, 4097, 70000}) {  // 70000: three of the CPU's blocks
      const int64_t step = 1 + int64_t(seed % 4);  // the step counts differ between tensors
      const double decay = seed % 2 ? 0.1 : 0.0;   // and so does the weight decay
      multi.push_back(make_operands(form, n, step, decay, seed));
      single.push_back(make_operands(form, n, step, decay, seed));
      seed += 10;
    }
  const std::vector<Operands> before = [&] {
    std::vector<Operands> v;
    for (const Operands& o : single) v.push_back({o.param.clone(), {}, {}, {}, {}, {}, {}});
    return v;
  }();
  for (int s = 0; s < 3; ++s) {
    cpu.adamw_multi_step(stream, entries(multi));
    for (const Operands& o : single) {
      cpu.adamw_step(stream, o.param, o.grad, o.exp_avg, o.exp_avg_sq, o.master, o.args);
      if (o.bf16_param.defined()) cpu.copy(stream, o.bf16_param, o.param);
    }
    expect_same_bits(multi, single);
  }
  // The comparison is of updated tensors: every param moved.
  for (size_t i = 0; i < single.size(); ++i)
    EXPECT_NE(std::memcmp(before[i].param.raw_data(), single[i].param.raw_data(), size_t(single[i].param.nbytes())), 0)
        << "tensor " << i << " was not updated";
}

TEST(CompositeKernels, SumOfSquaresManyIsEachTensorsSumOfSquares) {
  Kernels& cpu = device_kernels(Device::cpu());
  Stream& stream = current_stream(Device::cpu());
  const int64_t chunk = 1 << 14;
  std::vector<Tensor> xs;
  uint32_t seed = 5;
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (int64_t n : {int64_t(1), chunk, chunk + 1, int64_t(100000)})
      xs.push_back(from_vector(normal_values(n, 1.0, seed++), {n}, dt));
  std::vector<std::vector<double>> many(xs.size()), one(xs.size());
  std::vector<const Tensor*> ptrs;
  std::vector<double*> outs;
  for (size_t i = 0; i < xs.size(); ++i) {
    many[i].assign(size_t((xs[i].numel() + chunk - 1) / chunk), -1.0);
    one[i].assign(many[i].size(), -2.0);
    ptrs.push_back(&xs[i]);
    outs.push_back(many[i].data());
  }
  cpu.sum_of_squares_many(stream, ptrs, chunk, outs);
  for (size_t i = 0; i < xs.size(); ++i) {
    cpu.sum_of_squares(stream, xs[i], chunk, one[i].data());
    EXPECT_EQ(std::memcmp(many[i].data(), one[i].data(), one[i].size() * sizeof(double)), 0)
        << xs[i].dtype() << " " << xs[i].numel();
    EXPECT_GT(many[i][0], 0.0);  // written
  }
}

TEST(CompositeKernels, ScaleManyIsEachTensorsMulScalar) {
  Kernels& cpu = device_kernels(Device::cpu());
  Stream& stream = current_stream(Device::cpu());
  std::vector<Tensor> many, one;
  uint32_t seed = 40;
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (int64_t n : {int64_t(1), int64_t(33), int64_t(70000)}) {
      many.push_back(from_vector(normal_values(n, 1.0, seed), {n}, dt));
      one.push_back(from_vector(normal_values(n, 1.0, seed++), {n}, dt));
    }
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : many) ptrs.push_back(&t);
  const double coef = 0.37123456789;
  cpu.scale_many(stream, ptrs, coef);
  for (size_t i = 0; i < one.size(); ++i) {
    const Tensor before = one[i].clone();
    cpu.unary(stream, Unary::mul_scalar, one[i], one[i], coef);
    EXPECT_EQ(std::memcmp(many[i].raw_data(), one[i].raw_data(), size_t(one[i].nbytes())), 0)
        << one[i].dtype() << " " << one[i].numel();
    EXPECT_NE(std::memcmp(before.raw_data(), one[i].raw_data(), size_t(one[i].nbytes())), 0);  // scaled
  }
}

// add_rows_inplace (the CPU's: column blocks in parallel, the rows in order) is each row's add_inplace in turn, bit
// for bit, in f32, bf16 (rounded after every add) and f64, on sizes within one block and across several.
TEST(CompositeKernels, AddRowsInplaceIsEachRowsAddInTurn) {
  Kernels& cpu = device_kernels(Device::cpu());
  Stream& stream = current_stream(Device::cpu());
  uint32_t seed = 70;
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (int64_t n : {int64_t(1), int64_t(33), int64_t(70000)}) {
      Tensor dst = from_vector(normal_values(n, 1.0, seed++), {n}, dt);
      Tensor want = dst.clone();
      // 5 rows of very different sizes: the order of the adds shows in the rounding.
      Tensor block = from_vector(normal_values(5 * (n + 3), 1e3, seed++), {5, n + 3}, dt);
      std::vector<Tensor> rows;
      std::vector<const Tensor*> ptrs;
      for (int64_t r = 0; r < 5; ++r) rows.push_back(block.select(0, r).narrow(0, 2, n));
      for (const Tensor& r : rows) ptrs.push_back(&r);
      cpu.add_rows_inplace(stream, dst, ptrs);
      for (const Tensor& r : rows) cpu.add_inplace(stream, want, r, 1.0);
      EXPECT_EQ(std::memcmp(dst.raw_data(), want.raw_data(), size_t(want.nbytes())), 0) << dt << " " << n;
      // Another order gives other bits somewhere (so the comparison above sees the order).
      Tensor reversed = from_vector(normal_values(n, 1.0, seed - 2), {n}, dt);
      for (size_t r = rows.size(); r-- > 0;) cpu.add_inplace(stream, reversed, rows[r], 1.0);
      if (n == 70000) {
        EXPECT_NE(std::memcmp(reversed.raw_data(), want.raw_data(), size_t(want.nbytes())), 0) << dt;
      }
    }
}

TEST(CompositeKernels, DefaultMatmulBiasIsCopyThenMatmul) {
  Kernels& cpu = device_kernels(Device::cpu());
  Stream& stream = current_stream(Device::cpu());
  struct Case {
    Shape a, b;
  };
  const Case cases[] = {{{7, 5}, {5, 3}}, {{1, 1}, {1, 1}}, {{2, 9, 33}, {33, 17}}, {{4, 130}, {130, 1}}};
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (const Case& c : cases) {
      const Tensor a = from_vector(normal_values(c.a.numel(), 1.0, 1), c.a, dt);               // (..., m, k)
      const Tensor w = from_vector(normal_values(c.b.numel(), 1.0, 2), {c.b[1], c.b[0]}, dt);  // (n, k)
      const Tensor bias = from_vector(normal_values(c.b[1], 1.0, 3), {c.b[1]}, dt);            // (n)
      Shape out_shape = c.a;
      out_shape[out_shape.size() - 1] = c.b[1];
      const Tensor fused = zeros(out_shape, dt), plain = zeros(out_shape, dt);  // (..., m, n)
      cpu.matmul_bias(stream, fused, a, w.t(), bias);
      cpu.copy(stream, plain, bias);
      cpu.matmul(stream, plain, a, w.t(), 1.0, 1.0);
      EXPECT_EQ(std::memcmp(fused.raw_data(), plain.raw_data(), size_t(plain.nbytes())), 0)
          << dt << " " << c.a << " @ " << c.b;
      EXPECT_NE(plain.to_vector<double>()[0], 0.0);  // written
    }
}

}  // namespace
}  // namespace tidal
