// cuBLASLt behind gemm() (cublaslt.h): handles, workspaces, cached plans.
#include "tidal/backend/cuda/cublaslt.h"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "tidal/backend/cuda/check.h"
#include "tidal/base/error.h"
#include "tidal/memory_scope.h"
#include "tidal/tensor.h"

namespace tidal::cuda {

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  detail::throw_error(detail::str_cat("[cuda] ", call, " failed at ", file, ":", line, ": ",
                                      cublasLtGetStatusName(status), ": ", cublasLtGetStatusString(status)));
}

bool gemm_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool& trans, int64_t& ld) {
  const int64_t r1 = std::max<int64_t>(rows, 1), c1 = std::max<int64_t>(cols, 1);
  if (sc == 1 || cols == 1) {
    const int64_t l = rows == 1 ? c1 : sr;
    if (l >= c1) {
      trans = false;
      ld = l;
      return true;
    }
  }
  if (sr == 1 || rows == 1) {
    const int64_t l = cols == 1 ? r1 : sc;
    if (l >= r1) {
      trans = true;
      ld = l;
      return true;
    }
  }
  return false;
}

namespace {

constexpr int64_t kWorkspaceBytes = int64_t(32) << 20;

// Everything the heuristic sees: the key of a cached plan.
using PlanKey = std::array<int64_t, 18>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

struct State {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, cudaStream_t>, Tensor*> workspaces;  // never freed: kept for the process
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
};
State& state() {
  static State* s = new State;  // outlives every static destructor that might still multiply
  return *s;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f64: return CUDA_R_64F;
    default: TIDAL_ASSERT(false, "cuBLASLt gemm got ", t);
  }
  return CUDA_R_32F;
}

// The largest power of two (<= 256) dividing the address of every batch's matrix.
int64_t alignment(const void* p, int64_t batch_stride_bytes) {
  int64_t a = 256;
  while (a > 1 && ((reinterpret_cast<uintptr_t>(p) % uint64_t(a)) != 0 || batch_stride_bytes % a != 0)) a /= 2;
  return a;
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  TIDAL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, uint64_t(rows), uint64_t(cols), ld));
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    TIDAL_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    TIDAL_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

// Builds the plan of `key` (see gemm: x = our b as cuBLAS's A, y = our a as cuBLAS's B).
std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, const PlanKey& key) {
  const DType ab = DType(key[0]), cd = DType(key[1]);
  const bool tx = key[2] != 0, ty = key[3] != 0;
  const int64_t m = key[4], n = key[5], k = key[6], ldx = key[7], ldy = key[8], ldc = key[9], batch = key[10];
  const int64_t sx = key[11], sy = key[12], sc = key[13];
  auto plan = std::make_unique<Plan>();
  const bool f64 = ab == DType::f64;
  TIDAL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F,
                                              f64 ? CUDA_R_64F : CUDA_R_32F));
  const cublasOperation_t opx = tx ? CUBLAS_OP_T : CUBLAS_OP_N, opy = ty ? CUBLAS_OP_T : CUBLAS_OP_N;
  TIDAL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opx, sizeof(opx)));
  TIDAL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opy, sizeof(opy)));
  // cuBLAS computes C^T (n x m) = op(x) (n x k) op(y) (k x m), all column-major.
  plan->a = tx ? make_layout(cuda_type(ab), k, n, ldx, batch, sx) : make_layout(cuda_type(ab), n, k, ldx, batch, sx);
  plan->b = ty ? make_layout(cuda_type(ab), m, k, ldy, batch, sy) : make_layout(cuda_type(ab), k, m, ldy, batch, sy);
  plan->c = make_layout(cuda_type(cd), n, m, ldc, batch, sc);
  cublasLtMatmulPreference_t pref = nullptr;
  TIDAL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = uint64_t(kWorkspaceBytes);
  TIDAL_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al[3] = {uint32_t(key[14]), uint32_t(key[15]), uint32_t(key[16])};
  TIDAL_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof(al[0])));
  TIDAL_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof(al[1])));
  TIDAL_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof(al[2])));
  TIDAL_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], sizeof(al[2])));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  TIDAL_CUBLAS_CHECK(st);
  TIDAL_CHECK(found > 0, "[cuda] cublasLtMatmulAlgoGetHeuristic found no algorithm for a ", ab, " -> ", cd,
              " product m=", m, " n=", n, " k=", k, " batch=", batch);
  plan->algo = result.algo;
  return plan;
}

}  // namespace

void gemm(int device, cudaStream_t stream, DType ab, DType cd, int64_t m, int64_t n, int64_t k, double alpha,
          const GemmOperand& a, const GemmOperand& b, double beta, void* c, int64_t ldc, int64_t c_stride,
          int64_t batch) {
  TIDAL_ASSERT(m > 0 && n > 0 && k > 0 && batch > 0, "gemm of an empty product");
  int current = 0;
  TIDAL_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) TIDAL_CUDA_CHECK(cudaSetDevice(device));
  const int64_t ea = int64_t(dtype_size(ab)), ec = int64_t(dtype_size(cd));
  const PlanKey key = {int64_t(ab),
                       int64_t(cd),
                       b.trans,
                       a.trans,
                       m,
                       n,
                       k,
                       b.ld,
                       a.ld,
                       ldc,
                       batch,
                       batch > 1 ? b.batch_stride : 0,
                       batch > 1 ? a.batch_stride : 0,
                       batch > 1 ? c_stride : 0,
                       alignment(b.p, batch > 1 ? b.batch_stride * ea : 0),
                       alignment(a.p, batch > 1 ? a.batch_stride * ea : 0),
                       alignment(c, batch > 1 ? c_stride * ec : 0),
                       device};
  State& s = state();
  cublasLtHandle_t handle = nullptr;
  const Plan* plan = nullptr;
  void* workspace = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    cublasLtHandle_t& h = s.handles[device];
    if (!h) TIDAL_CUBLAS_CHECK(cublasLtCreate(&h));
    handle = h;
    Tensor*& ws = s.workspaces[{device, stream}];
    if (!ws) {
      MemoryScope scope(MemoryCategory::temporary);
      ws = new Tensor(empty({kWorkspaceBytes}, DType::u8, Device::cuda(device)));
    }
    workspace = ws->raw_data();
    std::unique_ptr<Plan>& p = s.plans[key];
    if (!p) p = make_plan(handle, key);
    plan = p.get();
  }
  const float alpha32 = float(alpha), beta32 = float(beta);
  const void* pa = ab == DType::f64 ? static_cast<const void*>(&alpha) : &alpha32;
  const void* pb = ab == DType::f64 ? static_cast<const void*>(&beta) : &beta32;
  TIDAL_CUBLAS_CHECK(cublasLtMatmul(handle, plan->desc, pa, b.p, plan->a, a.p, plan->b, pb, c, plan->c, c, plan->c,
                                    &plan->algo, workspace, size_t(kWorkspaceBytes), stream));
  if (current != device) TIDAL_CUDA_CHECK(cudaSetDevice(current));
}

}  // namespace tidal::cuda
