// The random family's methods of CudaKernels (ops/random.h): Philox draws at stream positions start + i,
// bit-identical to the CPU backend's (philox.cuh ports base/philox.h), then random.cu's launchers.
#include "tidal/backend/cuda/check.h"
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/random_launch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

void check_floating(const char* op, const Tensor& t) {
  TIDAL_CHECK(is_floating(t.dtype()), "[", op, "] expects a floating tensor (f32, bf16 or f64), got ", t.dtype());
}

void check_contiguous(const char* op, const Tensor& t) {
  TIDAL_ASSERT(t.is_contiguous(), "[", op, "] expects a contiguous tensor, got strides ", t.strides(), " of shape ",
               t.shape());
}

void check_dropout(const char* op, const Tensor& out, const Tensor& mask, const Tensor& x) {
  check_floating(op, x);
  TIDAL_ASSERT(out.dtype() == x.dtype() && mask.dtype() == DType::u8, "[", op, "] expects out of x's dtype ", x.dtype(),
               " and a u8 mask, got ", out.dtype(), " and ", mask.dtype());
  TIDAL_ASSERT(out.numel() == x.numel() && mask.numel() == x.numel(), "[", op, "] sizes differ: out ", out.shape(),
               ", mask ", mask.shape(), ", x ", x.shape());
  check_contiguous(op, out);
  check_contiguous(op, mask);
  check_contiguous(op, x);
}

}  // namespace

void CudaKernels::random_fill(Stream& stream, const Tensor& out, Distribution dist, uint64_t seed, uint64_t start) {
  const char* op = dist == Distribution::uniform ? "rand" : "randn";
  check_floating(op, out);
  check_contiguous(op, out);
  launch_random_fill(stream_handle(stream), device_data(out), out.dtype(), out.numel(), dist == Distribution::normal,
                     seed, start);
}

void CudaKernels::randint_fill(Stream& stream, const Tensor& out, int64_t low, int64_t high, uint64_t seed,
                               uint64_t start) {
  TIDAL_CHECK(out.dtype() == DType::i32 || out.dtype() == DType::i64,
              "[randint] expects an index tensor (i32 or i64), got ", out.dtype());
  check_contiguous("randint", out);
  launch_randint_fill(stream_handle(stream), device_data(out), out.dtype(), out.numel(), low, uint64_t(high - low),
                      seed, start);
}

void CudaKernels::dropout_forward(Stream& stream, const Tensor& out, const Tensor& mask, const Tensor& x, double p,
                                  double scale, uint64_t seed, uint64_t start) {
  check_dropout("dropout", out, mask, x);
  launch_dropout(stream_handle(stream), device_data(out), static_cast<uint8_t*>(device_data(mask)), device_data(x),
                 x.dtype(), x.numel(), float(p), scale, seed, start);
}

// The row map is host memory: copied into a device tensor (tidal's allocator, this op's scope) first; with
// a row map the call synchronizes its stream (twice: the copy, then the kernel before the map is freed).
void CudaKernels::dropout_rows_forward(Stream& stream, const DropoutRowsArgs& a, const Tensor& out, const Tensor& mask,
                                       const Tensor& x, double p, double scale) {
  check_dropout("dropout_rows", out, mask, x);
  TIDAL_ASSERT(a.outer * a.rows * a.inner == x.numel(), "[dropout_rows] (outer ", a.outer, ", rows ", a.rows,
               ", inner ", a.inner, ") does not cover x ", x.shape());
  DropoutRowsArgs d = a;
  Tensor row_map;
  if (a.row_map != nullptr && a.rows > 0) {
    row_map = empty({a.rows}, DType::i64, out.device());
    copy_from_host(stream, row_map, a.row_map);  // synchronizes: the host array may go once this returns
    d.row_map = static_cast<const int64_t*>(device_data(row_map));
  }
  const cudaStream_t s = stream_handle(stream);
  launch_dropout_rows(s, d, device_data(out), static_cast<uint8_t*>(device_data(mask)), device_data(x), x.dtype(),
                      float(p), scale);
  // The device row map is freed on return: let the kernel finish reading it first (a callback could not
  // free it: CUDA calls are not allowed there).
  if (row_map.defined()) TIDAL_CUDA_CHECK(cudaStreamSynchronize(s));
}

// dx = g * mask * scale.
void CudaKernels::dropout_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& mask,
                                   double scale) {
  check_dropout("dropout", dx, mask, g);
  launch_dropout_backward(stream_handle(stream), device_data(dx), device_data(g),
                          static_cast<const uint8_t*>(device_data(mask)), g.dtype(), g.numel(), scale);
}

}  // namespace tidal::cuda
