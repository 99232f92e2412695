#include "tests/cuda/backend/cuda/gemm_workspaces.h"

#include "tidal/backend/cuda/cublaslt.h"

namespace tidal::testing {

void release_cuda_gemm_workspaces() { cuda::release_gemm_workspaces(); }

}  // namespace tidal::testing
