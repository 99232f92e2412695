// What the profiler costs when it is off (docs/profiling.md#overhead). Every op and every autograd
// node opens an OpScope, which now also tests the recorder's flag: compare it with the scope as it
// was before the profiler (LegacyOpScope, a copy), on its own, around a small op, and over a whole
// training step of a small model, with the recorder off and on.
#include <benchmark/benchmark.h>

#include "tidal/memory_scope.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/range_recorder.h"

namespace tidal {
namespace {

// OpScope before the profiler: the op name in the thread's memory context, restored at exit.
class LegacyOpScope {
 public:
  explicit LegacyOpScope(const char* op) : saved_(memory_context().op) { memory_context().op = op; }
  ~LegacyOpScope() { memory_context().op = saved_; }

 private:
  const char* saved_;
};

template <typename Scope>
void scope_loop(benchmark::State& state) {
  for (auto _ : state) {
    Scope s("op");
    benchmark::DoNotOptimize(memory_context().op);
  }
}

void BM_OpScope_Legacy(benchmark::State& state) { scope_loop<LegacyOpScope>(state); }
void BM_OpScope_RecorderOff(benchmark::State& state) { scope_loop<OpScope>(state); }
void BM_OpScope_RecorderOn(benchmark::State& state) {
  profile::start_recording();
  int64_t n = 0;
  for (auto _ : state) {
    {
      OpScope s("op");
      benchmark::DoNotOptimize(memory_context().op);
    }
    if (++n % 65536 == 0) {  // keep the buffer small
      state.PauseTiming();
      profile::take_ranges();
      state.ResumeTiming();
    }
  }
  profile::stop_recording();
  profile::take_ranges();
}
BENCHMARK(BM_OpScope_Legacy);
BENCHMARK(BM_OpScope_RecorderOff);
BENCHMARK(BM_OpScope_RecorderOn);

// A small op: dispatch, checks, allocation and a 64-element kernel.
void BM_SmallOp(benchmark::State& state) {
  const bool on = state.range(0) != 0;
  Tensor a = randn({64}), b = randn({64});
  if (on) profile::start_recording();
  int64_t n = 0;
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.raw_data());
    if (on && ++n % 65536 == 0) {
      state.PauseTiming();
      profile::take_ranges();
      state.ResumeTiming();
    }
  }
  if (on) {
    profile::stop_recording();
    profile::take_ranges();
  }
  state.SetLabel(on ? "recorder on" : "recorder off");
}
BENCHMARK(BM_SmallOp)->Arg(0)->Arg(1);

// Forward and backward of a 4-layer GPT-2 (hidden 256) on 2 x 64 tokens: ~1,000 ranges per step.
void BM_TrainStep(benchmark::State& state) {
  const bool on = state.range(0) != 0;
  manual_seed(1);
  auto model = models::create_model(models::preset("small-gpt2"));
  Tensor tokens = randint(0, model->config().vocab_size, {2, 65});
  if (on) profile::start_recording();
  int64_t ranges = 0;
  for (auto _ : state) {
    models::ModelOutput o = model->forward(tokens.narrow(1, 0, 64));
    models::causal_lm_loss(o, tokens.narrow(1, 1, 64), 0.0).backward();
    model->zero_grad();
    if (on) {
      state.PauseTiming();
      ranges = int64_t(profile::take_ranges().size());
      state.ResumeTiming();
    }
  }
  if (on) profile::stop_recording();
  state.counters["ranges/step"] = double(ranges);
  state.SetLabel(on ? "recorder on" : "recorder off");
}
BENCHMARK(BM_TrainStep)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tidal
