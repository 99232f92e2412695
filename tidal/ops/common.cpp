#include "tidal/ops/common.h"

#include "tidal/dtype_dispatch.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

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

double scalar_value(Kernels& kern, const Tensor& t) {
  TIDAL_CHECK(t.numel() == 1 && is_floating(t.dtype()), "[scalar_value] needs one floating element, got ", t.shape(),
              " ", t.dtype());
  return dispatch_float(t.dtype(), "scalar_value", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v{};
    kern.copy_to_host(current_stream(t.device()), &v, t);  // one element: contiguous whatever its strides
    return double(acc_t<T>(v));
  });
}

}  // namespace tidal::detail
