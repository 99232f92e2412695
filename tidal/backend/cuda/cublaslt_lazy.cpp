// cuBLASLt, loaded on its first call (Note [cuBLASLt loaded lazily]): the entry points the CUDA backend calls
// (cublaslt.cpp), defined here, each forwarding to the library's own, which dlopen finds on first use.
//
// Note [cuBLASLt loaded lazily]
// Linked like the other CUDA libraries, libcublasLt.so.13 is loaded with every tidal process, GPU or not, and its
// loading alone makes ~143 MiB resident: its relocated data (61 MiB of its file) and 82 MiB of zero-initialized
// data its start-up writes (measured on GPT-2 124M's CPU training, /proc/PID/smaps) — for a CPU run, a third of
// everything the process holds beyond its tensors. Not linked, it is loaded by the first GEMM on a CUDA device:
// the first of these functions called opens it (the name the loader resolves, else the file the build found) and each
// looks its symbol up once. The executable does not export these definitions, so libraries that load cuBLASLt
// themselves (cuDNN's engines) call the library's own.
#include <cublasLt.h>
#include <dlfcn.h>

#include <mutex>

#include "tidal/base/error.h"

#ifndef TIDAL_CUBLASLT_PATH
#define TIDAL_CUBLASLT_PATH ""  // the library the build found (CMakeLists.txt)
#endif

namespace {

void* cublaslt_library() {
  static void* handle = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    handle = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr && *TIDAL_CUBLASLT_PATH != '\0') handle = dlopen(TIDAL_CUBLASLT_PATH, RTLD_NOW | RTLD_LOCAL);
  });
  TIDAL_CHECK(handle != nullptr, "[cuda] cannot load cuBLASLt (libcublasLt.so.13, CUDA 13): ", dlerror(),
              ". Install the CUDA 13 toolkit's cuBLAS or put its directory on LD_LIBRARY_PATH");
  return handle;
}

template <typename F>
F cublaslt_symbol(const char* name) {
  void* symbol = dlsym(cublaslt_library(), name);
  TIDAL_CHECK(symbol != nullptr, "[cuda] cuBLASLt has no ", name, " (a CUDA 13 cuBLASLt is needed)");
  return reinterpret_cast<F>(symbol);
}

}  // namespace

// Each: the library's function of the same name, looked up on the first call.
#define TIDAL_CUBLASLT_FORWARD(name, ...)                           \
  static const auto real = cublaslt_symbol<decltype(&name)>(#name); \
  return real(__VA_ARGS__)

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* lightHandle) {
  TIDAL_CUBLASLT_FORWARD(cublasLtCreate, lightHandle);
}

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  TIDAL_CUBLASLT_FORWARD(cublasLtGetStatusName, status);
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  TIDAL_CUBLASLT_FORWARD(cublasLtGetStatusString, status);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                           const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                                           const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta, const void* C,
                                           cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace,
                                           size_t workspaceSizeInBytes, cudaStream_t stream) {
  TIDAL_CUBLASLT_FORWARD(cublasLtMatmul, lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc,
                         algo, workspace, workspaceSizeInBytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  TIDAL_CUBLASLT_FORWARD(cublasLtMatmulAlgoGetHeuristic, lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc,
                         preference, requestedAlgoCount, heuristicResultsArray, returnAlgoCount);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
  TIDAL_CUBLASLT_FORWARD(cublasLtMatmulDescCreate, matmulDesc, computeType, scaleType);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  TIDAL_CUBLASLT_FORWARD(cublasLtMatmulDescDestroy, matmulDesc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                           size_t sizeInBytes) {
  TIDAL_CUBLASLT_FORWARD(cublasLtMatmulDescSetAttribute, matmulDesc, attr, buf, sizeInBytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
  TIDAL_CUBLASLT_FORWARD(cublasLtMatrixLayoutCreate, matLayout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  TIDAL_CUBLASLT_FORWARD(cublasLtMatrixLayoutDestroy, matLayout);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                             cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                             size_t sizeInBytes) {
  TIDAL_CUBLASLT_FORWARD(cublasLtMatrixLayoutSetAttribute, matLayout, attr, buf, sizeInBytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  TIDAL_CUBLASLT_FORWARD(cublasLtMatmulPreferenceCreate, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  TIDAL_CUBLASLT_FORWARD(cublasLtMatmulPreferenceDestroy, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void* buf, size_t sizeInBytes) {
  TIDAL_CUBLASLT_FORWARD(cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, sizeInBytes);
}

}  // extern "C"
