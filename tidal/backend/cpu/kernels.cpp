// The CPU backend's kernels: their registration, identity and host transfers (the kernels themselves
// are defined in this folder's family files).
#include "tidal/backend/cpu/kernels.h"

#include <cstring>

#include "tidal/backend/cpu/blas.h"
#include "tidal/backend/cpu/onednn_matmul.h"
#include "tidal/seam/registry.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

std::string CpuKernels::describe() const {
  return std::string("  gemm           ") + blas::backend_name() +
         " (f32); oneDNN matmul (bf16, f32 accumulation, isa " + onednn::isa_name() + "); reference kernel (f64)\n";
}

void CpuKernels::copy_from_host(Stream&, const Tensor& dst, const void* src) {
  if (dst.nbytes() > 0) std::memcpy(dst.raw_data(), src, size_t(dst.nbytes()));
}

void CpuKernels::copy_to_host(Stream&, void* dst, const Tensor& src) {
  if (src.nbytes() > 0) std::memcpy(dst, src.raw_data(), size_t(src.nbytes()));
}

namespace {
[[gnu::init_priority(kRegisterBackends)]] const RegisterKernels<CpuKernels> registered(DeviceType::cpu);
}  // namespace

}  // namespace tidal::cpu
