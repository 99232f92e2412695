#pragma once
// Random numbers from one counter-based generator (Philox): every op that draws reserves a range of
// the stream, so results depend only on the seed and the order of ops, and a recompute that
// restores the state reproduces every draw (dropout masks included). See base/philox.h.
#include <cstdint>

#include "tidal/tensor.h"

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

Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());   // U[0, 1)
Tensor randn(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());  // N(0, 1)
// Integers uniform in [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::i64, Device device = Device::cpu());

// Zeroes each element with probability p and scales the rest by 1/(1-p); saves a u8 mask
// (1 byte per element) for backward. Identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training = true);

}  // namespace tidal
