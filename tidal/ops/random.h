#pragma once
// Random numbers from one counter-based generator (Philox): every op that draws reserves a range of
// the stream, so results depend only on the seed and the order of ops, and a recompute that
// restores the state reproduces every draw (dropout masks included). See base/philox.h.
#include <cstdint>
#include <vector>

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

// A range of the Philox stream reserved once for a whole tensor whose pieces are drawn separately
// (context parallelism: each rank holds some rows of every sample). Every rank reserves the same
// count at the same point, so the ranks' streams stay in step.
struct RandomRange {
  uint64_t seed = 0;
  uint64_t start = 0;  // the first position (a multiple of 4)
  uint64_t count = 0;  // positions reserved for the whole tensor
};
RandomRange reserve_random_range(uint64_t count);

// Where the rows of a (B, T_local, C...) piece sit in the whole (B, T_g, C...) tensor: local row t
// is global row rows[t]. rng was reserved for the whole tensor (count B*T_g*C, C the product of
// the trailing dims).
struct RowFrame {
  RandomRange rng;
  int64_t global_rows = 0;    // T_g
  std::vector<int64_t> rows;  // T_local entries, each in [0, T_g)
};
// The frame of `rows` of a (batch, global_rows, row_elems) tensor, reserving its range now.
RowFrame reserve_row_frame(int64_t batch, int64_t global_rows, int64_t row_elems, std::vector<int64_t> rows);

// dropout of a piece of a larger tensor: element (b, t, c) of x (B, T_local, C...) draws the
// position start + (b*T_g + rows[t])*C + c, the one dropout() of the whole (B, T_g, C...) tensor
// would draw for it from the same range, so the pieces' masks put together are the whole tensor's
// mask, bit for bit. Same u8 mask and backward as dropout; identity when !training or p == 0
// (nothing is drawn: the range was reserved already).
Tensor dropout_rows(const Tensor& x, double p, const RowFrame& frame, bool training = true);

}  // namespace tidal
