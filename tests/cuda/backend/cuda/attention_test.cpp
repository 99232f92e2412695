// The CUDA flash attention kernels against the CPU backend's on the same inputs: cuDNN's fused
// kernels where they apply (bf16; every such case also checks that cuDNN is what ran), the eager path
// (cuBLASLt products and a row softmax) everywhere else and, forced, on the fused path's cases too:
// causal (bottom-right) and not, GQA, odd T, S != T, rows that see no key, Dv != D, odd strides, tidal's
// Philox dropout, sliding windows, DeepSeek-V4's compressed keys and log-sum-exp gradient, f32 / bf16 / f64; forward
// (out, lse) and backward (dq, dk, dv). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tidal/backend/cuda/attention_eager.h"
#include "tidal/backend/cuda/cudnn_sdpa.h"
#include "tidal/seam/kernel_args.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

const Device kGpu = Device::cuda(0);

struct Case {
  int64_t b, hq, hkv, t, s, d, dv;
  bool causal;
  DType dtype;
  double dropout = 0;
  bool odd_strides = false;  // q with no unit stride, out column-major per head
  bool eager = false;        // the GPU side runs the eager path even where cuDNN's would
  int64_t window = 0;        // FlashArgs' sliding window
  int64_t diagonal = 0;      // and diagonal shift (a context-parallel block)
  int64_t key_rate = 0;      // FlashArgs' compressed keys (DeepSeek-V4's heavily compressed entries)
  bool lse_grad = false;     // the backward takes a log-sum-exp gradient (FlashArgs::lse_grad)
};

// A (B, H, L, D) view of a fresh tensor with the same values on the CPU and on the GPU. `base` is
// the contiguous storage (read back to compare); the view is (B, L, H, D) transposed, tidal's
// usual layout, or with `odd` q's (B, H, L, D, 2) sliced.
struct Operand {
  Tensor base_cpu, base_gpu, cpu, gpu;
};
Operand make(int64_t b, int64_t h, int64_t l, int64_t d, DType dtype, unsigned seed, int layout) {
  Shape base_shape = layout == 0 ? Shape{b, l, h, d} : layout == 1 ? Shape{b, h, l, d, 2} : Shape{b, h, d, l};
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> v(static_cast<size_t>(base_shape.numel()));
  for (double& x : v) x = u(gen);
  Operand o{from_vector(v, base_shape, dtype), from_vector(v, base_shape, dtype, kGpu), {}, {}};
  auto view = [&](const Tensor& t) {
    if (layout == 0) return t.transpose(1, 2);
    if (layout == 1) return t.select(4, 0);
    return t.transpose(2, 3);
  };
  o.cpu = view(o.base_cpu);
  o.gpu = view(o.base_gpu);
  return o;
}

DType acc_of(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

double tolerance(DType t) { return t == DType::f64 ? 1e-10 : t == DType::bf16 ? 2e-2 : 1e-4; }

// |gpu - cpu| <= tol * max(1, max |cpu|), infinities equal.
void expect_close(const Tensor& gpu, const Tensor& cpu, double tol, const char* what) {
  const std::vector<double> g = gpu.to_vector<double>(), c = cpu.to_vector<double>();
  ASSERT_EQ(g.size(), c.size()) << what;
  double scale = 1;
  for (double x : c)
    if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isinf(c[i])) {
      ASSERT_EQ(g[i], c[i]) << what << " element " << i;
      continue;
    }
    ASSERT_NEAR(g[i], c[i], tol * scale) << what << " element " << i;
  }
}

// Runs the forward and the backward on both backends and compares every output.
void check(const Case& c) {
  SCOPED_TRACE(::testing::Message() << "B " << c.b << " Hq " << c.hq << " Hkv " << c.hkv << " T " << c.t << " S " << c.s
                                    << " D " << c.d << " Dv " << c.dv << " causal " << c.causal << " " << c.dtype
                                    << " p " << c.dropout << " window " << c.window << " diagonal " << c.diagonal
                                    << " key_rate " << c.key_rate << " lse_grad " << c.lse_grad);
  FlashArgs cfg;
  cfg.scale = 1.0 / std::sqrt(double(std::max<int64_t>(c.d, 1)));
  cfg.causal = c.causal;
  cfg.window = c.window;
  cfg.diagonal = c.diagonal;
  cfg.dropout_p = c.dropout;
  cfg.seed = 1234;
  cfg.rng_start = 77;
  cfg.key_rate = c.key_rate;
  const DType acc = acc_of(c.dtype);
  // The log-sum-exp's gradient (B, Hq, T), the same values on both sides: the backward's FlashArgs point at its
  // side's copy (the forward's do not, as in ops/attention.cpp).
  Tensor dlse[2];
  FlashArgs bwd[2] = {cfg, cfg};
  if (c.lse_grad) {
    std::mt19937 gen(9);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<double> values(static_cast<size_t>(c.b * c.hq * c.t));
    for (double& x : values) x = u(gen);
    dlse[0] = from_vector(values, {c.b, c.hq, c.t}, acc);
    dlse[1] = from_vector(values, {c.b, c.hq, c.t}, acc, kGpu);
    for (int side = 0; side < 2; ++side) bwd[side].lse_grad = dlse[side].raw_data();
  }
  const Operand q = make(c.b, c.hq, c.t, c.d, c.dtype, 1, c.odd_strides ? 1 : 0);
  const Operand k = make(c.b, c.hkv, c.s, c.d, c.dtype, 2, 0), v = make(c.b, c.hkv, c.s, c.dv, c.dtype, 3, 0);
  const Operand dout = make(c.b, c.hq, c.t, c.dv, c.dtype, 4, 0);
  Operand out = make(c.b, c.hq, c.t, c.dv, c.dtype, 5, c.odd_strides ? 2 : 0);  // overwritten
  // dk column-major per head with odd strides (cuDNN cannot write that: the eager path's case).
  Operand dq = make(c.b, c.hq, c.t, c.d, c.dtype, 6, 0),
          dk = make(c.b, c.hkv, c.s, c.d, c.dtype, 7, c.odd_strides ? 2 : 0);
  Operand dv = make(c.b, c.hkv, c.s, c.dv, c.dtype, 8, 0);
  Tensor lse[2];
  const bool fused = !c.eager && cuda::sdpa_refusal(cfg, q.gpu, k.gpu, v.gpu).empty();
  const bool fused_backward = !c.eager && cuda::sdpa_refusal(bwd[1], q.gpu, k.gpu, v.gpu).empty();
  for (int side = 0; side < 2; ++side) {
    const Device dev = side == 0 ? Device::cpu() : kGpu;
    Kernels& kern = device_kernels(dev);
    auto pick = [&](const Operand& o) { return side == 0 ? o.cpu : o.gpu; };
    lse[side] = empty({c.b, c.hq, c.t}, acc, dev);
    if (side == 1 && c.eager) {
      Tensor ws = empty({cuda::eager_forward_workspace(q.gpu, k.gpu, v.gpu)}, acc, dev);
      cuda::eager_attention_forward(current_stream(dev), cfg, out.gpu, lse[1], q.gpu, k.gpu, v.gpu, ws);
      Tensor wsb = empty({cuda::eager_backward_workspace(q.gpu, k.gpu, v.gpu)}, acc, dev);
      cuda::eager_attention_backward(current_stream(dev), bwd[1], dq.gpu, dk.gpu, dv.gpu, dout.gpu, q.gpu, k.gpu, v.gpu,
                                     out.gpu, lse[1], wsb);
      continue;
    }
    Tensor ws = empty({kern.flash_forward_workspace(cfg, pick(q), pick(k), pick(v))}, acc, dev);
    kern.flash_attention_forward(current_stream(dev), cfg, pick(out), lse[side], pick(q), pick(k), pick(v), ws);
    if (side == 1 && fused) {
      EXPECT_EQ(cuda::sdpa_last_path(), "cudnn") << "forward";
    }
    // Sized as the op sizes it: before the log-sum-exp's gradient is known (a bf16 call cuDNN would take then runs
    // the eager path in a temporary workspace).
    Tensor wsb = empty({kern.flash_backward_workspace(cfg, pick(dq), pick(q), pick(k), pick(v))}, acc, dev);
    kern.flash_attention_backward(current_stream(dev), bwd[side], pick(dq), pick(dk), pick(dv), pick(dout), pick(q),
                                  pick(k), pick(v), pick(out), lse[side], wsb);
    if (side == 1 && fused_backward) {
      EXPECT_EQ(cuda::sdpa_last_path(), "cudnn") << "backward";
    }
  }
  const double tol = tolerance(c.dtype);
  expect_close(out.base_gpu, out.base_cpu, tol, "out");
  expect_close(lse[1], lse[0], tol, "lse");
  expect_close(dq.base_gpu, dq.base_cpu, tol, "dq");
  expect_close(dk.base_gpu, dk.base_cpu, tol, "dk");
  expect_close(dv.base_gpu, dv.base_cpu, tol, "dv");
}

TEST(CudaFlashAttention, CausalGqaAndOddSizes) {
  TIDAL_REQUIRE_CUDA();
  check({2, 4, 2, 37, 37, 32, 32, true, DType::f32});
  check({1, 3, 1, 9, 20, 16, 24, true, DType::f32});   // S > T, GQA 3, Dv != D
  check({1, 2, 2, 9, 5, 16, 16, true, DType::f32});    // T > S: the first rows see no key
  check({2, 2, 1, 1, 100, 64, 64, true, DType::f32});  // one query row (decoding)
  check({1, 1, 1, 1, 1, 8, 8, true, DType::f32});
  check({2, 2, 2, 65, 130, 64, 64, false, DType::f32});
}

TEST(CudaFlashAttention, Bf16AndF64) {
  TIDAL_REQUIRE_CUDA();
  check({2, 4, 2, 37, 37, 32, 32, true, DType::bf16});
  check({2, 2, 2, 65, 130, 64, 64, false, DType::bf16});
  check({1, 4, 1, 300, 300, 128, 128, true, DType::bf16});
  check({1, 3, 1, 9, 20, 16, 24, true, DType::f64});
  check({1, 2, 2, 9, 5, 16, 16, true, DType::f64});
}

TEST(CudaFlashAttention, OddStridesAndDropout) {
  TIDAL_REQUIRE_CUDA();
  Case odd{2, 4, 2, 17, 23, 16, 8, true, DType::f32};
  odd.odd_strides = true;
  check(odd);
  odd.dtype = DType::bf16;
  check(odd);
  Case drop{2, 4, 2, 33, 33, 16, 16, true, DType::f32};
  drop.dropout = 0.25;  // the same Philox mask as the CPU: f32 agreement
  check(drop);
  drop.causal = false;
  drop.dtype = DType::f64;
  check(drop);
}

// Sliding windows: the eager path masks them as the CPU does (W = 1, W inside a row chunk, T != S, rows
// that see no key, dropout, GQA, bf16 and f64, the shifted diagonal of a ring block); cuDNN refuses a
// window shorter than the keys and runs one as long (plain causal attention).
TEST(CudaFlashAttention, SlidingWindowMatchesTheCpu) {
  TIDAL_REQUIRE_CUDA();
  auto windowed = [](Case c, int64_t window, int64_t diagonal = 0) {
    c.window = window;
    c.diagonal = diagonal;
    return c;
  };
  check(windowed({2, 4, 2, 37, 37, 32, 32, true, DType::f32}, 5));
  check(windowed({2, 4, 2, 37, 37, 32, 32, true, DType::f32}, 1));
  check(windowed({1, 3, 1, 9, 20, 16, 24, true, DType::f32}, 4));       // S > T
  check(windowed({1, 2, 2, 9, 5, 16, 16, true, DType::f64}, 2));        // T > S: the first rows see no key
  check(windowed({1, 2, 1, 12, 12, 16, 16, true, DType::f32}, 6, 10));  // keys 10 positions before the rows
  check(windowed({1, 2, 1, 12, 12, 16, 16, true, DType::f32}, 6, 20));  // the block wholly outside
  Case drop = windowed({2, 4, 2, 33, 33, 16, 16, true, DType::f32}, 7);
  drop.dropout = 0.25;
  check(drop);
  const Case fused = windowed({1, 4, 1, 300, 300, 128, 128, true, DType::bf16}, 64);
  check(fused);
  check(windowed(fused, 300));  // as long as the keys: cuDNN's (checked inside check)
  const Operand q = make(1, 4, 300, 128, DType::bf16, 1, 0), k = make(1, 1, 300, 128, DType::bf16, 2, 0);
  FlashArgs cfg;
  cfg.window = 64;
  EXPECT_NE(cuda::sdpa_refusal(cfg, q.gpu, k.gpu, k.gpu).find("sliding window"), std::string::npos);
  cfg.window = 300;
  EXPECT_EQ(cuda::sdpa_refusal(cfg, q.gpu, k.gpu, k.gpu), "");
}

// DeepSeek-V4's attention (ops/attention.h attention_with_lse): compressed keys (row i sees keys [0, (i + 1) / R):
// the first R - 1 rows none, lse +inf) and a log-sum-exp gradient in the backward's delta, on the eager path, with
// GQA, T not a multiple of R, more keys than any row sees, a window, f32 / bf16 / f64; cuDNN refuses both, also
// where it takes the same call without them.
TEST(CudaFlashAttention, CompressedKeysAndALogSumExpGradientMatchTheCpu) {
  TIDAL_REQUIRE_CUDA();
  auto with = [](Case c, int64_t key_rate, bool lse_grad) {
    c.key_rate = key_rate;
    c.lse_grad = lse_grad;
    return c;
  };
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    check(with({2, 4, 1, 24, 6, 16, 16, true, dt}, 4, false));
    check(with({2, 4, 1, 24, 6, 16, 16, true, dt}, 4, true));
    check(with({1, 4, 2, 21, 9, 32, 24, true, dt}, 3, true));
    check(with({1, 2, 1, 16, 10, 16, 16, true, dt}, 4, true));
    check(with({2, 4, 2, 37, 37, 32, 32, true, dt}, 0, true));
    Case window = with({2, 4, 1, 33, 33, 16, 16, true, dt}, 0, true);
    window.window = 5;
    check(window);
    check(with({2, 2, 2, 20, 30, 16, 16, false, dt}, 0, true));  // not causal
  }
  const Case fused_shape{1, 4, 4, 128, 128, 64, 64, true, DType::bf16};
  check(with(fused_shape, 1, false));  // key_rate 1 is causal attention, through the eager path
  check(with(fused_shape, 0, true));   // cuDNN's forward, the eager backward
  Case eager = with(fused_shape, 2, true);
  eager.eager = true;
  check(eager);
  const Operand q = make(1, 4, 64, 64, DType::bf16, 1, 0), k = make(1, 4, 64, 64, DType::bf16, 2, 0);
  FlashArgs cfg;
  ASSERT_EQ(cuda::sdpa_refusal(cfg, q.gpu, k.gpu, k.gpu), "");
  cfg.key_rate = 2;
  EXPECT_NE(cuda::sdpa_refusal(cfg, q.gpu, k.gpu, k.gpu).find("compressed keys"), std::string::npos);
  cfg.key_rate = 0;
  const Tensor dlse = empty({1, 4, 64}, DType::f32, kGpu);
  cfg.lse_grad = dlse.raw_data();
  EXPECT_NE(cuda::sdpa_refusal(cfg, q.gpu, k.gpu, k.gpu).find("log-sum-exp"), std::string::npos);
}

// cuDNN's fused kernels: bf16, T == S, head dims 64 and 128, MHA and GQA, causal and not, T not a
// multiple of the kernels' 64-row tiles; each case also run through the eager path on the GPU.
TEST(CudaFlashAttention, CudnnFusedAgainstCpuAndEager) {
  TIDAL_REQUIRE_CUDA();
  for (const Case& c :
       {Case{2, 4, 4, 128, 128, 64, 64, true, DType::bf16}, Case{2, 4, 4, 100, 100, 64, 64, false, DType::bf16},
        Case{1, 8, 2, 257, 257, 128, 128, true, DType::bf16}, Case{3, 6, 1, 64, 64, 64, 64, true, DType::bf16}}) {
    check(c);
    Case eager = c;
    eager.eager = true;
    check(eager);
  }
}

// The fused backward is deterministic: the same inputs give the same gradient bits twice (dQ is not
// accumulated with float atomics; cudnn_sdpa.cpp skips engines cuDNN marks nondeterministic).
TEST(CudaFlashAttention, CudnnFusedBackwardIsDeterministic) {
  TIDAL_REQUIRE_CUDA();
  FlashArgs cfg;
  cfg.scale = 0.125;
  const Operand q = make(2, 8, 512, 64, DType::bf16, 1, 0), k = make(2, 2, 512, 64, DType::bf16, 2, 0);
  const Operand v = make(2, 2, 512, 64, DType::bf16, 3, 0), dout = make(2, 8, 512, 64, DType::bf16, 4, 0);
  Operand out = make(2, 8, 512, 64, DType::bf16, 5, 0);
  ASSERT_EQ(cuda::sdpa_refusal(cfg, q.gpu, k.gpu, v.gpu), "");
  Kernels& kern = device_kernels(kGpu);
  Tensor lse = empty({2, 8, 512}, DType::f32, kGpu);
  Tensor ws = empty({kern.flash_forward_workspace(cfg, q.gpu, k.gpu, v.gpu)}, DType::f32, kGpu);
  kern.flash_attention_forward(current_stream(kGpu), cfg, out.gpu, lse, q.gpu, k.gpu, v.gpu, ws);
  std::vector<std::vector<float>> runs[2];
  for (auto& run : runs) {
    Operand dq = make(2, 8, 512, 64, DType::bf16, 6, 0), dk = make(2, 2, 512, 64, DType::bf16, 7, 0);
    Operand dv = make(2, 2, 512, 64, DType::bf16, 8, 0);
    Tensor wsb = empty({kern.flash_backward_workspace(cfg, dq.gpu, q.gpu, k.gpu, v.gpu)}, DType::f32, kGpu);
    kern.flash_attention_backward(current_stream(kGpu), cfg, dq.gpu, dk.gpu, dv.gpu, dout.gpu, q.gpu, k.gpu, v.gpu,
                                  out.gpu, lse, wsb);
    ASSERT_EQ(cuda::sdpa_last_path(), "cudnn");
    for (const Operand* g : {&dq, &dk, &dv}) run.push_back(g->base_gpu.to_vector<float>());
  }
  EXPECT_EQ(runs[0], runs[1]);
}

// g * T * S above the eager path's chunk (2^26 scores): the query rows run in two chunks, dk and dv
// accumulate across them.
TEST(CudaFlashAttention, LongSequencesRunInChunks) {
  TIDAL_REQUIRE_CUDA();
  check({1, 1, 1, 8200, 8200, 16, 16, true, DType::f32});
}

}  // namespace
}  // namespace tidal
