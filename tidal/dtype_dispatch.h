#pragma once
// Dtype dispatch: calls f(Tag<T>{}) with the C++ type of a runtime dtype (host code and every backend).
#include "tidal/base/error.h"
#include "tidal/dtype.h"

namespace tidal {

template <typename T>
struct Tag {
  using type = T;
};

// Floating dtypes (f32, bf16, f64).
template <typename F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(Tag<float>{});
    case DType::f64: return f(Tag<double>{});
    case DType::bf16: return f(Tag<BFloat16>{});
    default: break;
  }
  detail::throw_error(detail::str_cat("[", op, "] expects a floating tensor (f32, bf16 or f64), got ", t));
}

// Every dtype.
template <typename F>
decltype(auto) dispatch_all(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(Tag<float>{});
    case DType::f64: return f(Tag<double>{});
    case DType::bf16: return f(Tag<BFloat16>{});
    case DType::i32: return f(Tag<int32_t>{});
    case DType::i64: return f(Tag<int64_t>{});
    case DType::u8: return f(Tag<uint8_t>{});
  }
  detail::throw_error(detail::str_cat("[", op, "] unsupported dtype ", t));
}

// Index dtypes (i32, i64).
template <typename F>
decltype(auto) dispatch_index(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::i32: return f(Tag<int32_t>{});
    case DType::i64: return f(Tag<int64_t>{});
    default: break;
  }
  detail::throw_error(detail::str_cat("[", op, "] expects an index tensor (i32 or i64), got ", t));
}

}  // namespace tidal
