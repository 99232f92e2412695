#pragma once
// Element types. bf16 is a storage type: CPU kernels load it into f32, compute, and round back.
// u8 holds masks and booleans (dropout masks, attention masks, where/masked_fill conditions).
#include <cstdint>
#include <cstring>
#include <iosfwd>
#include <string_view>

namespace tidal {

enum class DType : uint8_t { f32, bf16, f64, i32, i64, u8 };

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(round_from(f)) {}  // NOLINT: implicit like a float
  operator float() const {                    // NOLINT
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  // Round to nearest even; NaN stays a quiet NaN. Written as a select so loops vectorize.
  static uint16_t round_from(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return uint16_t((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x0040u : rounded);
  }
};

constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
    case DType::i32: return 4;
    case DType::bf16: return 2;
    case DType::f64:
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f64; }
constexpr bool is_integral(DType t) { return !is_floating(t); }

std::string_view dtype_name(DType t);
std::ostream& operator<<(std::ostream& os, DType t);

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <typename T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// The type arithmetic happens in: f64 for f64, f32 for f32 and bf16, itself for integers.
template <typename T>
struct acc_of {
  using type = float;
};
template <>
struct acc_of<double> {
  using type = double;
};
template <>
struct acc_of<int32_t> {
  using type = int32_t;
};
template <>
struct acc_of<int64_t> {
  using type = int64_t;
};
template <>
struct acc_of<uint8_t> {
  using type = uint8_t;
};
template <typename T>
using acc_t = typename acc_of<T>::type;

}  // namespace tidal
