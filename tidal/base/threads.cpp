#include "tidal/base/parallel.h"

#include <cstdlib>
#include <string>
#include <thread>

#include "tidal/base/error.h"

namespace tidal {
namespace {

// More OpenMP threads than this is a typo, not a machine (the runtime crashes creating 100,000).
constexpr int kMaxThreads = 1024;

int initial_threads() {
  if (const char* env = std::getenv("TIDAL_NUM_THREADS"); env != nullptr && *env != '\0') {
    int n = 0;
    try {
      n = std::stoi(env);
    } catch (const std::exception&) {
      n = 0;
    }
    TIDAL_CHECK(n >= 1 && n <= kMaxThreads, "TIDAL_NUM_THREADS must be an integer from 1 to ", kMaxThreads, ", got '",
                env, "' (this machine has ", std::thread::hardware_concurrency(), " hardware threads)");
    omp_set_num_threads(n);
    return n;
  }
  return omp_get_max_threads();
}

int& threads() {
  static int n = initial_threads();
  return n;
}

}  // namespace

int num_threads() { return threads(); }

namespace {
bool g_serial = false;
}  // namespace

void run_loops_serially() { g_serial = true; }
bool loops_run_serially() { return g_serial; }

void set_num_threads(int n) {
  TIDAL_CHECK(n >= 1 && n <= kMaxThreads, "[threads] the number of threads must be in [1, ", kMaxThreads, "], got ", n);
  threads() = n;
  omp_set_num_threads(n);
}

}  // namespace tidal
