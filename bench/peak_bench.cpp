// The machine's own limits, measured the same way as the kernels so docs/performance.md can put
// each kernel against them: fp32 FMA throughput, and memory bandwidth (copy, triad).
#include <benchmark/benchmark.h>

#include <omp.h>
#include "bench/bench_util.h"

#include <cstring>
#include <vector>

#include "tidal/base/parallel.h"
#include "tidal/ops/random.h"

namespace tidal {
namespace {

typedef float v16 __attribute__((vector_size(64)));

// 12 independent chains of 16-lane FMAs per thread: enough to fill both FMA pipes.
void BM_FmaPeak(benchmark::State& state) {
  const int threads = int(state.range(0));
  constexpr int64_t kIters = 1 << 20;
  for (auto _ : state) {
    float sink = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
      v16 acc[12];
      const v16 a = {}, b = {};
      for (int k = 0; k < 12; ++k) acc[k] = v16{} + float(k + omp_get_thread_num());
      v16 x = a + 1.0000001f, y = b + 0.9999999f;
      for (int64_t i = 0; i < kIters; ++i)
        for (int k = 0; k < 12; ++k) acc[k] = acc[k] * x + y;
      for (int k = 0; k < 12; ++k) sink += acc[k][0];
    }
    benchmark::DoNotOptimize(sink);
  }
  bench::set_gflops(state, double(threads) * kIters * 12 * 16 * 2);
}

void BM_MemcpyBandwidth(benchmark::State& state) {
  const int64_t n = int64_t(256) << 20;  // 256 MiB: far beyond the caches
  std::vector<char> src(size_t(n), 1), dst(size_t(n), 0);
  const int threads = int(state.range(0));
  for (auto _ : state) {
#pragma omp parallel num_threads(threads)
    {
      const int64_t t = omp_get_thread_num(), chunk = n / threads;
      std::memcpy(dst.data() + t * chunk, src.data() + t * chunk, size_t(chunk));
    }
    benchmark::DoNotOptimize(dst.data());
  }
  bench::set_gbps(state, 2.0 * double(n));
}

void BM_TriadBandwidth(benchmark::State& state) {  // a[i] = b[i] + s * c[i], STREAM's triad
  const int64_t n = int64_t(32) << 20;
  std::vector<float> a(size_t(n), 0), b(size_t(n), 1), c(size_t(n), 2);
  const int threads = int(state.range(0));
  for (auto _ : state) {
    float* ap = a.data();
    const float* bp = b.data();
    const float* cp = c.data();
#pragma omp parallel for simd num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) ap[i] = bp[i] + 0.5f * cp[i];
    benchmark::DoNotOptimize(a.data());
  }
  bench::set_gbps(state, 3.0 * 4 * double(n));
}

BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(2)->UseRealTime();
BENCHMARK(BM_MemcpyBandwidth)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TriadBandwidth)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tidal
