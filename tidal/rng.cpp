#include "tidal/rng.h"

#include <mutex>

#include "tidal/base/error.h"

namespace tidal {
namespace {
std::mutex g_rng_mu;
RngState g_rng{0x7469'6461'6c00'0001ull, 0};  // "tidal" + 1
}  // namespace

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_rng_mu);
  g_rng = {seed, 0};
}

RngState get_rng_state() {
  std::lock_guard<std::mutex> lock(g_rng_mu);
  return g_rng;
}

void set_rng_state(const RngState& state) {
  TIDAL_CHECK(state.offset % 4 == 0, "[rng] the offset of an RNG state must be a multiple of 4, got ", state.offset);
  std::lock_guard<std::mutex> lock(g_rng_mu);
  g_rng = state;
}

uint64_t reserve_random(uint64_t n) {
  std::lock_guard<std::mutex> lock(g_rng_mu);
  const uint64_t start = g_rng.offset;
  g_rng.offset += (n + 3) / 4 * 4;
  return start;
}

}  // namespace tidal
