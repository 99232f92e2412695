// Compares single-precision GEMM libraries on this machine (docs/performance.md, "Choosing a BLAS").
// Each library is dlopen'ed by path, one library per process, so their thread pools never meet:
//   blas_compare <label> <path-to-.so> <cblas|dnnl>
// Prints one line per shape: label, M, N, K, transA, transB, best GFLOP/s over the repetitions.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using CblasSgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*,
                            int);
using DnnlSgemm = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

struct Shape {
  int64_t m, n, k;
  bool ta, tb;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s LABEL LIBRARY.so cblas|dnnl\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[2], dlerror());
    return 1;
  }
  const bool dnnl = std::strcmp(argv[3], "dnnl") == 0;
  auto cblas = reinterpret_cast<CblasSgemm>(dlsym(lib, "cblas_sgemm"));
  auto dnnl_fn = reinterpret_cast<DnnlSgemm>(dlsym(lib, "dnnl_sgemm"));
  if ((dnnl && dnnl_fn == nullptr) || (!dnnl && cblas == nullptr)) {
    std::fprintf(stderr, "no sgemm symbol in %s\n", argv[2]);
    return 1;
  }
  // Transformer shapes: (tokens 4096) x (hidden 768) x (ffn 3072) and the transposes backward uses.
  const std::vector<Shape> shapes = {
      {4096, 3072, 768, false, true}, {4096, 768, 3072, false, false},  {768, 3072, 4096, true, false},
      {4096, 768, 768, false, true},  {1024, 1024, 1024, false, false}, {2048, 2048, 2048, false, false},
  };
  for (const Shape& s : shapes) {
    std::vector<float> a(static_cast<size_t>(s.m * s.k)), b(static_cast<size_t>(s.k * s.n)),
        c(static_cast<size_t>(s.m * s.n));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 7) % 13) * 0.01f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 5) % 11) * 0.01f;
    const int64_t lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
    auto run = [&] {
      if (dnnl) {
        dnnl_fn(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(),
                s.n);
      } else {
        cblas(kRowMajor, s.ta ? kTrans : kNoTrans, s.tb ? kTrans : kNoTrans, int(s.m), int(s.n), int(s.k), 1.f,
              a.data(), int(lda), b.data(), int(ldb), 0.f, c.data(), int(s.n));
      }
    };
    run();  // warm-up: first touch, thread pool start, kernel selection
    double best = 1e30;
    for (int rep = 0; rep < 7; ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      run();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%s %lld %lld %lld %c %c %.1f\n", argv[1], (long long)s.m, (long long)s.n, (long long)s.k,
                s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', 2.0 * s.m * s.n * s.k / best / 1e9);
  }
  return 0;
}
