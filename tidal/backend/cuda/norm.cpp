// The norm family's methods of CudaKernels (layer norm, RMS norm, norm_row_chunks): checks and
// arguments, then norm.cu's launchers.
#include <algorithm>

#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/norm_launch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

// Note [Deterministic parameter gradients] on the GPU: enough row chunks that chunks x column blocks
// fill the 132 SMs of an H100/H200 twice even for narrow rows, at least kMinChunkRows rows each.
constexpr int64_t kMaxChunks = 264;
constexpr int64_t kMinChunkRows = 32;

DType acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

const void* optional_data(const Tensor& t) { return t.defined() ? device_data(t) : nullptr; }
void* optional_out(const Tensor& t) { return t.defined() ? device_data(t) : nullptr; }

void check_rows(const char* kernel, const Tensor& t, DType dtype, int64_t numel) {
  TIDAL_ASSERT(t.is_contiguous() && t.dtype() == dtype && t.numel() == numel, "[cuda] ", kernel, ": expected ", numel,
               " contiguous ", dtype, " elements, got ", t.shape(), " ", t.dtype(),
               t.is_contiguous() ? "" : " (not contiguous)");
}

void check_optional(const char* kernel, const Tensor& t, DType dtype, int64_t numel) {
  if (t.defined()) check_rows(kernel, t, dtype, numel);
}

NormShape shape_of(const Tensor& x, const NormArgs& a, int64_t chunks) {
  return {x.dtype(), a.rows, a.cols, chunks, a.weight_offset};
}

}  // namespace

int64_t CudaKernels::norm_row_chunks(int64_t rows) const {
  return std::clamp<int64_t>((rows + kMinChunkRows - 1) / kMinChunkRows, 1, kMaxChunks);
}

void CudaKernels::layer_norm_forward(Stream& stream, const Tensor& out, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& x, const Tensor& weight, const Tensor& bias, const NormArgs& a) {
  const DType t = x.dtype(), acc = acc_dtype(t);
  check_rows("layer_norm", x, t, a.rows * a.cols);
  check_rows("layer_norm", out, t, a.rows * a.cols);
  check_rows("layer_norm", mean, acc, a.rows);
  check_rows("layer_norm", rstd, acc, a.rows);
  check_optional("layer_norm", weight, t, a.cols);
  check_optional("layer_norm", bias, t, a.cols);
  launch_layer_norm_forward(stream_handle(stream), shape_of(x, a, 1), a.eps, device_data(out), device_data(mean),
                            device_data(rstd), device_data(x), optional_data(weight), optional_data(bias));
}

void CudaKernels::layer_norm_backward(Stream& stream, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                      const Tensor& workspace, const Tensor& g, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& weight, const NormArgs& a) {
  const DType t = x.dtype(), acc = acc_dtype(t);
  const int64_t chunks = norm_row_chunks(a.rows);
  check_rows("layer_norm_backward", x, t, a.rows * a.cols);
  check_rows("layer_norm_backward", g, t, a.rows * a.cols);
  check_rows("layer_norm_backward", mean, acc, a.rows);
  check_rows("layer_norm_backward", rstd, acc, a.rows);
  check_optional("layer_norm_backward", dx, t, a.rows * a.cols);
  check_optional("layer_norm_backward", dweight, t, a.cols);
  check_optional("layer_norm_backward", dbias, t, a.cols);
  check_optional("layer_norm_backward", weight, t, a.cols);
  const bool params = dweight.defined() || dbias.defined();
  if (params) check_rows("layer_norm_backward", workspace, acc, chunks * 2 * a.cols);
  launch_layer_norm_backward(stream_handle(stream), shape_of(x, a, chunks), optional_out(dx), optional_out(dweight),
                             optional_out(dbias), params ? device_data(workspace) : nullptr, device_data(g),
                             device_data(x), device_data(mean), device_data(rstd), optional_data(weight));
}

void CudaKernels::rms_norm_forward(Stream& stream, const Tensor& out, const Tensor& rstd, const Tensor& x,
                                   const Tensor& weight, const NormArgs& a) {
  const DType t = x.dtype();
  check_rows("rms_norm", x, t, a.rows * a.cols);
  check_rows("rms_norm", out, t, a.rows * a.cols);
  check_rows("rms_norm", rstd, acc_dtype(t), a.rows);
  check_optional("rms_norm", weight, t, a.cols);
  launch_rms_norm_forward(stream_handle(stream), shape_of(x, a, 1), a.eps, device_data(out), device_data(rstd),
                          device_data(x), optional_data(weight));
}

void CudaKernels::rms_norm_backward(Stream& stream, const Tensor& dx, const Tensor& dweight, const Tensor& workspace,
                                    const Tensor& g, const Tensor& x, const Tensor& rstd, const Tensor& weight,
                                    const NormArgs& a) {
  const DType t = x.dtype(), acc = acc_dtype(t);
  const int64_t chunks = norm_row_chunks(a.rows);
  check_rows("rms_norm_backward", x, t, a.rows * a.cols);
  check_rows("rms_norm_backward", g, t, a.rows * a.cols);
  check_rows("rms_norm_backward", rstd, acc, a.rows);
  check_optional("rms_norm_backward", dx, t, a.rows * a.cols);
  check_optional("rms_norm_backward", dweight, t, a.cols);
  check_optional("rms_norm_backward", weight, t, a.cols);
  if (dweight.defined()) check_rows("rms_norm_backward", workspace, acc, chunks * a.cols);
  launch_rms_norm_backward(stream_handle(stream), shape_of(x, a, chunks), optional_out(dx), optional_out(dweight),
                           dweight.defined() ? device_data(workspace) : nullptr, device_data(g), device_data(x),
                           device_data(rstd), optional_data(weight));
}

}  // namespace tidal::cuda
