#pragma once
// Random numbers from one counter-based generator (Philox): every op that draws reserves a range of
// the stream, so results depend only on the seed and the order of ops, and a recompute that
// restores the state reproduces every draw (dropout masks included). See base/philox.h.
#include <cstdint>

#include "tidal/rng.h"
#include "tidal/tensor.h"

namespace tidal {

Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());   // U[0, 1)
Tensor randn(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());  // N(0, 1)
// Integers uniform in [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::i64, Device device = Device::cpu());

// Zeroes each element with probability p and scales the rest by 1/(1-p); saves a u8 mask
// (1 byte per element) for backward. Identity when !training or p == 0.
Tensor dropout(const Tensor& x, double p, bool training = true);

}  // namespace tidal
