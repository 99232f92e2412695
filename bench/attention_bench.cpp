// Attention (eager vs flash) and RoPE kernels. Attention: B=1, Hq=12, Hkv in {12, 4}, D=64, causal.
// GFLOP/s counts 4*B*Hq*T*S*D for the forward (halved when causal) and 2.5x that for the backward;
// peak_MiB is the highest allocated memory above the inputs (and dO) during the run: the output,
// workspaces, saved activations and, with backward, the q/k/v gradients (~1.5-2.3 MiB here).
#include <benchmark/benchmark.h>

#include "tidal/allocator.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/autograd/node.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/random.h"
#include "tidal/ops/rope.h"

namespace tidal {
namespace {

struct Inputs {
  Tensor q, k, v;  // (B, H, T, D) views of (B, T, H, D) projections
};

Inputs make_inputs(int64_t hq, int64_t hkv, int64_t t, int64_t d, bool grad) {
  manual_seed(1);
  Inputs in{randn({1, t, hq, d}), randn({1, t, hkv, d}), randn({1, t, hkv, d})};
  for (Tensor* x : {&in.q, &in.k, &in.v}) {
    x->set_requires_grad(grad);
    *x = x->transpose(1, 2);
  }
  return in;
}

// args: kernel (0 eager, 1 flash), Hkv, T, causal, backward, dropout (0 or 1: p = 0.1)
void BM_Attention(benchmark::State& state) {
  const AttentionKernel kernel = state.range(0) == 0 ? AttentionKernel::eager : AttentionKernel::flash;
  const int64_t hq = 12, hkv = state.range(1), t = state.range(2), d = 64;
  const bool causal = state.range(3) != 0, backward = state.range(4) != 0;
  Inputs in = make_inputs(hq, hkv, t, d, backward);
  AttentionOptions opt;
  opt.kernel = kernel;
  opt.causal = causal;
  opt.dropout_p = state.range(5) != 0 ? 0.1 : 0.0;
  Tensor g = backward ? randn({1, t, hq, d}).transpose(1, 2) : Tensor();
  Allocator& alloc = device_allocator(Device::cpu());
  const int64_t base = alloc.stats().allocated;
  auto step = [&] {
    Tensor out = scaled_dot_product_attention(in.q, in.k, in.v, opt);
    if (backward) out.backward(g);
  };
  step();  // warm-up: first touch of the cached blocks, BLAS kernel generation
  alloc.reset_peak_stats();
  for (auto _ : state) {
    if (backward) {
      Tensor out = scaled_dot_product_attention(in.q, in.k, in.v, opt);
      out.backward(g);
    } else {
      NoGradGuard no_grad;
      benchmark::DoNotOptimize(scaled_dot_product_attention(in.q, in.k, in.v, opt));
    }
  }
  const double fwd = 4.0 * double(hq * t * t * d) * (causal ? 0.5 : 1.0);
  state.counters["GFLOP/s"] =
      benchmark::Counter((backward ? 3.5 : 1.0) * fwd * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["peak_MiB"] = double(alloc.stats().peak_allocated - base) / 1048576.0;
  state.SetLabel(kernel == AttentionKernel::eager ? "eager" : "flash");
}

void attention_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"flash", "Hkv", "T", "causal", "bwd", "drop"});
  for (int64_t bwd : {0, 1})
    for (int64_t t : {1024, 2048})
      for (int64_t hkv : {12, 4})
        for (int64_t kernel : {0, 1}) b->Args({kernel, hkv, t, 1, bwd, 0});
  for (int64_t bwd : {0, 1})
    for (int64_t kernel : {0, 1}) b->Args({kernel, 12, 1024, 0, bwd, 0});  // not causal
  for (int64_t kernel : {0, 1}) b->Args({kernel, 12, 1024, 1, 1, 1});      // dropout 0.1
}
BENCHMARK(BM_Attention)->Apply(attention_args)->Unit(benchmark::kMillisecond)->UseRealTime();

// DeepSeek-V4's window and HCA calls at long context (models/deepseek_v4_attention.cpp flash_core): one sample, 4 query
// heads sharing one key/value head of width 32, attention_with_lse forward (+ backward with both gradients). args: T,
// window (0: HCA's compressed keys, T / 128 of them at key_rate 128), bwd. GFLOP/s counts the visible pairs' 4 D
// flops (x 3.5 with backward).
void BM_V4Core(benchmark::State& state) {
  const int64_t t = state.range(0), window = state.range(1), hq = 4, d = 32, rate = 128;
  const bool backward = state.range(2) != 0;
  const int64_t s = window > 0 ? t : t / rate;
  manual_seed(3);
  Tensor q = randn({1, t, hq, d}).transpose(1, 2), kv = randn({1, s, 1, d}).transpose(1, 2);
  q.set_requires_grad(backward);
  kv.set_requires_grad(backward);
  AttentionOptions opt;
  opt.window = window;
  opt.key_rate = window > 0 ? 0 : rate;
  const Tensor g = randn({1, t, hq, d}).transpose(1, 2);
  for (auto _ : state) {
    const AttentionWithLse r = attention_with_lse(q, kv, kv, opt);
    if (backward) r.out.backward(g);
  }
  const double pairs = window > 0 ? double(t) * double(window) : 0.5 * double(t) * double(s);
  state.counters["GFLOP/s"] = benchmark::Counter(
      (backward ? 3.5 : 1.0) * 4.0 * hq * pairs * d * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_V4Core)
    ->ArgNames({"T", "window", "bwd"})
    ->Args({32768, 128, 0})
    ->Args({32768, 128, 1})
    ->Args({32768, 0, 0})
    ->Args({32768, 0, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// apply_rope on a (B, T, H, D) projection seen as (B, H, T, D); GB/s counts reading x and writing out.
void BM_Rope(benchmark::State& state) {
  const int64_t t = state.range(0), h = state.range(1), d = state.range(2);
  const bool backward = state.range(3) != 0;
  manual_seed(2);
  RopeTables tab = rope_tables(t, d, 10000.0);
  Tensor x = randn({1, t, h, d}).transpose(1, 2);
  for (auto _ : state) {
    if (backward) {  // the adjoint kernel, through the node as backward runs it
      Tensor leaf = x.detach().set_requires_grad(true);
      Tensor out = apply_rope(leaf, tab.cos, tab.sin);
      benchmark::DoNotOptimize(out.grad_fn()->apply({out.detach()}));
    } else {
      benchmark::DoNotOptimize(apply_rope(x, tab.cos, tab.sin));
    }
  }
  const double bytes = 2.0 * double(x.nbytes()) * (backward ? 2.0 : 1.0);
  state.counters["GB/s"] = benchmark::Counter(bytes * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Rope)
    ->ArgNames({"T", "H", "D", "fwd_bwd"})
    ->Args({2048, 32, 128, 0})
    ->Args({2048, 32, 128, 1})
    ->Args({1024, 12, 64, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace tidal
