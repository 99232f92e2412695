#pragma once
// cuBLASLt for the matmul and attention kernels: one handle per device (created lazily), a 32 MiB
// workspace per stream allocated once through tidal's allocator (category temporary, kept for the
// process), and the heuristic's algorithm cached per (dtypes, shapes, layouts, alignments, epilogue). Row-major
// products are run as their column-major transposes (C^T = B^T A^T), so no ORDER_ROW layouts.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/dtype.h"

namespace tidal::cuda {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace tidal::cuda

#define TIDAL_CUBLAS_CHECK(call)                                                          \
  do {                                                                                    \
    const cublasStatus_t tidal_cublas_status_ = (call);                                   \
    if (tidal_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                       \
      ::tidal::cuda::throw_cublas_error(tidal_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

namespace tidal::cuda {

// The workspace each (device, stream) keeps from its first product on (category temporary).
inline constexpr int64_t kGemmWorkspaceBytes = int64_t(32) << 20;

// Frees every stream's workspace after the device finished its work (the next product makes it
// again): tests that compare one run's peaks with a dry run's start from none.
void release_gemm_workspaces();

// A row-major view of a (rows x cols) operand: trans = false: element (r, c) at p[r*ld + c]
// (ld >= cols); trans = true: at p[c*ld + r] (ld >= rows). Batch i starts batch_stride elements on.
struct GemmOperand {
  const void* p = nullptr;
  bool trans = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// Whether (rows, cols, stride_r, stride_c) is a GemmOperand (trans and ld set), as the CPU backend's rule.
bool gemm_layout(int64_t rows, int64_t cols, int64_t stride_r, int64_t stride_c, bool& trans, int64_t& ld);

// c[i] (m x n row-major, ldc, batch stride c_stride) = alpha * a[i] (m x k) @ b[i] (k x n) + beta * c[i]
// for i < batch. `ab`: the operands' dtype; `cd`: c's (f32 for bf16 operands may differ). f32 and
// bf16 accumulate in f32 (CUBLAS_COMPUTE_32F, no TF32), f64 in f64. Queued on `stream` of `device`.
void gemm(int device, cudaStream_t stream, DType ab, DType cd, int64_t m, int64_t n, int64_t k, double alpha,
          const GemmOperand& a, const GemmOperand& b, double beta, void* c, int64_t ldc, int64_t c_stride,
          int64_t batch);

// c (m x n row-major, ldc) = a (m x k) @ b (k x n) + bias (n, contiguous, broadcast over the rows), one
// product whose epilogue adds the bias (CUBLASLT_EPILOGUE_BIAS: the bias is added to the f32 sum before
// the one rounding to c's type). All of dtype t, f32 or bf16: cuBLASLt's bias has the output's type,
// and it offers no bias epilogue for f64. Returns false, having queued nothing, when the heuristic finds
// no algorithm for it (remembered per shape): the caller then adds the bias another way.
bool gemm_bias(int device, cudaStream_t stream, DType t, int64_t m, int64_t n, int64_t k, const GemmOperand& a,
               const GemmOperand& b, const void* bias, void* c, int64_t ldc);

}  // namespace tidal::cuda
