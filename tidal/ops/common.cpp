#include "tidal/ops/common.h"

namespace tidal::detail {

void check_defined(const char* op, const Tensor& t, const char* what) {
  TIDAL_CHECK(t.defined(), "[", op, "] ", what, " is an undefined tensor");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "an input");
  check_defined(op, b, "an input");
  TIDAL_CHECK(a.device() == b.device(), "[", op, "] tensors on different devices: ", a.shape(), " on ", a.device(),
              " and ", b.shape(), " on ", b.device());
}

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  check_same_device(op, a, b);
  TIDAL_CHECK(a.dtype() == b.dtype(), "[", op, "] dtype mismatch: ", a.shape(), " is ", a.dtype(), " but ", b.shape(),
              " is ", b.dtype(), "; convert one with .to(DType)");
}

void check_floating(const char* op, const Tensor& t) {
  check_defined(op, t, "an input");
  TIDAL_CHECK(is_floating(t.dtype()), "[", op, "] expects a floating tensor (f32, bf16 or f64), got ", t.dtype(), " ",
              t.shape());
}

void check_dim(const char* op, const Tensor& t, int ndim, const char* what) {
  check_defined(op, t, what);
  TIDAL_CHECK(t.dim() == ndim, "[", op, "] ", what, " must have ", ndim, " dims, got ", t.shape());
}

}  // namespace tidal::detail
