// The Sinkhorn-Knopp family's methods of CudaKernels (ops/sinkhorn.h): checks and arguments, then sinkhorn.cu's
// launchers. Contiguous (matrices, n, n) of one floating dtype; a matrix is one block's n * n threads, so n is at
// most 32, and its backward keeps every step in shared memory (refused by name past the device's limit).
#include <initializer_list>

#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/shared_memory.h"
#include "tidal/backend/cuda/sinkhorn_launch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

void check_matrices(const char* kernel, const SinkhornArgs& a, std::initializer_list<const Tensor*> ts) {
  const Tensor& first = **ts.begin();
  TIDAL_CHECK(is_floating(first.dtype()), "[", kernel, "] expects a floating tensor (f32, bf16 or f64), got ",
              first.dtype());
  for (const Tensor* t : ts)
    TIDAL_ASSERT(t->is_contiguous() && t->dtype() == first.dtype() && t->numel() == a.matrices * a.n * a.n, "[cuda] ",
                 kernel, " needs contiguous (", a.matrices, ", ", a.n, ", ", a.n, ") tensors of one dtype, got ",
                 t->shape(), " ", t->dtype());
  TIDAL_CHECK(a.n <= kSinkhornMaxN, "[", kernel, "] on cuda takes matrices up to ", kSinkhornMaxN, " x ", kSinkhornMaxN,
              " (one thread per entry, one block per matrix), got ", a.n, " x ", a.n);
}

}  // namespace

void CudaKernels::sinkhorn_forward(Stream& stream, const Tensor& out, const Tensor& x, const SinkhornArgs& a) {
  check_matrices("sinkhorn", a, {&x, &out});
  launch_sinkhorn_forward(stream_handle(stream), x.dtype(), device_data(out), device_data(x), a);
}

void CudaKernels::sinkhorn_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& x,
                                    const SinkhornArgs& a) {
  check_matrices("sinkhorn_backward", a, {&x, &g, &dx});
  if (a.matrices == 0 || a.n == 0) return;
  const int64_t bytes = sinkhorn_backward_matrix_bytes(x.dtype(), a);
  if (bytes > kDefaultSharedBytes) {
    const int64_t limit = max_shared_bytes(x.device().index);
    TIDAL_CHECK(bytes <= limit, "[sinkhorn_backward] on cuda keeps a matrix's ", 2 * a.iters - 1,
                " steps in shared memory: ", bytes, " bytes for n = ", a.n, " and ", a.iters,
                " iterations, more than this GPU's ", limit);
  }
  launch_sinkhorn_backward(stream_handle(stream), x.dtype(), device_data(dx), device_data(g), device_data(x), a);
}

}  // namespace tidal::cuda
