#include "tests/cuda/cuda_test_util.h"

#include <cuda_runtime_api.h>

namespace tidal::testing {

std::string cuda_unavailable() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaGetErrorString(e);
  }
  return count == 0 ? "no device found" : "";
}

}  // namespace tidal::testing
