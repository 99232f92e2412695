// The CUDA optimizer kernels against the CPU backend: the gradient norm's f64 partial sums (the CPU's
// chunks and order: equal to 1e-12 relative) and AdamW over several steps (f32 rounding), f32, bf16
// with its f32 master copy, and f64; the multi-tensor AdamW bit for bit each tensor's own update, and
// near the CPU's; add_rows_inplace bit for bit the CPU's. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

Tensor to_cuda(const Tensor& t) { return from_vector(t.to_vector<double>(), t.shape(), t.dtype(), Device::cuda(0)); }

std::vector<double> normal_values(int64_t n, double scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = normal(rng);
  return v;
}

TEST(CudaOptim, SumOfSquaresPartialsMatchCpu) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    for (int64_t n : {1, 7, 1000, 4097, 16384, 16385, 1000003}) {
      Tensor g = from_vector(normal_values(n, 3.0, uint32_t(n)), {n}, dt);
      const std::vector<double> a = optim::sum_of_squares_chunks(g), b = optim::sum_of_squares_chunks(to_cuda(g));
      ASSERT_EQ(a.size(), b.size());
      for (size_t c = 0; c < a.size(); ++c) EXPECT_NEAR(a[c], b[c], 1e-12 * std::abs(a[c])) << n << " chunk " << c;
    }
  }
}

// add_rows_inplace (one launch a table of rows; 70 rows take two) against the CPU's: both are each row's add in
// turn, rounded after every add, so the sums are equal bit for bit, in f32, bf16 and f64.
TEST(CudaOptim, AddRowsInplaceMatchesCpuBitForBit) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f64})
    for (int64_t rows : {1, 5, 70}) {
      const int64_t n = 4099;
      Tensor dst = from_vector(normal_values(n, 1.0, 3), {n}, dt);
      std::vector<Tensor> cpu_rows, cuda_rows;
      for (int64_t r = 0; r < rows; ++r) {
        cpu_rows.push_back(from_vector(normal_values(n, 1e3 / double(r + 1), uint32_t(10 + r)), {n}, dt));
        cuda_rows.push_back(to_cuda(cpu_rows.back()));
      }
      Tensor dst_cuda = to_cuda(dst);
      std::vector<const Tensor*> a, b;
      for (int64_t r = 0; r < rows; ++r) {
        a.push_back(&cpu_rows[size_t(r)]);
        b.push_back(&cuda_rows[size_t(r)]);
      }
      device_kernels(Device::cpu()).add_rows_inplace(current_stream(Device::cpu()), dst, a);
      device_kernels(Device::cuda(0)).add_rows_inplace(current_stream(Device::cuda(0)), dst_cuda, b);
      const Tensor back = dst_cuda.to(Device::cpu());
      EXPECT_EQ(std::memcmp(back.raw_data(), dst.raw_data(), size_t(dst.nbytes())), 0) << dt << " " << rows;
    }
}

// |cpu - cuda| <= rel * max(floor, |cpu|). The floor is the size of the terms a value is the sum of: the
// moments are sums of (1 - beta) * g with |g| ~ 0.5 that can cancel to near 0, and a param is p ~ 1
// minus an lr-sized step, so a rounding in either side is relative to 0.05, resp. 1, not to the result.
void expect_close(const Tensor& cpu, const Tensor& cuda, double rel, const char* what, double floor = 0.05) {
  const std::vector<double> a = cpu.to_vector<double>(), b = cuda.to_vector<double>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], rel * std::max(floor, std::abs(a[i]))) << what << " at " << i;
}

// Five steps of the same AdamW update on each device, from the same state.
void run_adamw(DType dt, int64_t n, double rel) {
  const DType st = dt == DType::f64 ? DType::f64 : DType::f32;
  Tensor p = from_vector(normal_values(n, 1.0, 1), {n}, dt);
  Tensor m = zeros({n}, st), v = zeros({n}, st);
  Tensor w = dt == DType::bf16 ? from_vector(p.to_vector<double>(), {n}, DType::f32) : Tensor();
  Tensor pc = to_cuda(p), mc = to_cuda(m), vc = to_cuda(v), wc = w.defined() ? to_cuda(w) : Tensor();
  Kernels& cpu = device_kernels(Device::cpu());
  Kernels& cuda = device_kernels(Device::cuda(0));
  AdamWArgs a;
  a.lr = 1e-2;
  a.weight_decay = 0.1;
  for (int step = 1; step <= 5; ++step) {
    a.step = step;
    Tensor g = from_vector(normal_values(n, 0.5, uint32_t(100 + step)), {n}, dt);
    Tensor gc = to_cuda(g);
    cpu.adamw_step(current_stream(Device::cpu()), p, g, m, v, w, a);
    cuda.adamw_step(current_stream(Device::cuda(0)), pc, gc, mc, vc, wc, a);
  }
  expect_close(m, mc, rel, "exp_avg");
  expect_close(v, vc, rel, "exp_avg_sq");
  if (w.defined()) expect_close(w, wc, rel, "master", 1.0);
  expect_close(p, pc, dt == DType::bf16 ? 1e-2 : rel, "param", 1.0);
}

TEST(CudaOptim, AdamWMatchesCpuOverSteps) {
  TIDAL_REQUIRE_CUDA();
  for (int64_t n : {1, 7, 1000, 4097}) {
    run_adamw(DType::f32, n, 1e-5);
    run_adamw(DType::bf16, n, 1e-5);
    run_adamw(DType::f64, n, 1e-12);
  }
}

// --- the multi-tensor AdamW (Kernels::adamw_multi_step)

// How one tensor is updated: its param and grad dtypes (a bf16 param with an f32 grad is --bf16's
// main-grad form: the f32 master updated, then the bf16 param written from it).
struct Form {
  DType param, grad;
};
const Form kForms[] = {
    {DType::f32, DType::f32}, {DType::bf16, DType::bf16}, {DType::f64, DType::f64}, {DType::bf16, DType::f32}};

// One tensor's operands on one device: every entry of AdamWTensors, owned.
struct Operands {
  Tensor param, grad, exp_avg, exp_avg_sq, master, bf16_param;
  AdamWArgs args;
};

Operands make_operands(Form form, int64_t n, const AdamWArgs& args, uint32_t seed, Device device) {
  const DType state = form.param == DType::f64 ? DType::f64 : DType::f32;
  Operands o;
  const Tensor p = from_vector(normal_values(n, 1.0, seed), {n}, form.param, device);  // (n)
  o.grad = from_vector(normal_values(n, 0.5, seed + 1), {n}, form.grad, device);       // (n)
  o.exp_avg = from_vector(normal_values(n, 0.1, seed + 2), {n}, state, device);        // (n)
  std::vector<double> v = normal_values(n, 0.1, seed + 3);
  for (double& x : v) x *= x;
  o.exp_avg_sq = from_vector(v, {n}, state, device);  // (n)
  if (form.param == DType::bf16 && form.grad == DType::f32) {
    o.param = p.to(DType::f32);  // (n, f32): the master the update runs on
    o.bf16_param = p;            // (n, bf16): written from it
  } else {
    o.param = p;
    if (form.param == DType::bf16) o.master = p.to(DType::f32);  // (n, f32)
  }
  o.args = args;
  return o;
}

std::vector<AdamWTensors> entries(const std::vector<Operands>& ops) {
  std::vector<AdamWTensors> out;
  for (const Operands& o : ops)
    out.push_back({&o.param, &o.grad, &o.exp_avg, &o.exp_avg_sq, &o.master,
                   o.bf16_param.defined() ? &o.bf16_param : nullptr, o.args});
  return out;
}

// Each tensor's own update: adamw_step, and the copy for the main-grad form.
void per_tensor(Kernels& k, Stream& stream, const std::vector<Operands>& ops) {
  for (const Operands& o : ops) {
    k.adamw_step(stream, o.param, o.grad, o.exp_avg, o.exp_avg_sq, o.master, o.args);
    if (o.bf16_param.defined()) k.copy(stream, o.bf16_param, o.param);
  }
}

std::vector<const Tensor*> updated(const Operands& o) {
  return {&o.param, &o.exp_avg, &o.exp_avg_sq, &o.master, &o.bf16_param};
}

// The tensors of a and b, read back to the host, hold the same bytes.
void expect_same_bytes(const std::vector<Operands>& a, const std::vector<Operands>& b, int step) {
  ASSERT_EQ(a.size(), b.size());
  const char* names[] = {"param", "exp_avg", "exp_avg_sq", "master", "bf16_param"};
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<const Tensor*> x = updated(a[i]), y = updated(b[i]);
    for (size_t k = 0; k < x.size(); ++k) {
      if (!x[k]->defined()) continue;
      const Tensor hx = x[k]->to(Device::cpu()), hy = y[k]->to(Device::cpu());
      const std::vector<double> vx = hx.to_vector<double>(), vy = hy.to_vector<double>();
      size_t first = 0;
      while (first < vx.size() && std::memcmp(&vx[first], &vy[first], sizeof(double)) == 0) ++first;
      ASSERT_EQ(std::memcmp(hx.raw_data(), hy.raw_data(), size_t(hx.nbytes())), 0)
          << "step " << step << ", tensor " << i << " (" << hx.numel() << " " << hx.dtype() << "): " << names[k]
          << " differs first at " << first << ": multi " << vx[std::min(first, vx.size() - 1)] << ", per tensor "
          << vy[std::min(first, vy.size() - 1)];
    }
  }
}

// The tensors of every form and of sizes around the chunk (65536) and vector widths, more of them than
// one launch's table holds (30), one spanning two tables (more than 320 chunks), their step counts and
// weight decays differing, and two with other betas (a table holds one set).
std::vector<Operands> many_tensors(Device device, bool huge) {
  std::vector<Operands> ops;
  uint32_t seed = 1;
  for (const Form& form : kForms)
    for (int64_t n : {1, 3, 7, 8, 1000, 4097, 65535, 65536, 65537, 200003}) {
      AdamWArgs a;
      a.lr = 1e-2;
      a.weight_decay = seed % 3 == 0 ? 0.0 : 0.1;
      a.step = 1 + int64_t(seed % 5);
      if (n == 4097) a.beta2 = 0.95;
      ops.push_back(make_operands(form, n, a, seed, device));
      seed += 10;
    }
  if (huge) {
    AdamWArgs a;
    a.lr = 3e-3;
    a.weight_decay = 0.1;
    a.step = 2;
    ops.push_back(make_operands(kForms[0], 320 * int64_t(65536) + 12345, a, seed, device));
  }
  return ops;
}

TEST(CudaOptim, MultiTensorAdamWIsPerTensorBitForBit) {
  TIDAL_REQUIRE_CUDA();
  Kernels& cuda = device_kernels(Device::cuda(0));
  Stream& stream = current_stream(Device::cuda(0));
  std::vector<Operands> multi = many_tensors(Device::cuda(0), true), single;
  for (const Operands& o : multi) {
    auto copy = [](const Tensor& t) { return t.defined() ? t.clone() : Tensor(); };
    single.push_back(
        {copy(o.param), copy(o.grad), copy(o.exp_avg), copy(o.exp_avg_sq), copy(o.master), copy(o.bf16_param), o.args});
  }
  for (int step = 1; step <= 3; ++step) {
    cuda.adamw_multi_step(stream, entries(multi));
    per_tensor(cuda, stream, single);
    expect_same_bytes(multi, single, step);
    for (Operands& o : multi) ++o.args.step;
    for (Operands& o : single) ++o.args.step;
  }
}

TEST(CudaOptim, MultiTensorAdamWMatchesCpu) {
  TIDAL_REQUIRE_CUDA();
  Kernels& cuda = device_kernels(Device::cuda(0));
  Kernels& cpu = device_kernels(Device::cpu());
  std::vector<Operands> gpu = many_tensors(Device::cuda(0), false), host = many_tensors(Device::cpu(), false);
  for (int step = 1; step <= 3; ++step) {
    cuda.adamw_multi_step(current_stream(Device::cuda(0)), entries(gpu));
    cpu.adamw_multi_step(current_stream(Device::cpu()), entries(host));
  }
  for (size_t i = 0; i < gpu.size(); ++i) {
    const bool f64 = host[i].exp_avg.dtype() == DType::f64;
    const double rel = f64 ? 1e-12 : 1e-5;
    SCOPED_TRACE(::testing::Message() << "tensor " << i << " of " << host[i].param.numel() << " "
                                      << host[i].param.dtype());
    expect_close(host[i].exp_avg, gpu[i].exp_avg, rel, "exp_avg");
    expect_close(host[i].exp_avg_sq, gpu[i].exp_avg_sq, rel, "exp_avg_sq");
    if (host[i].master.defined()) expect_close(host[i].master, gpu[i].master, rel, "master", 1.0);
    if (host[i].bf16_param.defined()) expect_close(host[i].bf16_param, gpu[i].bf16_param, 1e-2, "bf16 param");
    expect_close(host[i].param, gpu[i].param, host[i].param.dtype() == DType::bf16 ? 1e-2 : rel, "param", 1.0);
  }
}

}  // namespace
}  // namespace tidal
