#include "tidal/backend/cpu/attention_flash.h"

// Note [Flash attention on the CPU]: tiles of query rows x keys. The tile products go through the
// BLAS wrapper, single-threaded inside our parallel region: oneDNN's sgemm runs a 64x128x64 tile at
// ~170 GFLOP/s on one core, an omp-simd register-blocked kernel of our own at ~65, so there are no
// hand-written micro-kernels. bf16 tiles multiply in bf16 with f32 accumulation (oneDNN's matmul,
// onednn_matmul.h: 2-2.7x sgemm's rate on these tiles here); the f32 probabilities P and dS are
// rounded to bf16 for the products they enter, as GPU flash attention does, while the row sums,
// maxima and log-sum-exps stay f32. Operands are read in place when the product can (a unit-stride
// head dim, whatever the other strides), else packed per tile (odd strides), which costs 1/(query
// rows per tile) of the tile's flops. A causal (or sliding-window) mask limits the work: a query
// block walks only the keys its rows see (visible_key_range: from its first row's first key to its
// last row's diagonal), and the backward's key tile only the query blocks that see it
// (rows_seeing_keys), so a window W costs O(T·W), not O(T·S); packed documents (FlashArgs::documents)
// narrow both the same way. Forward tasks are (b, h, query block);
// backward tasks are (b, kv head), each owning every row it writes; with fewer than four such pairs
// (an MQA sample) each pair's key tiles are cut into ranges, one task each, whose dq partials are
// summed in range order afterwards (BackwardLayout). Tasks never share an accumulator and the cut
// depends on the shapes alone, so results do not depend on the thread count.
#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "tidal/backend/cpu/attention_flash_tiles.h"
#include "tidal/backend/cpu/kernels.h"
#include "tidal/backend/cpu/vec_math.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

using namespace flash_detail;

// Tile sizes: forward rows x keys, backward rows x keys. For D = 64 (bench/attention_bench.cpp) every
// choice in 64..128 x 128..256 ran within ~8%; these were the fastest. Key tiles are a multiple of
// 16 (rows are processed in 16 lanes). -DTIDAL_FLASH_TILES=... overrides them for experiments.
#ifndef TIDAL_FLASH_TILES
#define TIDAL_FLASH_TILES 64, 256, 64, 128
#endif
constexpr int64_t kTiles[] = {TIDAL_FLASH_TILES};
constexpr int64_t kFwdBlockQ = kTiles[0], kFwdBlockK = kTiles[1], kBwdBlockQ = kTiles[2], kBwdBlockK = kTiles[3];

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

// Backward tasks own a (batch, kv head) and its key tiles. With fewer than kMinBackwardTasks such pairs (an MQA
// sample: one) each pair's key tiles are cut into `splits` contiguous ranges, one task each, so the cores share
// the work; their dq contributions go to per-task partial buffers summed in split order afterwards. The split count
// depends on the shapes only, never on the thread count, so neither do the results.
constexpr int64_t kMinBackwardTasks = 4;

struct BackwardLayout {
  int64_t delta;  // rowsum(dO * O), (B, Hq, T), rounded up to a 64-byte multiple
  bool dq_buffered;
  int64_t splits;    // key-tile ranges per (batch, kv head)
  int64_t partials;  // splits > 1 with dq: every task's dq (G, T, D), summed afterwards
  int64_t tasks, slots, per_slot;
  int64_t total() const { return delta + partials + slots * per_slot; }
};
// dq is accumulated in place when it is a plain accumulate-type tensor with unit inner stride,
// else in a per-task buffer.
BackwardLayout backward_layout(const Dims& n, const Tensor& dq, bool acc_dtype) {
  const int64_t pairs = n.b * n.hkv, key_tiles = (n.s + kBwdBlockK - 1) / kBwdBlockK;
  const int64_t splits = pairs >= kMinBackwardTasks
                             ? 1
                             : std::max<int64_t>(1, std::min(key_tiles, (kMinBackwardTasks + pairs - 1) / pairs));
  const bool dq_in_place =
      dq.defined() && splits == 1 && acc_dtype && dq.stride(3) == 1 && (dq.stride(2) >= n.d || n.t == 1);
  const bool dq_buffered = dq.defined() && splits == 1 && !dq_in_place;
  const int64_t tasks = pairs * splits;
  const int64_t partials = dq.defined() && splits > 1 ? tasks * n.g * n.t * n.d : 0;
  return {(n.b * n.hq * n.t + 15) / 16 * 16,
          dq_buffered,
          splits,
          partials,
          tasks,
          slots_for(tasks, 2.5 * n.flops()),
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
    // The keys some row of the block sees: the first row's first to the last row's diagonal.
    const int64_t key_first = visible_key_range(cfg, b, i0, n.t, n.s).first;
    const int64_t key_end = visible_key_range(cfg, b, i0 + nq - 1, n.t, n.s).end;
    std::fill(m, m + nq, -std::numeric_limits<A>::infinity());
    std::fill(l, l + nq, A(0));
    std::fill(o, o + nq * n.dv, A(0));
    for (int64_t j0 = key_first; j0 < key_end; j0 += kFwdBlockK) {
      const int64_t nk = std::min(kFwdBlockK, key_end - j0), nk16 = (nk + 15) / 16 * 16;
      const Mat<G> kt = tile<G>(kv.row(b, kh, j0), kv.s2, kv.s3, nk, n.d, reinterpret_cast<G*>(kbuf));
      const Mat<G> vt = tile<G>(vv.row(b, kh, j0), vv.s2, vv.s3, nk, n.dv, reinterpret_cast<G*>(vbuf));
      tile_gemm(false, true, nq, nk, n.d, scale, qt, kt, A(0), s, kFwdBlockK);  // scale * Q K^T
      for (int64_t r = 0; r < nq; ++r) {
        A* sr = s + r * kFwdBlockK;
        const int64_t i = i0 + r;
        const KeyRange keys = visible_key_range(cfg, b, i, n.t, n.s);  // the row's keys [lo, nv) of the tile
        const int64_t lo = std::clamp<int64_t>(keys.first - j0, 0, nk), nv = std::clamp<int64_t>(keys.end - j0, 0, nk);
        if (lo >= nv) {
          std::fill(sr, sr + nk, A(0));
          continue;
        }
        // Masked keys (and the padding to 16 lanes) become -inf, whose exp is 0: one loop shape.
        std::fill(sr, sr + lo, -std::numeric_limits<A>::infinity());
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
          dropout_factors(cfg.seed, rng.pos(b, h, i, j0 + lo), nv - lo, float(cfg.dropout_p), keep_scale, z, bits);
#pragma omp simd
          for (int64_t c = lo; c < nv; ++c) sr[c] *= z[c - lo];  // masked keys are 0 already
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

// One query row of a backward tile, S in pr and dP in dr: on its visible keys [lo, nv) pr becomes
// the (dropped) probabilities P·z for dV and dr becomes dS = P·(dP·z − delta), z being the dropout
// factors of keys lo.. (none: 1); both are 0 on the masked keys.
template <typename A>
void row_backward(A* pr, A* dr, int64_t lo, int64_t nv, int64_t nk, A row_lse, A row_delta, const A* z) {
  if (z) {
#pragma omp simd
    for (int64_t c = lo; c < nv; ++c) {
      const A e = fast_exp(pr[c] - row_lse), zc = z[c - lo];
      pr[c] = e * zc;
      dr[c] = e * (dr[c] * zc - row_delta);
    }
  } else {
#pragma omp simd
    for (int64_t c = lo; c < nv; ++c) {
      const A e = fast_exp(pr[c] - row_lse);
      pr[c] = e;
      dr[c] = e * (dr[c] - row_delta);
    }
  }
  std::fill(pr, pr + lo, A(0));
  std::fill(dr, dr + lo, A(0));
  std::fill(pr + nv, pr + nk, A(0));
  std::fill(dr + nv, dr + nk, A(0));
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

  // delta[b, h, i] = rowsum(dO * O): the softmax backward's rowsum(P * dP), dropout included; minus the
  // log-sum-exp's gradient when the caller used it (FlashArgs::lse_grad).
  using G = gemm_t<T>;
  const A* dlse = static_cast<const A*>(cfg.lse_grad);
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
      dp[r] = dlse != nullptr ? acc - dlse[r] : acc;
    }
  });

  View4<T> dqv = dq.defined() ? view4<T>(dq) : View4<T>{};
  const bool dq_buffered = lay.dq_buffered;
  const int64_t tasks = lay.tasks, slots = lay.slots, per_slot = lay.per_slot, splits = lay.splits;
  const int64_t key_tiles = (n.s + kBwdBlockK - 1) / kBwdBlockK;
  A* partials = dp + lay.delta;  // splits > 1: task t's dq at t * (G T D)
  A* ws_base = partials + lay.partials;
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
    const int64_t pair = task / splits, split = task % splits, b = pair / n.hkv, kh = pair % n.hkv;
    const int64_t j_begin = split * key_tiles / splits * kBwdBlockK;
    const int64_t j_end = std::min(n.s, (split + 1) * key_tiles / splits * kBwdBlockK);
    A* partial = splits > 1 ? partials + task * n.g * n.t * n.d : nullptr;
    // The dq rows of query head g of this group, as (pointer, row stride).
    auto dq_rows = [&](int64_t g, int64_t i0) -> std::pair<A*, int64_t> {
      if (partial != nullptr) return {partial + (g * n.t + i0) * n.d, n.d};
      if (dq_buffered) return {dq_buf + (g * n.t + i0) * n.d, n.d};
      if constexpr (std::is_same_v<T, A>) return {dqv.row(b, kh * n.g + g, i0), std::max(dqv.s2, n.d)};
      return {nullptr, 0};
    };
    if (dq.defined())
      for (int64_t g = 0; g < n.g; ++g)
        for (int64_t i = 0; i < n.t; ++i) std::fill_n(dq_rows(g, i).first, n.d, A(0));
    for (int64_t j0 = j_begin; j0 < j_end; j0 += kBwdBlockK) {
      const int64_t nk = std::min(kBwdBlockK, n.s - j0);
      const Mat<G> kt = tile<G>(kv.row(b, kh, j0), kv.s2, kv.s3, nk, n.d, reinterpret_cast<G*>(kbuf));
      const Mat<G> vt = tile<G>(vv.row(b, kh, j0), vv.s2, vv.s3, nk, n.dv, reinterpret_cast<G*>(vbuf));
      std::fill(dk_acc, dk_acc + nk * n.d, A(0));
      std::fill(dv_acc, dv_acc + nk * n.dv, A(0));
      const RowRange seen = rows_seeing_keys(cfg, b, j0, j0 + nk, n.t, n.s);  // the query blocks that see the tile
      for (int64_t g = 0; g < n.g && seen.first < seen.end; ++g) {
        const int64_t h = kh * n.g + g;
        for (int64_t i0 = seen.first / kBwdBlockQ * kBwdBlockQ; i0 < seen.end; i0 += kBwdBlockQ) {
          const int64_t nq = std::min(kBwdBlockQ, n.t - i0);
          const Mat<G> qt = tile<G>(qv.row(b, h, i0), qv.s2, qv.s3, nq, n.d, reinterpret_cast<G*>(qbuf));
          const Mat<G> dot = tile<G>(dov.row(b, h, i0), dov.s2, dov.s3, nq, n.dv, reinterpret_cast<G*>(dobuf));
          tile_gemm(false, true, nq, nk, n.d, scale, qt, kt, A(0), p, kBwdBlockK);    // S
          tile_gemm(false, true, nq, nk, n.dv, A(1), dot, vt, A(0), ds, kBwdBlockK);  // dP
          for (int64_t r = 0; r < nq; ++r) {
            const int64_t i = i0 + r;
            const KeyRange keys = visible_key_range(cfg, b, i, n.t, n.s);  // the row's keys [lo, nv) of the tile
            const int64_t lo = std::clamp<int64_t>(keys.first - j0, 0, nk);
            const int64_t nv = std::max(lo, std::clamp<int64_t>(keys.end - j0, 0, nk));
            A* pr = p + r * kBwdBlockK;
            A* dr = ds + r * kBwdBlockK;
            const A row_lse = lp[(b * n.hq + h) * n.t + i], row_delta = dp[(b * n.hq + h) * n.t + i];
            const bool drop_row = dropout && nv > lo;
            if (drop_row)
              dropout_factors(cfg.seed, rng.pos(b, h, i, j0 + lo), nv - lo, float(cfg.dropout_p), keep_scale, z, bits);
            row_backward(pr, dr, lo, nv, nk, row_lse, row_delta, drop_row ? z : nullptr);
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
  if (!dq.defined() || splits == 1) return;
  // dq row by row: the pair's splits' partials summed in split order.
  parallel_for(0, n.b * n.hq * n.t, 256, [&](int64_t r0, int64_t r1) {
    std::vector<A> row(static_cast<size_t>(n.d));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / (n.hq * n.t), h = (r / n.t) % n.hq, i = r % n.t, kh = h / n.g, g = h % n.g;
      std::fill(row.begin(), row.end(), A(0));
      for (int64_t split = 0; split < splits; ++split) {
        const A* src = partials + ((b * n.hkv + kh) * splits + split) * n.g * n.t * n.d + (g * n.t + i) * n.d;
        for (int64_t c = 0; c < n.d; ++c) row[size_t(c)] += src[c];
      }
      store(dqv.row(b, h, i), dqv.s2, dqv.s3, row.data(), 1, n.d);
    }
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
