#pragma once
// Size arithmetic on numbers that come from outside (files, flags, environment): every product or sum
// that sizes an allocation goes through these, so a config.json asking for 2^56 elements of 4 bytes
// is a clear error instead of a wrapped, too-small allocation.
#include <cstdint>
#include <span>
#include <string_view>

namespace tidal {

// a * b, a + b; an Error naming `what` ("[config] parameters of layer 3") when the result does not fit
// in int64 or an operand is negative.
int64_t checked_mul(int64_t a, int64_t b, std::string_view what);
int64_t checked_add(int64_t a, int64_t b, std::string_view what);

// The product of `dims` (a shape's element count), checked as above.
int64_t checked_product(std::span<const int64_t> dims, std::string_view what);

// The product of `dims` times `itemsize` (a tensor's bytes), or -1 when a dim is negative or the product
// does not fit in int64. Formats nothing: for allocation paths that build their message only on failure.
int64_t product_bytes_or_neg(std::span<const int64_t> dims, int64_t itemsize);

// Bytes of `numel` elements of `itemsize` bytes, checked as above.
inline int64_t checked_bytes(int64_t numel, int64_t itemsize, std::string_view what) {
  return checked_mul(numel, itemsize, what);
}

}  // namespace tidal
