#include "tidal/backend/cuda/kernels.h"

#include <cudnn.h>

#include "tidal/backend/cuda/check.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/base/error.h"
#include "tidal/memory_stats.h"
#include "tidal/seam/registry.h"
#include "tidal/tensor.h"

namespace tidal::cuda {

std::string CudaKernels::describe() const {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return std::string("  cuda           built in; no usable GPU here (") +
           (e != cudaSuccess ? cudaGetErrorString(e) : "no device") + ")\n";
  }
  std::string out =
      "  cuda gemm      cuBLASLt (f32 without TF32; bf16 with f32 accumulation; f64)\n" +
      detail::str_cat("  cuda attention cuDNN ", cudnnGetVersion(),
                      " fused SDPA, deterministic engines (bf16, no dropout, head dim <= 128, causal with T == S);\n"
                      "                 eager otherwise: cuBLASLt products and tidal's softmax\n");
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    TIDAL_CUDA_CHECK(cudaGetDeviceProperties(&p, d));
    out += detail::str_cat("  cuda:", d, "         ", p.name, " (compute capability ", p.major, ".", p.minor, ", ",
                           p.multiProcessorCount, " SMs, ", format_bytes(int64_t(p.totalGlobalMem)), ")\n");
  }
  return out;
}

// Host memory may be pageable and may go once this returns: the copies finish before they return.
void CudaKernels::copy_from_host(Stream& stream, const Tensor& dst, const void* src) {
  if (dst.nbytes() == 0) return;
  TIDAL_ASSERT(dst.is_contiguous(), "[cuda] copy_from_host into a non-contiguous tensor ", dst.shape());
  const cudaStream_t s = stream_handle(stream);
  TIDAL_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src, size_t(dst.nbytes()), cudaMemcpyDefault, s));
  TIDAL_CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaKernels::copy_to_host(Stream& stream, void* dst, const Tensor& src) {
  if (src.nbytes() == 0) return;
  const cudaStream_t s = stream_handle(stream);
  TIDAL_CUDA_CHECK(cudaMemcpyAsync(dst, src.raw_data(), size_t(src.nbytes()), cudaMemcpyDefault, s));
  TIDAL_CUDA_CHECK(cudaStreamSynchronize(s));
}

namespace {
[[gnu::init_priority(kRegisterBackends)]] const RegisterKernels<CudaKernels> registered(DeviceType::cuda);
}  // namespace

}  // namespace tidal::cuda
