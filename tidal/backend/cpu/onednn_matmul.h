#pragma once
// bf16 GEMM through oneDNN's matmul primitive: bf16 operands, f32 accumulation, bf16 or f32 output.
// Same row-major contract as blas::gemm:
//   C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C
// op(X) = X or X^T; lda/ldb/ldc are row strides of the stored matrices. beta != 0 is oneDNN's sum
// post-op (C read in its own dtype, added in f32, rounded once).
//
// Primitives are cached by (transposes, m, n, k, leading dims, output dtype, alpha, beta, threads):
// an LRU of kMaxPrimitives, so a training step creates none after its first. Scratchpad is
// user-managed: one buffer per calling thread, grown to the largest scratchpad a cached primitive
// asked for (a few MB on the 124M shapes), never shrunk, outside the caching allocator.
#include <cstdint>
#include <string>

#include "tidal/dtype.h"

namespace tidal::cpu::onednn {

inline constexpr int64_t kMaxPrimitives = 256;

// Rows::exact: the primitive made for this m and k (oneDNN's fastest, brgemm where the ISA has it; 0.2-10 ms
// to create). Rows::any: one made for any m and k (runtime dims: its jit gemm, ~5-15% slower on one thread,
// created once), for products whose rows change from call to call: an MoE layer's experts, whose token
// counts differ every step, created ~600 exact primitives a step (Note [Grouped products], cpu/matmul.cpp).
enum class Rows : uint8_t { exact, any };

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
          const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc, Rows rows = Rows::exact);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
          const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc, Rows rows = Rows::exact);

// The ISA oneDNN dispatches to on this CPU, e.g. "avx512_core_bf16" (dnnl_get_effective_cpu_isa).
const char* isa_name();

struct CacheStats {
  int64_t primitives = 0;  // in the cache now
  int64_t created = 0;     // since the process started (a miss creates one)
  int64_t hits = 0;
  int64_t evicted = 0;
  int64_t max_scratchpad_bytes = 0;  // the largest a created primitive asked for (per calling thread)
};
CacheStats cache_stats();
// The implementation oneDNN chose for the primitive of this call, e.g. "brg:avx512_core_bf16" (for
// benchmarks and docs; creates and caches the primitive).
std::string impl_name(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                      int64_t ldc, DType out_dtype);

}  // namespace tidal::cpu::onednn
