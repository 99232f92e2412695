// One optimizer step over GPT-2 124M's parameters (f32): AdamW with its states on the device, and the
// swap optimizer with its states in host memory at K windows. GB/s counts the update's traffic
// (p, m, v read and written, g read: 28 bytes per parameter) per second of step; the counters give
// the device optimizer_state peak (MiB) and the bytes moved each way. docs/performance.md,
// "Swap optimizer"; bench/swap_optimizer_bench.sh runs it interleaved and keeps the fastest.
#include <benchmark/benchmark.h>

#include <memory>

#include "bench/bench_util.h"
#include "tidal/allocator.h"
#include "tidal/memory/swap_optimizer.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"

namespace tidal {
namespace {

struct Gpt2Params {
  std::unique_ptr<models::CausalLM> model;
  Gpt2Params() {
    manual_seed(1);
    model = models::create_model(models::preset("gpt2-124m"));
    for (const Tensor& p : model->parameters()) p.set_grad(mul(randn(p.shape()), 1e-3));
  }
};

Gpt2Params& params() {
  static Gpt2Params p;  // 124M parameters and gradients, made once for every case
  return p;
}

// Arg: K (0: AdamW with device states).
void BM_OptimizerStep(benchmark::State& state) {
  const int64_t K = state.range(0);
  Gpt2Params& p = params();
  std::unique_ptr<optim::AdamW> opt = K == 0 ? std::make_unique<optim::AdamW>(p.model->named_parameters())
                                             : std::make_unique<memory::SwapAdamW>(p.model->named_parameters(), K);
  Allocator& dev = device_allocator(Device::cpu());
  opt->step(1e-4);  // untimed: creates the states and touches every page once
  dev.reset_peak_stats();
  const int64_t base = dev.stats()[MemoryCategory::optimizer_state].allocated;
  for (auto _ : state) opt->step(1e-4);
  const double n = double(p.model->num_parameters());
  bench::set_gbps(state, 28.0 * n);
  state.counters["device_states_MiB"] =
      double(dev.stats()[MemoryCategory::optimizer_state].peak - (K == 0 ? 0 : base)) / (1 << 20);
  if (auto* s = dynamic_cast<memory::SwapAdamW*>(opt.get()))
    state.counters["moved_GB_per_step"] =
        double(s->stats().bytes_to_device + s->stats().bytes_to_host) / double(s->stats().steps) / 1e9;
}
BENCHMARK(BM_OptimizerStep)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Arg(32)
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime()
    ->Iterations(3);

}  // namespace
}  // namespace tidal
