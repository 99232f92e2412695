#include "tidal/backend/cpu/onednn_matmul.h"

#include <dnnl_debug.h>
#include <omp.h>
#include <dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tidal/base/error.h"

namespace tidal::cpu::onednn {
namespace {

using dnnl::memory;

constexpr int64_t kAnyRows = -1;  // Key::m (and k) of a primitive made for any m and k

struct Key {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  DType out;
  float alpha, beta;
  int threads;  // oneDNN sizes the scratchpad and splits the work for the thread count at creation
  bool operator==(const Key& o) const {
    return trans_a == o.trans_a && trans_b == o.trans_b && m == o.m && n == o.n && k == o.k && lda == o.lda &&
           ldb == o.ldb && ldc == o.ldc && out == o.out && std::memcmp(&alpha, &o.alpha, sizeof alpha) == 0 &&
           std::memcmp(&beta, &o.beta, sizeof beta) == 0 && threads == o.threads;
  }
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    uint32_t ab[2];
    std::memcpy(&ab[0], &key.alpha, 4);
    std::memcpy(&ab[1], &key.beta, 4);
    const uint64_t parts[] = {
        uint64_t(key.trans_a) | uint64_t(key.trans_b) << 1 | uint64_t(key.out) << 2 | uint64_t(key.threads) << 8,
        uint64_t(key.m),
        uint64_t(key.n),
        uint64_t(key.k),
        uint64_t(key.lda),
        uint64_t(key.ldb),
        uint64_t(key.ldc),
        uint64_t(ab[0]) | uint64_t(ab[1]) << 32};
    uint64_t h = 1469598103934665603ull;
    for (uint64_t p : parts) h = (h ^ p) * 1099511628211ull;
    return size_t(h);
  }
};

struct Entry {
  dnnl::matmul prim;
  memory::desc a, b, c, scratch;
  size_t scratch_bytes = 0;
  std::string impl;
};

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Strides of a logical (rows x cols) matrix stored row-major with row stride ld, or transposed.
memory::desc matrix_desc(int64_t rows, int64_t cols, bool trans, int64_t ld, memory::data_type dt) {
  return memory::desc({rows, cols}, dt, trans ? memory::dims{1, ld} : memory::dims{ld, 1});
}

memory::data_type out_type(DType out) { return out == DType::f32 ? memory::data_type::f32 : memory::data_type::bf16; }

// key.m == kAnyRows: a primitive for any m and k (oneDNN's runtime dims; the leading dims stay fixed).
std::shared_ptr<const Entry> create(const Key& key) {
  auto e = std::make_shared<Entry>();
  const auto bf16 = memory::data_type::bf16;
  const int64_t m = key.m == kAnyRows ? DNNL_RUNTIME_DIM_VAL : key.m;
  const int64_t k = key.m == kAnyRows ? DNNL_RUNTIME_DIM_VAL : key.k;
  e->a = matrix_desc(m, k, key.trans_a, key.lda, bf16);
  e->b = matrix_desc(k, key.n, key.trans_b, key.ldb, bf16);
  e->c = matrix_desc(m, key.n, false, key.ldc, out_type(key.out));
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (key.alpha != 1.f) attr.set_output_scales(0, {key.alpha});
  if (key.beta != 0.f) {
    dnnl::post_ops ops;
    ops.append_sum(key.beta);
    attr.set_post_ops(ops);
  }
  try {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e->a, e->b, e->c), attr, cpu_engine());
    e->scratch = pd.scratchpad_desc();
    e->scratch_bytes = e->scratch.get_size();
    e->impl = pd.impl_info_str();
    e->prim = dnnl::matmul(pd);
  } catch (const dnnl::error& err) {
    TIDAL_ASSERT(false, "oneDNN bf16 matmul primitive failed (", err.what(), ") for m=", key.m, " n=", key.n,
                 " k=", key.k, " lda=", key.lda, " ldb=", key.ldb, " ldc=", key.ldc);
  }
  return e;
}

// An LRU of primitives. Lookups take the lock; execution runs outside it on a shared handle.
class Cache {
 public:
  std::shared_ptr<const Entry> get(const Key& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      ++stats_.hits;
      order_.splice(order_.begin(), order_, it->second);
      return it->second->second;
    }
    std::shared_ptr<const Entry> e = create(key);
    ++stats_.created;
    stats_.max_scratchpad_bytes = std::max(stats_.max_scratchpad_bytes, int64_t(e->scratch_bytes));
    order_.emplace_front(key, e);
    index_[key] = order_.begin();
    if (int64_t(order_.size()) > kMaxPrimitives) {
      index_.erase(order_.back().first);
      order_.pop_back();
      ++stats_.evicted;
    }
    return e;
  }
  CacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    CacheStats s = stats_;
    s.primitives = int64_t(order_.size());
    return s;
  }

 private:
  using Item = std::pair<Key, std::shared_ptr<const Entry>>;
  std::mutex mu_;
  std::list<Item> order_;  // most recently used first
  std::unordered_map<Key, std::list<Item>::iterator, KeyHash> index_;
  CacheStats stats_;
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: primitives may outlive static destruction order
  return *c;
}

// The calling thread's scratchpad: grown to the largest request, never shrunk.
void* scratchpad(size_t bytes) {
  thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

Key make_key(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, int64_t lda, int64_t ldb,
             float beta, int64_t ldc, DType out) {
  return Key{trans_a, trans_b, m, n, k, lda, ldb, ldc, out, alpha, beta, omp_in_parallel() ? 1 : omp_get_max_threads()};
}

template <typename C>
void gemm_impl(bool any_rows, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta, C* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // oneDNN rejects empty reductions; the product is zero
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = C(beta == 0.f ? 0.f : beta * float(c[i * ldc + j]));
    return;
  }
  Key key = make_key(trans_a, trans_b, m, n, k, alpha, lda, ldb, beta, ldc, dtype_v<C>);
  if (any_rows) key.m = key.k = kAnyRows;
  std::shared_ptr<const Entry> e = cache().get(key);
  thread_local dnnl::stream stream(cpu_engine());
  const auto bf16 = memory::data_type::bf16;
  // A runtime-dims primitive executes on memories of this call's shapes.
  const memory::desc da = any_rows ? matrix_desc(m, k, trans_a, lda, bf16) : e->a;
  const memory::desc db = any_rows ? matrix_desc(k, n, trans_b, ldb, bf16) : e->b;
  const memory::desc dc = any_rows ? matrix_desc(m, n, false, ldc, out_type(dtype_v<C>)) : e->c;
  memory ma(da, cpu_engine(), const_cast<BFloat16*>(a)), mb(db, cpu_engine(), const_cast<BFloat16*>(b)),
      mc(dc, cpu_engine(), c);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  if (e->scratch_bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(e->scratch, cpu_engine(), scratchpad(e->scratch_bytes)));
  }
  try {
    e->prim.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& err) {
    TIDAL_ASSERT(false, "oneDNN bf16 matmul failed (", err.what(), ") for m=", m, " n=", n, " k=", k);
  }
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
          const BFloat16* b, int64_t ldb, float beta, BFloat16* c, int64_t ldc, Rows rows) {
  gemm_impl(rows == Rows::any, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a, int64_t lda,
          const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc, Rows rows) {
  gemm_impl(rows == Rows::any, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

const char* isa_name() {
  static const std::string name = [] {
    std::string s = dnnl_cpu_isa2str(dnnl_get_effective_cpu_isa());
    const std::string prefix = "cpu_isa_";
    return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
  }();
  return name.c_str();
}

CacheStats cache_stats() { return cache().stats(); }

std::string impl_name(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                      int64_t ldc, DType out_dtype) {
  return cache().get(make_key(trans_a, trans_b, m, n, k, 1.f, lda, ldb, 0.f, ldc, out_dtype))->impl;
}

}  // namespace tidal::cpu::onednn
