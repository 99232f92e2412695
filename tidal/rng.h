#pragma once
// The state of tidal's one random generator (Philox, base/philox.h): a seed and the next unused
// stream position. Ops that draw reserve a range of the stream (ops/random.h), so results depend
// only on the seed and the order of ops; a recompute replay restores the state and redraws exactly.
#include <cstdint>

namespace tidal {

struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // next unused stream position (a multiple of 4)
  friend bool operator==(const RngState&, const RngState&) = default;
};

void manual_seed(uint64_t seed);  // also resets the offset to 0
RngState get_rng_state();
void set_rng_state(const RngState& state);
// Reserves n stream positions and returns the first (what ops call; rounds up to a multiple of 4).
uint64_t reserve_random(uint64_t n);

}  // namespace tidal
