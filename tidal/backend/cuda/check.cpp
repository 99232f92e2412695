#include "tidal/backend/cuda/check.h"

#include "tidal/base/error.h"

namespace tidal::cuda {

void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // clears a sticky launch error, so the next call reports its own
  const char* hint = "";
  if (error == cudaErrorInsufficientDriver || error == cudaErrorNoDevice)
    hint = " (no usable NVIDIA GPU here: run on the CPU with --device cpu; docs/cuda.md)";
  else if (error == cudaErrorMemoryAllocation)
    hint = " (the GPU is out of memory: docs/memory.md has the steps that lower the peak)";
  detail::throw_error(detail::str_cat("[cuda] ", call, " failed at ", file, ":", line, ": ", cudaGetErrorName(error),
                                      ": ", cudaGetErrorString(error), hint));
}

void unsupported_dtype(const char* kernel, DType dtype) {
  detail::throw_error(detail::str_cat("[cuda] ", kernel, " does not support ", dtype));
}

}  // namespace tidal::cuda
