// The LM head + loss of one micro-batch, forward and backward, in both loss compute modes: the
// default (linear, then cross_entropy on the whole (N, V) logits) and chunked_lm_loss at several
// chunk sizes. N = 2048 tokens (2 x 1024), hidden 1024 (Qwen3-0.6B's), vocabularies of 32k and
// Qwen3's 151936. GFLOP/s counts the three products (6 N V C); the counters give the peak of the
// logits category and of everything the head allocates (MiB). One iteration per run (152k takes
// seconds); bench/chunked_loss_bench.sh repeats them interleaved and keeps the fastest.
// docs/performance.md, "Chunked loss".
#include <benchmark/benchmark.h>

#include "bench/bench_util.h"
#include "tidal/allocator.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/chunked_loss.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"

namespace tidal {
namespace {

// Args: vocab, chunk (0: the default mode).
void BM_LmHeadLoss(benchmark::State& state) {
  const int64_t N = 2048, C = 1024, V = state.range(0), chunk = state.range(1);
  manual_seed(1);
  Tensor h = randn({2, N / 2, C}).set_requires_grad(true);  // (B, T, C)
  Tensor w = mul(randn({V, C}), 0.02).set_requires_grad(true);
  Tensor tokens = randint(0, V, {2, N / 2 + 1});
  Tensor targets = tokens.narrow(1, 1, N / 2);
  Allocator& dev = device_allocator(Device::cpu());
  int64_t head_peak = 0, logits_peak = 0;
  auto step = [&] {
    h.zero_grad();
    w.zero_grad();
    dev.reset_peak_stats();
    const int64_t base = dev.stats().allocated;
    Tensor loss;
    if (chunk > 0) {
      loss = chunked_lm_loss(h, w, targets, chunk);
    } else {
      Tensor logits;  // (B, T, V)
      {
        MemoryScope category(MemoryCategory::logits);
        logits = linear(h, w);
      }
      loss = cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
    }
    loss.backward();
    benchmark::DoNotOptimize(w.grad().raw_data());
    head_peak = dev.stats().peak_allocated - base;
    logits_peak = dev.stats()[MemoryCategory::logits].peak;
  };
  step();  // untimed: first touch of the allocator's fresh blocks runs at a few GB/s
  for (auto _ : state) step();
  bench::set_gflops(state, 6.0 * double(N) * double(V) * double(C));
  state.counters["head_peak_MiB"] = double(head_peak) / (1 << 20);
  state.counters["logits_MiB"] = double(logits_peak) / (1 << 20);
}
BENCHMARK(BM_LmHeadLoss)
    ->ArgsProduct({{32768, 151936}, {0, 256, 512, 1024, 2048}})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()  // all threads: with OMP_WAIT_POLICY=passive, the work done (bench/*.sh)
    ->UseRealTime()
    ->Iterations(1);

}  // namespace
}  // namespace tidal
