#pragma once
// OpenMP parallel loops on the host: the one threading runtime of tidal (oneDNN's GEMM uses the same pool).
// Ranges are split statically into equal chunks, so results never depend on timing.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

#include "tidal/base/threads.h"

namespace tidal {
bool in_stream_worker();  // stream.h: stream workers run kernels single-threaded

// Calls f(chunk_begin, chunk_end) over [begin, end) on up to num_threads() threads; serial when the
// range is at most `grain` or when already inside a parallel region. Exceptions are rethrown here.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
  const int threads =
      int(std::min<int64_t>(num_threads(), (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1)));
  if (threads <= 1 || omp_in_parallel() || in_stream_worker() || loops_run_serially()) {
    f(begin, end);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = begin + t * chunk, e = std::min(end, b + chunk);
    if (b < e) {
      try {
        f(b, e);
      } catch (...) {
#pragma omp critical(tidal_parallel_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace tidal
