#include "tidal/base/parallel.h"

#include <cstdlib>
#include <string>

#include "tidal/base/error.h"

namespace tidal {
namespace {

int initial_threads() {
  if (const char* env = std::getenv("TIDAL_NUM_THREADS"); env != nullptr && *env != '\0') {
    int n = 0;
    try {
      n = std::stoi(env);
    } catch (const std::exception&) {
      n = 0;
    }
    TIDAL_CHECK(n >= 1, "TIDAL_NUM_THREADS must be a positive integer, got '", env, "'");
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

void set_num_threads(int n) {
  TIDAL_CHECK(n >= 1, "[threads] the number of threads must be >= 1, got ", n);
  threads() = n;
  omp_set_num_threads(n);
}

}  // namespace tidal
