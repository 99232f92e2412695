// cuBLASLt behind gemm() and gemm_bias() (cublaslt.h): handles, workspaces, cached plans.
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

// Everything the heuristic sees: the key of a cached plan (kKey* name the entries set after the layout's).
using PlanKey = std::array<int64_t, 20>;
constexpr size_t kKeyDevice = 17, kKeyEpilogue = 18, kKeyBiasAlignment = 19;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false only for an epilogue the heuristic has no algorithm for
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

PlanKey plan_key(DType ab, DType cd, int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b,
                 const void* c, int64_t ldc, int64_t c_stride, int64_t batch, int device, const void* bias) {
  const int64_t ea = int64_t(dtype_size(ab)), ec = int64_t(dtype_size(cd));
  return {int64_t(ab),
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
          device,
          bias != nullptr,
          bias != nullptr ? alignment(bias, 0) : 0};
}

// The operation of `key`: compute type, transposes and, with a bias, the bias epilogue on `bias`
// (x = our b as cuBLAS's A, y = our a as cuBLAS's B; cuBLAS's D is our c transposed, so the bias runs
// along its rows, as CUBLASLT_EPILOGUE_BIAS wants).
cublasLtMatmulDesc_t make_desc(const PlanKey& key, const void* bias) {
  const DType ab = DType(key[0]), cd = DType(key[1]);
  const bool f64 = ab == DType::f64;
  cublasLtMatmulDesc_t desc = nullptr;
  TIDAL_CUBLAS_CHECK(
      cublasLtMatmulDescCreate(&desc, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F, f64 ? CUDA_R_64F : CUDA_R_32F));
  const cublasOperation_t opx = key[2] ? CUBLAS_OP_T : CUBLAS_OP_N, opy = key[3] ? CUBLAS_OP_T : CUBLAS_OP_N;
  TIDAL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opx, sizeof(opx)));
  TIDAL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opy, sizeof(opy)));
  if (key[kKeyEpilogue] != 0) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const int32_t bias_type = int32_t(cuda_type(cd));  // the output's type, as cuBLASLt requires
    TIDAL_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    TIDAL_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    TIDAL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  return desc;
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

// Builds the plan of `key` (see make_desc); `bias` is a pointer of the key's bias alignment, which the
// heuristic reads. Without an epilogue, no algorithm is an error; with one, a plan not found.
std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, const PlanKey& key, const void* bias) {
  const DType ab = DType(key[0]), cd = DType(key[1]);
  const bool tx = key[2] != 0, ty = key[3] != 0;
  const int64_t m = key[4], n = key[5], k = key[6], ldx = key[7], ldy = key[8], ldc = key[9], batch = key[10];
  const int64_t sx = key[11], sy = key[12], sc = key[13];
  auto plan = std::make_unique<Plan>();
  plan->desc = make_desc(key, bias);
  // cuBLAS computes C^T (n x m) = op(x) (n x k) op(y) (k x m), all column-major.
  plan->a = tx ? make_layout(cuda_type(ab), k, n, ldx, batch, sx) : make_layout(cuda_type(ab), n, k, ldx, batch, sx);
  plan->b = ty ? make_layout(cuda_type(ab), m, k, ldy, batch, sy) : make_layout(cuda_type(ab), k, m, ldy, batch, sy);
  plan->c = make_layout(cuda_type(cd), n, m, ldc, batch, sc);
  cublasLtMatmulPreference_t pref = nullptr;
  TIDAL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = uint64_t(kGemmWorkspaceBytes);
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
  const bool epilogue = key[kKeyEpilogue] != 0;
  if (epilogue && (st == CUBLAS_STATUS_NOT_SUPPORTED || found == 0)) return plan;  // found = false
  TIDAL_CUBLAS_CHECK(st);
  TIDAL_CHECK(found > 0, "[cuda] cublasLtMatmulAlgoGetHeuristic found no algorithm for a ", ab, " -> ", cd,
              " product m=", m, " n=", n, " k=", k, " batch=", batch);
  plan->algo = result.algo;
  plan->found = true;
  return plan;
}

// Makes `device` current for the calls in its scope (a product may be queued from another device's
// thread), and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int device) : device_(device) {
    TIDAL_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device_) TIDAL_CUDA_CHECK(cudaSetDevice(device_));
  }
  ~DeviceScope() {
    if (previous_ != device_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int device_ = 0, previous_ = 0;
};

struct Prepared {
  cublasLtHandle_t handle = nullptr;
  const Plan* plan = nullptr;
  void* workspace = nullptr;
};

// The handle, the stream's workspace and the plan of `key`, each made on first use.
Prepared prepare(int device, cudaStream_t stream, const PlanKey& key, const void* bias) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  cublasLtHandle_t& h = s.handles[device];
  if (!h) TIDAL_CUBLAS_CHECK(cublasLtCreate(&h));
  Tensor*& ws = s.workspaces[{device, stream}];
  if (!ws) {
    MemoryScope scope(MemoryCategory::temporary);
    ws = new Tensor(empty({kGemmWorkspaceBytes}, DType::u8, Device::cuda(device)));
  }
  std::unique_ptr<Plan>& p = s.plans[key];
  if (!p) p = make_plan(h, key, bias);
  return {h, p.get(), ws->raw_data()};
}

}  // namespace

void release_gemm_workspaces() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.workspaces.empty()) return;
  TIDAL_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& [key, ws] : s.workspaces) delete ws;
  s.workspaces.clear();
}

void gemm(int device, cudaStream_t stream, DType ab, DType cd, int64_t m, int64_t n, int64_t k, double alpha,
          const GemmOperand& a, const GemmOperand& b, double beta, void* c, int64_t ldc, int64_t c_stride,
          int64_t batch) {
  TIDAL_ASSERT(m > 0 && n > 0 && k > 0 && batch > 0, "gemm of an empty product");
  DeviceScope scope(device);
  const PlanKey key = plan_key(ab, cd, m, n, k, a, b, c, ldc, c_stride, batch, device, nullptr);
  const Prepared p = prepare(device, stream, key, nullptr);
  const Plan* plan = p.plan;
  const float alpha32 = float(alpha), beta32 = float(beta);
  const void* pa = ab == DType::f64 ? static_cast<const void*>(&alpha) : &alpha32;
  const void* pb = ab == DType::f64 ? static_cast<const void*>(&beta) : &beta32;
  TIDAL_CUBLAS_CHECK(cublasLtMatmul(p.handle, plan->desc, pa, b.p, plan->a, a.p, plan->b, pb, c, plan->c, c, plan->c,
                                    &plan->algo, p.workspace, size_t(kGemmWorkspaceBytes), stream));
}

bool gemm_bias(int device, cudaStream_t stream, DType t, int64_t m, int64_t n, int64_t k, const GemmOperand& a,
               const GemmOperand& b, const void* bias, void* c, int64_t ldc) {
  TIDAL_ASSERT(m > 0 && n > 0 && k > 0 && bias != nullptr, "gemm_bias of an empty product or without a bias");
  TIDAL_ASSERT(t == DType::f32 || t == DType::bf16, "cuBLASLt has no bias epilogue for ", t);
  DeviceScope scope(device);
  const PlanKey key = plan_key(t, t, m, n, k, a, b, c, ldc, 0, 1, device, bias);
  const Prepared p = prepare(device, stream, key, bias);
  if (!p.plan->found) return false;
  // The plan's descriptor holds the bias of the call that made it, and plans are shared between
  // threads: each call sets its own bias on a descriptor of its own (the algorithm is the plan's).
  cublasLtMatmulDesc_t desc = make_desc(key, bias);
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t st = cublasLtMatmul(p.handle, desc, &one, b.p, p.plan->a, a.p, p.plan->b, &zero, c, p.plan->c, c,
                                           p.plan->c, &p.plan->algo, p.workspace, size_t(kGemmWorkspaceBytes), stream);
  cublasLtMatmulDescDestroy(desc);
  TIDAL_CUBLAS_CHECK(st);
  return true;
}

}  // namespace tidal::cuda
