// The elementwise family's methods of CudaKernels: checks and arguments, then elementwise.cu's launchers.
// Inputs broadcast to the output's shape (strided(t, out.shape())); any strides.
#include "tidal/backend/cuda/elementwise_launch.h"
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  TIDAL_ASSERT(a.dtype() == b.dtype(), "[", op, "] dtypes differ: ", a.dtype(), " and ", b.dtype());
}

void check_mask(const char* op, const Tensor& m) {
  TIDAL_ASSERT(m.dtype() == DType::u8, "[", op, "] expects a u8 mask, got ", m.dtype());
}

}  // namespace

void CudaKernels::fill(Stream& stream, const Tensor& dst, double value) {
  launch_fill(stream_handle(stream), strided(dst), dst.numel(), value);
}

void CudaKernels::unary(Stream& stream, Unary op, const Tensor& out, const Tensor& in, double s) {
  if (is_integral(in.dtype())) {
    TIDAL_CHECK(op == Unary::neg || op == Unary::abs || op == Unary::add_scalar || op == Unary::mul_scalar ||
                    op == Unary::rsub_scalar || op == Unary::clamp_min || op == Unary::clamp_max || op == Unary::square,
                "[elementwise] this op needs a floating tensor, got ", in.dtype());
  }
  check_same_dtype("elementwise", out, in);
  const Shape& shape = out.shape();
  launch_unary(stream_handle(stream), op, strided(out), strided(in, shape), out.numel(), s);
}

// out = a op (alpha * b) for add/sub; alpha is ignored by the others.
void CudaKernels::binary(Stream& stream, Binary op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  TIDAL_CHECK(!(op == Binary::pow && is_integral(a.dtype())), "[pow] needs floating tensors, got ", a.dtype());
  check_same_dtype("elementwise", a, b);
  check_same_dtype("elementwise", out, a);
  const Shape& shape = out.shape();
  launch_binary(stream_handle(stream), op, strided(out), strided(a, shape), strided(b, shape), out.numel(), alpha);
}

// out (u8) = a op b.
void CudaKernels::compare(Stream& stream, Compare op, const Tensor& out, const Tensor& a, const Tensor& b) {
  check_same_dtype("compare", a, b);
  check_mask("compare", out);
  const Shape& shape = out.shape();
  launch_compare(stream_handle(stream), op, strided(out), strided(a, shape), strided(b, shape), out.numel());
}

// out (u8) = a op s.
void CudaKernels::compare_scalar(Stream& stream, Compare op, const Tensor& out, const Tensor& a, double s) {
  check_mask("compare", out);
  launch_compare_scalar(stream_handle(stream), op, strided(out), strided(a, out.shape()), out.numel(), s);
}

// out = cond ? a : b (cond is u8).
void CudaKernels::where(Stream& stream, const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same_dtype("where", a, b);
  check_same_dtype("where", out, a);
  check_mask("where", cond);
  const Shape& shape = out.shape();
  launch_where(stream_handle(stream), strided(out), strided(cond, shape), strided(a, shape), strided(b, shape),
               out.numel());
}

// out = mask ? value : x (mask is u8).
void CudaKernels::masked_fill(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& mask, double value) {
  check_same_dtype("masked_fill", out, x);
  check_mask("masked_fill", mask);
  const Shape& shape = out.shape();
  launch_masked_fill(stream_handle(stream), strided(out), strided(x, shape), strided(mask, shape), out.numel(), value);
}

// dst = src (broadcast, any strides, converting dtype).
void CudaKernels::copy(Stream& stream, const Tensor& dst, const Tensor& src) {
  launch_copy(stream_handle(stream), strided(dst), strided(src, dst.shape()), dst.numel());
}

// dst += alpha * src, in place (src broadcast to dst).
void CudaKernels::add_inplace(Stream& stream, const Tensor& dst, const Tensor& src, double alpha) {
  binary(stream, Binary::add, dst, dst, src, alpha);
}

}  // namespace tidal::cuda
