#include "tidal/base/checked_math.h"

#include "tidal/base/error.h"

namespace tidal {

int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  TIDAL_CHECK(a >= 0 && b >= 0, what, ": size ", a < 0 ? a : b, " is negative");
  int64_t r = 0;
  TIDAL_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " x ", b, " overflows a 64-bit size");
  return r;
}

int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  TIDAL_CHECK(a >= 0 && b >= 0, what, ": size ", a < 0 ? a : b, " is negative");
  int64_t r = 0;
  TIDAL_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b, " overflows a 64-bit size");
  return r;
}

int64_t checked_product(std::span<const int64_t> dims, std::string_view what) {
  int64_t n = 1;
  for (int64_t d : dims) n = checked_mul(n, d, what);
  return n;
}

int64_t product_bytes_or_neg(std::span<const int64_t> dims, int64_t itemsize) {
  int64_t n = itemsize;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

}  // namespace tidal
