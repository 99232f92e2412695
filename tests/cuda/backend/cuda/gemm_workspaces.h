#pragma once
// The CUDA backend's cuBLASLt workspaces, for the tests outside tests/cuda/backend/ that compare a run's
// device peaks with a dry run's (tests/cuda/training_test.cpp): a new process makes them at its first
// product, so such a test starts from none.

namespace tidal::testing {

// Frees every stream's cuBLASLt workspace once the device finished its work (cuda::release_gemm_workspaces).
void release_cuda_gemm_workspaces();

}  // namespace tidal::testing
