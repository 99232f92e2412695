#include "tidal/backend/cpu/attention_flash.h"

// Note [Flash attention on the CPU]: tiles of query rows x keys. The tile products go through the
// BLAS wrapper, single-threaded inside our parallel region: oneDNN's sgemm runs a 64x128x64 tile at
// ~170 GFLOP/s on one core, an omp-simd register-blocked kernel of our own at ~65, so there are no
// hand-written micro-kernels. bf16 tiles multiply in bf16 with f32 accumulation (oneDNN's matmul,
// onednn_matmul.h: 2-2.7x sgemm's rate on these tiles here); the f32 probabilities P and dS are
// rounded to bf16 for the products they enter, as GPU flash attention does, while the row sums,
// maxima and log-sum-exps stay f32. Operands are read in place when the product can (a unit-stride
// head dim, whatever the other strides), else packed per tile (odd strides), which costs 1/(query
// rows per tile) of the tile's flops. Forward tasks are (b, h, query block);
// backward tasks are (b, kv head), each owning every row it writes. Tasks never share an
// accumulator, so results do not depend on the thread count.
#include <algorithm>
#include <limits>
#include <type_traits>

#include "tidal/backend/cpu/attention_eager.h"
#include "tidal/backend/cpu/blas.h"
#include "tidal/backend/cpu/kernels.h"
#include "tidal/backend/cpu/onednn_matmul.h"
#include "tidal/backend/cpu/philox.h"
#include "tidal/backend/cpu/vec_math.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

// Tile sizes: forward rows x keys, backward rows x keys. For D = 64 (bench/attention_bench.cpp) every
// choice in 64..128 x 128..256 ran within ~8%; these were the fastest. Key tiles are a multiple of
// 16 (rows are processed in 16 lanes). -DTIDAL_FLASH_TILES=... overrides them for experiments.
#ifndef TIDAL_FLASH_TILES
#define TIDAL_FLASH_TILES 64, 256, 64, 128
#endif
constexpr int64_t kTiles[] = {TIDAL_FLASH_TILES};
constexpr int64_t kFwdBlockQ = kTiles[0], kFwdBlockK = kTiles[1], kBwdBlockQ = kTiles[2], kBwdBlockK = kTiles[3];

// A (B, H, L, D) tensor as a pointer and element strides.
template <typename T>
struct View4 {
  T* p = nullptr;
  int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  T* row(int64_t b, int64_t h, int64_t i) const { return p + b * s0 + h * s1 + i * s2; }
};

template <typename T>
View4<T> view4(const Tensor& t) {
  return {static_cast<T*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

template <typename A>
struct Mat {
  const A* p;
  int64_t ld;
};

// A rows x cols block at `base` (row stride rs, column stride cs) as the BLAS wants it: the memory
// itself when it has the accumulate type and unit column stride, else a packed copy in `buf`.
template <typename A, typename T>
Mat<A> tile(const T* base, int64_t rs, int64_t cs, int64_t rows, int64_t cols, A* buf) {
  if constexpr (std::is_same_v<T, A>) {
    if (cs == 1 && (rs >= cols || rows == 1)) return {base, std::max(rs, cols)};
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T* src = base + r * rs;
    A* dst = buf + r * cols;
    if (cs == 1) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) dst[c] = A(src[c]);
    } else {
      for (int64_t c = 0; c < cols; ++c) dst[c] = A(src[c * cs]);
    }
  }
  return {buf, cols};
}

// The type a tile product reads: bf16 tiles multiply in bf16 (f32 accumulation), others in their
// accumulate type.
template <typename T>
using gemm_t = std::conditional_t<std::is_same_v<T, BFloat16>, BFloat16, acc_t<T>>;

// C (f32/f64, row-major) = alpha op(A) op(B) + beta C for one tile, on this thread.
void tile_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, Mat<float> a, Mat<float> b, float beta,
               float* c, int64_t ldc) {
  blas::gemm(ta, tb, m, n, k, alpha, a.p, a.ld, b.p, b.ld, beta, c, ldc);
}
void tile_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, Mat<double> a, Mat<double> b,
               double beta, double* c, int64_t ldc) {
  blas::gemm(ta, tb, m, n, k, alpha, a.p, a.ld, b.p, b.ld, beta, c, ldc);
}
void tile_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, Mat<BFloat16> a, Mat<BFloat16> b,
               float beta, float* c, int64_t ldc) {
  onednn::gemm(ta, tb, m, n, k, alpha, a.p, a.ld, b.p, b.ld, beta, c, ldc);
}

// A rows x cols block of accumulate-type values (row stride ld) as a product's operand: itself, or
// rounded into `buf` (rows x cols) for a bf16 product.
template <typename G, typename A>
Mat<G> operand(const A* src, int64_t ld, int64_t rows, int64_t cols, G* buf) {
  if constexpr (std::is_same_v<G, A>) {
    return {src, ld};
  } else {
    for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) buf[r * cols + c] = store_as<G>(src[r * ld + c]);
    }
    return {buf, cols};
  }
}

// Writes a packed rows x cols block of A into a strided T destination.
template <typename T, typename A>
void store(T* dst, int64_t rs, int64_t cs, const A* src, int64_t rows, int64_t cols, A factor = A(1)) {
  for (int64_t r = 0; r < rows; ++r) {
    T* d = dst + r * rs;
    const A* sr = src + r * cols;
    if (cs == 1) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) d[c] = store_as<T>(sr[c] * factor);
    } else {
      for (int64_t c = 0; c < cols; ++c) d[c * cs] = T(sr[c] * factor);
    }
  }
}

// z[c] = keep_scale where the Philox uniform of stream position pos0 + c is >= p, else 0: the rule of
// tidal::dropout, so this kernel draws the mask the eager path's dropout op draws.
template <typename A>
void dropout_factors(uint64_t seed, uint64_t pos0, int64_t n, float p, A keep_scale, A* z, uint32_t* bits) {
  const uint64_t first = pos0 / 4;
  const int64_t lane0 = int64_t(pos0 % 4), blocks = (lane0 + n + 3) / 4;
  philox4x32_fill(first, seed, blocks, bits);
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) z[c] = u32_to_unit(bits[lane0 + c]) >= p ? keep_scale : A(0);
}

// Bump allocation from a per-slot workspace, 64-byte aligned pieces.
template <typename A>
struct Arena {
  A* p;
  A* take(int64_t n) {
    A* r = p;
    p += (n + 15) / 16 * 16;
    return r;
  }
  uint32_t* take_bits(int64_t n) { return take_as<uint32_t>(n); }
  // n elements of another type (bf16 tiles; the slot's bytes are only ever used as that type).
  template <typename U>
  U* take_as(int64_t n) {
    return reinterpret_cast<U*>(take((n * int64_t(sizeof(U)) + int64_t(sizeof(A)) - 1) / int64_t(sizeof(A))));
  }
};
inline int64_t arena_size(std::initializer_list<int64_t> pieces) {
  int64_t n = 0;
  for (int64_t k : pieces) n += (k + 15) / 16 * 16;
  return n;
}

// How many workspace slots (threads) `tasks` tasks worth `flops` in all deserve: at least ~1 MFLOP
// each, so tiny problems (gradchecks, decoding) do not pay for a parallel region.
inline int64_t slots_for(int64_t tasks, double flops) {
  const int64_t by_work = int64_t(flops / double(1 << 20)) + 1;
  return std::max<int64_t>(1, std::min<int64_t>({int64_t(num_threads()), tasks, by_work}));
}

// Runs f(task, slot) for tasks [0, n) split statically over `slots` slots; slot s owns workspace
// row s. The split never changes a result: tasks share no accumulator.
template <typename F>
void for_tasks(int64_t n, int64_t slots, F&& f) {
  parallel_for(0, slots, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      for (int64_t task = s * n / slots; task < (s + 1) * n / slots; ++task) f(task, s);
  });
}

struct Dims {
  int64_t b, hq, hkv, g, t, s, d, dv;
  explicit Dims(const Tensor& q, const Tensor& k, const Tensor& v)
      : b(q.size(0)),
        hq(q.size(1)),
        hkv(k.size(1)),
        g(q.size(1) / k.size(1)),
        t(q.size(2)),
        s(k.size(2)),
        d(q.size(3)),
        dv(v.size(3)) {}
  double flops() const { return 2.0 * double(b * hq * t * s) * double(d + dv); }
};

// The Philox position of probability (b, h, i, j): FlashArgs' global frame, resolved once per call
// (the defaults, T_g = T, S_g = S and no offsets, give rng_start + ((b*Hq + h)*T + i)*S + j).
struct RngFrame {
  uint64_t start;
  int64_t hq, rows, cols;
  RngFrame(const FlashArgs& cfg, const Dims& n)
      : start(cfg.rng_start +
              uint64_t(cfg.rng_row_offset * (cfg.rng_cols > 0 ? cfg.rng_cols : n.s) + cfg.rng_col_offset)),
        hq(n.hq),
        rows(cfg.rng_rows > 0 ? cfg.rng_rows : n.t),
        cols(cfg.rng_cols > 0 ? cfg.rng_cols : n.s) {}
  uint64_t pos(int64_t bi, int64_t h, int64_t i, int64_t j) const {
    return start + uint64_t(((bi * hq + h) * rows + i) * cols + j);
  }
};

// How the kernels carve their workspace (elements of the accumulate type). The op layer sizes the
// workspace with the same functions, on meta tensors too, so a planner run accounts for it.
struct ForwardLayout {
  int64_t tasks, slots, per_slot;
};
// bf16 (`rounded`): P rounded to bf16 for P V, in half a tile of f32 elements.
ForwardLayout forward_layout(const Dims& n, bool rounded) {
  const int64_t nqb = (n.t + kFwdBlockQ - 1) / kFwdBlockQ, tasks = n.b * n.hq * nqb;
  return {tasks, slots_for(tasks, n.flops()),
          arena_size({kFwdBlockQ * n.d, kFwdBlockK * n.d, kFwdBlockK * n.dv, kFwdBlockQ * kFwdBlockK, kFwdBlockQ * n.dv,
                      kFwdBlockQ, kFwdBlockQ, kFwdBlockK, kFwdBlockK + 8, rounded ? kFwdBlockQ * kFwdBlockK / 2 : 0})};
}

struct BackwardLayout {
  int64_t delta;  // rowsum(dO * O), (B, Hq, T), rounded up to a 64-byte multiple
  bool dq_buffered;
  int64_t tasks, slots, per_slot;
  int64_t total() const { return delta + slots * per_slot; }
};
// dq is accumulated in place when it is a plain accumulate-type tensor with unit inner stride,
// else in a per-task buffer.
BackwardLayout backward_layout(const Dims& n, const Tensor& dq, bool acc_dtype) {
  const bool dq_in_place = dq.defined() && acc_dtype && dq.stride(3) == 1 && (dq.stride(2) >= n.d || n.t == 1);
  const bool dq_buffered = dq.defined() && !dq_in_place;
  const int64_t tasks = n.b * n.hkv;
  return {(n.b * n.hq * n.t + 15) / 16 * 16, dq_buffered, tasks, slots_for(tasks, 2.5 * n.flops()),
          arena_size({kBwdBlockQ * n.d, kBwdBlockQ * n.dv, kBwdBlockK * n.d, kBwdBlockK * n.dv, kBwdBlockQ * kBwdBlockK,
                      kBwdBlockQ * kBwdBlockK, kBwdBlockK * n.d, kBwdBlockK * n.dv, kBwdBlockK, kBwdBlockK + 8,
                      dq_buffered ? n.g * n.t * n.d : 0, acc_dtype ? 0 : kBwdBlockQ * kBwdBlockK / 2,
                      acc_dtype ? 0 : kBwdBlockQ * kBwdBlockK / 2})};
}

template <typename T>
void forward_typed(const FlashArgs& cfg, const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& workspace) {
  using A = acc_t<T>;
  const Dims n(q, k, v);
  const View4<const T> qv = view4<const T>(q), kv = view4<const T>(k), vv = view4<const T>(v);
  const View4<T> ov = view4<T>(out);
  A* lp = lse.defined() ? lse.data<A>() : nullptr;
  const A scale = A(cfg.scale), keep_scale = A(1.0 / (1.0 - cfg.dropout_p));
  const bool dropout = cfg.dropout_p > 0;
  const RngFrame rng(cfg, n);
  const int64_t nqb = (n.t + kFwdBlockQ - 1) / kFwdBlockQ;
  using G = gemm_t<T>;
  const ForwardLayout lay = forward_layout(n, !std::is_same_v<G, A>);
  const int64_t tasks = lay.tasks, slots = lay.slots, per_slot = lay.per_slot;
  TIDAL_ASSERT(workspace.numel() >= slots * per_slot && workspace.dtype() == dtype_v<A>, "flash workspace too small");
  const Tensor& ws = workspace;
  for_tasks(tasks, slots, [&](int64_t task, int64_t slot) {
    Arena<A> arena{ws.data<A>() + slot * per_slot};
    A *qbuf = arena.take(kFwdBlockQ * n.d), *kbuf = arena.take(kFwdBlockK * n.d);
    A* vbuf = arena.take(kFwdBlockK * n.dv);
    A *s = arena.take(kFwdBlockQ * kFwdBlockK), *o = arena.take(kFwdBlockQ * n.dv), *m = arena.take(kFwdBlockQ);
    A *l = arena.take(kFwdBlockQ), *z = arena.take(kFwdBlockK);
    uint32_t* bits = arena.take_bits(kFwdBlockK + 8);
    G* p16 = std::is_same_v<G, A> ? nullptr : arena.template take_as<G>(kFwdBlockQ * kFwdBlockK);
    const int64_t bh = task / nqb, w = task % nqb;
    const int64_t qb = w % 2 == 0 ? w / 2 : nqb - 1 - w / 2;  // pairs cheap and costly causal blocks
    const int64_t b = bh / n.hq, h = bh % n.hq, kh = h / n.g;
    const int64_t i0 = qb * kFwdBlockQ, nq = std::min(kFwdBlockQ, n.t - i0);
    const Mat<G> qt = tile<G>(qv.row(b, h, i0), qv.s2, qv.s3, nq, n.d, reinterpret_cast<G*>(qbuf));
    const int64_t key_end = cfg.causal ? std::clamp<int64_t>(i0 + nq + n.s - n.t, 0, n.s) : n.s;
    std::fill(m, m + nq, -std::numeric_limits<A>::infinity());
    std::fill(l, l + nq, A(0));
    std::fill(o, o + nq * n.dv, A(0));
    for (int64_t j0 = 0; j0 < key_end; j0 += kFwdBlockK) {
      const int64_t nk = std::min(kFwdBlockK, key_end - j0), nk16 = (nk + 15) / 16 * 16;
      const Mat<G> kt = tile<G>(kv.row(b, kh, j0), kv.s2, kv.s3, nk, n.d, reinterpret_cast<G*>(kbuf));
      const Mat<G> vt = tile<G>(vv.row(b, kh, j0), vv.s2, vv.s3, nk, n.dv, reinterpret_cast<G*>(vbuf));
      tile_gemm(false, true, nq, nk, n.d, scale, qt, kt, A(0), s, kFwdBlockK);  // scale * Q K^T
      for (int64_t r = 0; r < nq; ++r) {
        A* sr = s + r * kFwdBlockK;
        const int64_t i = i0 + r, nv = std::clamp<int64_t>(visible_keys(cfg.causal, i, n.t, n.s) - j0, 0, nk);
        if (nv == 0) {
          std::fill(sr, sr + nk, A(0));
          continue;
        }
        // Masked keys (and the padding to 16 lanes) become -inf, whose exp is 0: one loop shape.
        std::fill(sr + nv, sr + nk16, -std::numeric_limits<A>::infinity());
        const A mx = row_max(sr, nk16, m[r]);
        const A sum = exp_row(sr, nk16, mx);
        const A corr = fast_exp(m[r] - mx);  // 0 on the first visible tile (m = -inf)
        l[r] = l[r] * corr + sum;
        m[r] = mx;
        if (corr != A(1)) {
          A* orow = o + r * n.dv;
#pragma omp simd
          for (int64_t c = 0; c < n.dv; ++c) orow[c] *= corr;
        }
        if (dropout) {
          dropout_factors(cfg.seed, rng.pos(b, h, i, j0), nv, float(cfg.dropout_p), keep_scale, z, bits);
#pragma omp simd
          for (int64_t c = 0; c < nv; ++c) sr[c] *= z[c];  // masked keys are 0 already
        }
      }
      tile_gemm(false, false, nq, n.dv, nk, A(1), operand<G>(s, kFwdBlockK, nq, nk, p16), vt, A(1), o, n.dv);
    }
    for (int64_t r = 0; r < nq; ++r) {
      const bool any = l[r] > A(0);
      store(ov.row(b, h, i0 + r), 0, ov.s3, o + r * n.dv, 1, n.dv, any ? A(1) / l[r] : A(0));
      if (lp) lp[(b * n.hq + h) * n.t + i0 + r] = any ? m[r] + std::log(l[r]) : std::numeric_limits<A>::infinity();
    }
  });
}

template <typename T>
void backward_typed(const FlashArgs& cfg, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                    const Tensor& workspace) {
  using A = acc_t<T>;
  const Dims n(q, k, v);
  const View4<const T> qv = view4<const T>(q), kv = view4<const T>(k), vv = view4<const T>(v);
  const View4<const T> dov = view4<const T>(dout), ov = view4<const T>(out);
  const A* lp = lse.data<A>();
  const A scale = A(cfg.scale), keep_scale = A(1.0 / (1.0 - cfg.dropout_p));
  const bool dropout = cfg.dropout_p > 0;
  const RngFrame rng(cfg, n);

  // delta[b, h, i] = rowsum(dO * O): the softmax backward's rowsum(P * dP), dropout included.
  using G = gemm_t<T>;
  const BackwardLayout lay = backward_layout(n, dq, std::is_same_v<T, A>);
  TIDAL_ASSERT(workspace.numel() >= lay.total() && workspace.dtype() == dtype_v<A>, "flash workspace too small");
  A* dp = workspace.data<A>();  // (B, Hq, T) first, then the per-slot tile buffers
  const int64_t rows = n.b * n.hq * n.t, row_grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(n.dv, 1));
  parallel_for(0, rows, row_grain, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / (n.hq * n.t), h = (r / n.t) % n.hq, i = r % n.t;
      const T* g = dov.row(b, h, i);
      const T* o = ov.row(b, h, i);
      A acc = 0;
      if (dov.s3 == 1 && ov.s3 == 1) {
#pragma omp simd reduction(+ : acc)
        for (int64_t c = 0; c < n.dv; ++c) acc += A(g[c]) * A(o[c]);
      } else {
        for (int64_t c = 0; c < n.dv; ++c) acc += A(g[c * dov.s3]) * A(o[c * ov.s3]);
      }
      dp[r] = acc;
    }
  });

  View4<T> dqv = dq.defined() ? view4<T>(dq) : View4<T>{};
  const bool dq_buffered = lay.dq_buffered;
  const int64_t tasks = lay.tasks, slots = lay.slots, per_slot = lay.per_slot;
  A* ws_base = dp + lay.delta;
  for_tasks(tasks, slots, [&](int64_t task, int64_t slot) {
    Arena<A> arena{ws_base + slot * per_slot};
    A *qbuf = arena.take(kBwdBlockQ * n.d), *dobuf = arena.take(kBwdBlockQ * n.dv);
    A *kbuf = arena.take(kBwdBlockK * n.d), *vbuf = arena.take(kBwdBlockK * n.dv);
    A *p = arena.take(kBwdBlockQ * kBwdBlockK), *ds = arena.take(kBwdBlockQ * kBwdBlockK);
    A *dk_acc = arena.take(kBwdBlockK * n.d), *dv_acc = arena.take(kBwdBlockK * n.dv), *z = arena.take(kBwdBlockK);
    uint32_t* bits = arena.take_bits(kBwdBlockK + 8);
    A* dq_buf = arena.take(dq_buffered ? n.g * n.t * n.d : 0);
    G* p16 = std::is_same_v<G, A> ? nullptr : arena.template take_as<G>(kBwdBlockQ * kBwdBlockK);
    G* ds16 = std::is_same_v<G, A> ? nullptr : arena.template take_as<G>(kBwdBlockQ * kBwdBlockK);
    const int64_t b = task / n.hkv, kh = task % n.hkv;
    // The dq rows of query head g of this group, as (pointer, row stride).
    auto dq_rows = [&](int64_t g, int64_t i0) -> std::pair<A*, int64_t> {
      if (dq_buffered) return {dq_buf + (g * n.t + i0) * n.d, n.d};
      if constexpr (std::is_same_v<T, A>) return {dqv.row(b, kh * n.g + g, i0), std::max(dqv.s2, n.d)};
      return {nullptr, 0};
    };
    if (dq.defined())
      for (int64_t g = 0; g < n.g; ++g)
        for (int64_t i = 0; i < n.t; ++i) std::fill_n(dq_rows(g, i).first, n.d, A(0));
    for (int64_t j0 = 0; j0 < n.s; j0 += kBwdBlockK) {
      const int64_t nk = std::min(kBwdBlockK, n.s - j0);
      const Mat<G> kt = tile<G>(kv.row(b, kh, j0), kv.s2, kv.s3, nk, n.d, reinterpret_cast<G*>(kbuf));
      const Mat<G> vt = tile<G>(vv.row(b, kh, j0), vv.s2, vv.s3, nk, n.dv, reinterpret_cast<G*>(vbuf));
      std::fill(dk_acc, dk_acc + nk * n.d, A(0));
      std::fill(dv_acc, dv_acc + nk * n.dv, A(0));
      const int64_t q_first = cfg.causal ? std::max<int64_t>(0, j0 - (n.s - n.t)) : 0;
      for (int64_t g = 0; g < n.g; ++g) {
        const int64_t h = kh * n.g + g;
        for (int64_t i0 = q_first / kBwdBlockQ * kBwdBlockQ; i0 < n.t; i0 += kBwdBlockQ) {
          const int64_t nq = std::min(kBwdBlockQ, n.t - i0);
          const Mat<G> qt = tile<G>(qv.row(b, h, i0), qv.s2, qv.s3, nq, n.d, reinterpret_cast<G*>(qbuf));
          const Mat<G> dot = tile<G>(dov.row(b, h, i0), dov.s2, dov.s3, nq, n.dv, reinterpret_cast<G*>(dobuf));
          tile_gemm(false, true, nq, nk, n.d, scale, qt, kt, A(0), p, kBwdBlockK);    // S
          tile_gemm(false, true, nq, nk, n.dv, A(1), dot, vt, A(0), ds, kBwdBlockK);  // dP
          for (int64_t r = 0; r < nq; ++r) {
            const int64_t i = i0 + r, nv = std::clamp<int64_t>(visible_keys(cfg.causal, i, n.t, n.s) - j0, 0, nk);
            A* pr = p + r * kBwdBlockK;
            A* dr = ds + r * kBwdBlockK;
            const A row_lse = lp[(b * n.hq + h) * n.t + i], row_delta = dp[(b * n.hq + h) * n.t + i];
            if (dropout && nv > 0) {
              dropout_factors(cfg.seed, rng.pos(b, h, i, j0), nv, float(cfg.dropout_p), keep_scale, z, bits);
#pragma omp simd
              for (int64_t c = 0; c < nv; ++c) {
                const A e = fast_exp(pr[c] - row_lse);
                pr[c] = e * z[c];                        // dropped probabilities, for dV
                dr[c] = e * (dr[c] * z[c] - row_delta);  // dS
              }
            } else {
#pragma omp simd
              for (int64_t c = 0; c < nv; ++c) {
                const A e = fast_exp(pr[c] - row_lse);
                pr[c] = e;
                dr[c] = e * (dr[c] - row_delta);
              }
            }
            std::fill(pr + nv, pr + nk, A(0));
            std::fill(dr + nv, dr + nk, A(0));
          }
          // dV += P^T dO, dK += scale dS^T Q, dQ += scale dS K
          const Mat<G> pt = operand<G>(p, kBwdBlockK, nq, nk, p16), dst = operand<G>(ds, kBwdBlockK, nq, nk, ds16);
          tile_gemm(true, false, nk, n.dv, nq, A(1), pt, dot, A(1), dv_acc, n.dv);
          tile_gemm(true, false, nk, n.d, nq, scale, dst, qt, A(1), dk_acc, n.d);
          if (dq.defined()) {
            const auto [dqp, ld] = dq_rows(g, i0);
            tile_gemm(false, false, nq, n.d, nk, scale, dst, kt, A(1), dqp, ld);
          }
        }
      }
      if (dk.defined()) {
        const View4<T> dkv = view4<T>(dk);
        store(dkv.row(b, kh, j0), dkv.s2, dkv.s3, dk_acc, nk, n.d);
      }
      if (dv.defined()) {
        const View4<T> dvv = view4<T>(dv);
        store(dvv.row(b, kh, j0), dvv.s2, dvv.s3, dv_acc, nk, n.dv);
      }
    }
    if (dq_buffered)
      for (int64_t g = 0; g < n.g; ++g)
        store(dqv.row(b, kh * n.g + g, 0), dqv.s2, dqv.s3, dq_buf + g * n.t * n.d, n.t, n.d);
  });
}

}  // namespace

FlashTiles flash_tiles() { return {kFwdBlockQ, kFwdBlockK, kBwdBlockQ, kBwdBlockK}; }

// q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv), out (B, Hq, T, Dv): any strides, one dtype.
// lse (B, Hq, T) contiguous in the accumulate type (f32, or f64 for f64), or undefined when not
// needed; rows that see no key get out = 0 and lse = +inf.
// Scratch the kernels need, in elements of the accumulate type (f32, or f64 for f64): per-thread
// tile buffers, and for the backward the per-row rowsum(dO * O). The op layer allocates it (a 1-D
// tensor), on meta tensors too, so a planner run accounts for it like a real one.
int64_t CpuKernels::flash_forward_workspace(const FlashArgs&, const Tensor& q, const Tensor& k, const Tensor& v) const {
  const ForwardLayout lay = forward_layout(Dims(q, k, v), q.dtype() == DType::bf16);
  return lay.slots * lay.per_slot;
}

int64_t CpuKernels::flash_backward_workspace(const FlashArgs&, const Tensor& dq, const Tensor& q, const Tensor& k,
                                             const Tensor& v) const {
  return backward_layout(Dims(q, k, v), dq, q.dtype() != DType::bf16).total();
}

void CpuKernels::flash_attention_forward(Stream&, const FlashArgs& cfg, const Tensor& out, const Tensor& lse,
                                         const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& workspace) {
  dispatch_float(q.dtype(), "flash_attention",
                 [&](auto tag) { forward_typed<typename decltype(tag)::type>(cfg, out, lse, q, k, v, workspace); });
}

// Gradients of the forward above. dq/dk/dv have the shapes of q/k/v, any strides, the inputs' dtype;
// an undefined one is not computed. Parallel over (batch, kv head): each task owns the dk/dv rows of
// its kv head and the dq rows of the query heads that share it, so no two threads write one row.
void CpuKernels::flash_attention_backward(Stream&, const FlashArgs& cfg, const Tensor& dq, const Tensor& dk,
                                          const Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                                          const Tensor& v, const Tensor& out, const Tensor& lse,
                                          const Tensor& workspace) {
  dispatch_float(q.dtype(), "flash_attention", [&](auto tag) {
    backward_typed<typename decltype(tag)::type>(cfg, dq, dk, dv, dout, q, k, v, out, lse, workspace);
  });
}

}  // namespace tidal::cpu
