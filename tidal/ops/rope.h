#pragma once
// Rotary position embedding (Su et al., RoFormer) in the Hugging Face Llama layout: the head dim is
// split in two halves that rotate against each other (rotate_half), not interleaved pairs.
#include <cstdint>

#include "tidal/ops/rope_scaling.h"
#include "tidal/tensor.h"

namespace tidal {

struct RopeTables {
  Tensor cos, sin;  // each (T, D), or (B, T, D) when each sample has its own positions (rope_tables_at)
};

// cos/sin of emb = cat(freqs, freqs), freqs[t, i] = (position_offset + t) * theta^(-2i/D), i < D/2.
// Computed in f64 and rounded once to `dtype` (HF computes inv_freq and freqs in f32, so at large
// positions its angles carry up to ~pos * 2^-24 rad of rounding that ours do not).
RopeTables rope_tables(int64_t seq_len, int64_t head_dim, double theta, DType dtype = DType::f32,
                       Device device = Device::cpu(), int64_t position_offset = 0);
// The same with the frequencies of a rope type (ops/rope_scaling.h): freqs[t, i] = (position_offset + t) *
// f.inv_freq[i], and cos/sin multiplied by f.attention_scaling (D = 2 * f.inv_freq.size()).
RopeTables rope_tables(int64_t seq_len, const RopeFrequencies& f, DType dtype = DType::f32,
                       Device device = Device::cpu(), int64_t position_offset = 0);

// Megatron's --reset-position-ids (packed documents whose positions restart): the rows of `tables`
// (each (P, D)) at positions (B, T) i32/i64, each in [0, P) -> cos/sin (B, T, D). An out-of-range
// position throws, naming it and P.
RopeTables rope_tables_at(const RopeTables& tables, const Tensor& positions);

// x (B, H, T, D) with any strides (a transposed view of a (B, T, H, D) projection is the common
// input), cos/sin (T, D) of x's dtype, or (B, T, D) (one table per sample, rope_tables_at): x * cos + rotate_half(x) *
// sin, rotate_half(x) = cat(-x2, x1). The output has x's memory order (its outer dims ordered by x's strides, D
// innermost), so a transposed (B, T, H, D) input gives a (B, T, H, D)-ordered output and the caller's transpose back is
// free. Differentiable in x (also twice); cos/sin are constants and get no gradient.
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin);

}  // namespace tidal
