#pragma once
// Counters every kernel benchmark reports: GB/s for memory-bound kernels, GFLOP/s for compute.
#include <benchmark/benchmark.h>

namespace tidal::bench {

inline void set_gbps(benchmark::State& state, double bytes_per_iter) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iter * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

inline void set_gflops(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iter * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace tidal::bench
