// Flash attention's outputs on the GPU, computed eagerly (Note [Eager flash attention on CUDA]).
//
// Note [Eager flash attention on CUDA]: what cuDNN's fused attention does not take (cudnn_sdpa.h
// sdpa_refusal: f32, f64, dropout, head dims above 128, causal with T != S, a sliding window, compressed keys, a
// differentiated log-sum-exp, ...) runs here. For each (batch, kv head) group of g = Hq/Hkv query heads the kernels
// materialize the group's (g, rows, S) scores in the workspace, query rows by chunks of at most 2^26 scores: scale *
// q k^T as one strided-batched cuBLASLt product (k shared by the group), a row softmax kernel (causal bottom-right
// mask, sliding window, FlashArgs' compressed keys, lse, tidal's Philox dropout as the CPU draws it), then probs @ v
// straight into `out`. The products cover all S keys: a window masks the scores here but does not shorten the work
// (the CPU kernel skips the tiles outside it). bf16 multiplies in bf16 with f32 accumulation and rounds P and dS to
// bf16 for the products they enter, as the CPU kernel does. The backward recomputes P from lse, forms dS = P * (dP -
// delta) with delta = rowsum(dout * out) less the log-sum-exp's gradient (FlashArgs::lse_grad, attention_with_lse),
// and accumulates dK and dV over the chunks and the group's heads in f32 (f64) scratch with beta = 1, in (chunk,
// head) order, then converts them into dq/dk/dv of any strides. Groups run one after another on the stream, reusing
// one scratch region.
#include <algorithm>

#include "tidal/backend/cuda/attention_eager.h"
#include "tidal/backend/cuda/attention_launch.h"
#include "tidal/backend/cuda/cublaslt.h"
#include "tidal/backend/cuda/cudnn_sdpa.h"
#include "tidal/backend/cuda/elementwise_launch.h"
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/memory_scope.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

int64_t round64(int64_t n) { return (n + 63) / 64 * 64; }

// The most scores one chunk of query rows holds (g * rows * S): 256 MiB of f32.
constexpr int64_t kMaxChunkScores = int64_t(1) << 26;

struct Dims {
  int64_t b, hq, hkv, g, t, s, d, dv;
  int64_t tc;  // query rows per chunk
  Dims(const Tensor& q, const Tensor& k, const Tensor& v)
      : b(q.size(0)),
        hq(q.size(1)),
        hkv(k.size(1)),
        g(q.size(1) / std::max<int64_t>(k.size(1), 1)),
        t(q.size(2)),
        s(k.size(2)),
        d(q.size(3)),
        dv(v.size(3)),
        tc(std::clamp<int64_t>(kMaxChunkScores / std::max<int64_t>(g * s, 1), 1, std::max<int64_t>(t, 1))) {}
  int64_t scores() const { return round64(g * tc * s); }
  // bf16 copies of a (g, tc, S) buffer, in accumulate-type (f32) elements.
  int64_t rounded(bool bf16) const { return bf16 ? round64((g * tc * s + 1) / 2) : 0; }
};

// The workspace's pieces, in accumulate-type elements.
struct BackwardLayout {
  int64_t delta, p, ds, p16, ds16, dq, dk, dv;
  int64_t total() const { return delta + p + ds + p16 + ds16 + dq + dk + dv; }
};
BackwardLayout backward_layout(const Dims& n, bool bf16) {
  return {round64(n.b * n.hq * n.t), n.scores(),         n.scores(),         n.rounded(bf16), n.rounded(bf16),
          round64(n.g * n.tc * n.d), round64(n.s * n.d), round64(n.s * n.dv)};
}

// `t` itself when its (L, D) matrices are cuBLASLt operands, else a contiguous copy (scratch from
// tidal's allocator, category temporary).
Tensor gemm_ready(cudaStream_t s, const Tensor& t) {
  bool trans = false;
  int64_t ld = 0;
  if (gemm_layout(t.size(2), t.size(3), t.stride(2), t.stride(3), trans, ld)) return t;
  MemoryScope scope(MemoryCategory::temporary);
  Tensor c = empty(t.shape(), t.dtype(), t.device());
  launch_copy(s, strided(c), strided(t), t.numel());
  return c;
}

// The (L, D) matrix of head h of batch b in `t` from row `row0` on (transposed: its (D, L) transpose),
// with the head stride as the batch stride.
GemmOperand head(const Tensor& t, int64_t b, int64_t h, int64_t row0, bool transposed, bool batched) {
  GemmOperand o;
  o.p = static_cast<const char*>(device_data(t)) +
        (b * t.stride(0) + h * t.stride(1) + row0 * t.stride(2)) * dtype_size(t.dtype());
  const bool ok = transposed ? gemm_layout(t.size(3), t.size(2), t.stride(3), t.stride(2), o.trans, o.ld)
                             : gemm_layout(t.size(2), t.size(3), t.stride(2), t.stride(3), o.trans, o.ld);
  TIDAL_ASSERT(ok, "attention operand not ready for cuBLASLt");
  o.batch_stride = batched ? t.stride(1) : 0;
  return o;
}

// A contiguous (rows, cols) buffer (batch stride rows*cols) as an operand, or its transpose.
GemmOperand buffer(const void* p, int64_t rows, int64_t cols, bool transposed) {
  return transposed ? GemmOperand{p, true, std::max<int64_t>(cols, 1), rows * cols}
                    : GemmOperand{p, false, std::max<int64_t>(cols, 1), rows * cols};
}

// A (n0, n1, n2) block with the given element strides.
Strided block3(void* p, DType dt, int64_t n0, int64_t s0, int64_t n1, int64_t s1, int64_t n2, int64_t s2) {
  Strided r;
  r.data = p;
  r.dtype = dt;
  r.ndim = 3;
  r.sizes[0] = n0;
  r.sizes[1] = n1;
  r.sizes[2] = n2;
  r.strides[0] = s0;
  r.strides[1] = s1;
  r.strides[2] = s2;
  return r;
}

// Rows (b, h0 .. h0+g-1, row0 .. row0+l-1) of `t`, written from the contiguous accumulate-type `src`.
void store_heads(cudaStream_t s, const Tensor& t, int64_t b, int64_t h0, int64_t g, int64_t row0, int64_t l,
                 const void* src, DType acc) {
  char* p = static_cast<char*>(device_data(t)) +
            (b * t.stride(0) + h0 * t.stride(1) + row0 * t.stride(2)) * dtype_size(t.dtype());
  const int64_t d = t.size(3);
  launch_copy(s, block3(p, t.dtype(), g, t.stride(1), l, t.stride(2), d, t.stride(3)),
              block3(const_cast<void*>(src), acc, g, l * d, l, d, d, 1), g * l * d);
}

FlashRows rows_args(const FlashArgs& cfg, const Dims& n, DType dtype, int64_t b, int64_t kh, int64_t row0,
                    int64_t rows) {
  FlashRows r;
  r.dtype = dtype;
  r.g = n.g;
  r.t = n.t;
  r.row0 = row0;
  r.rows = rows;
  r.s_len = n.s;
  r.causal = cfg.causal;
  r.window = cfg.window;
  r.diagonal = cfg.diagonal;
  r.key_rate = cfg.key_rate;
  r.docs = {cfg.documents.start, cfg.documents.stride_b, cfg.documents.stride_t, cfg.documents.key_offset};
  r.dropout_p = cfg.dropout_p;
  r.seed = cfg.seed;
  r.rng_cols = cfg.rng_cols > 0 ? cfg.rng_cols : n.s;
  r.rng_rows = cfg.rng_rows > 0 ? cfg.rng_rows : n.t;
  r.rng_start = cfg.rng_start + uint64_t(cfg.rng_row_offset * r.rng_cols + cfg.rng_col_offset);
  r.b = b;
  r.h0 = kh * n.g;
  r.hq = n.hq;
  return r;
}

DType acc_of(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

}  // namespace

// Forward: the (g, T, S) scores in the accumulate type, and their bf16 rounding for bf16.
int64_t eager_forward_workspace(const Tensor& q, const Tensor& k, const Tensor& v) {
  const Dims n(q, k, v);
  return n.scores() + n.rounded(q.dtype() == DType::bf16);
}

// Backward: rowsum(dout * out) for every row, P and dS of one group (and their bf16 roundings), and
// the group's dq, dk, dv accumulators.
int64_t eager_backward_workspace(const Tensor& q, const Tensor& k, const Tensor& v) {
  return backward_layout(Dims(q, k, v), q.dtype() == DType::bf16).total();
}

// q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv), out (B, Hq, T, Dv): any strides, one dtype;
// lse (B, Hq, T) contiguous in the accumulate type, or undefined. Rows that see no key: out 0, lse +inf.
void eager_attention_forward(Stream& stream, const FlashArgs& cfg, const Tensor& out, const Tensor& lse,
                             const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& workspace) {
  const cudaStream_t s = stream_handle(stream);
  const Dims n(q, k, v);
  const DType dt = q.dtype(), acc = acc_of(dt);
  const int dev = q.device().index;
  TIDAL_ASSERT(workspace.numel() >= eager_forward_workspace(q, k, v) && workspace.dtype() == acc,
               "flash workspace too small");
  if (n.b == 0 || n.hq == 0 || n.t == 0) return;
  Tensor lse_buf = lse;
  if (!lse_buf.defined()) {
    MemoryScope scope(MemoryCategory::temporary);
    lse_buf = empty({n.b, n.hq, n.t}, acc, q.device());
  }
  const Tensor qr = gemm_ready(s, q), kr = gemm_ready(s, k), vr = gemm_ready(s, v);
  bool out_trans = false;
  int64_t ld = 0;
  Tensor o = out;  // written by the products when they can (a row-major (T, Dv) matrix per head)
  if (!gemm_layout(n.t, n.dv, out.stride(2), out.stride(3), out_trans, ld) || out_trans) {
    MemoryScope scope(MemoryCategory::temporary);
    o = empty(out.shape(), dt, out.device());
  }
  char* scores = static_cast<char*>(device_data(workspace));
  void* p16 = dt == DType::bf16 ? scores + n.scores() * dtype_size(acc) : nullptr;
  if (n.s == 0 && n.dv > 0) launch_fill(s, strided(o), o.numel(), 0.0);  // no keys: out = 0 (lse = +inf below)
  bool tr = false;
  int64_t ldo = 0;
  gemm_layout(n.t, n.dv, o.stride(2), o.stride(3), tr, ldo);
  for (int64_t b = 0; b < n.b; ++b) {
    for (int64_t kh = 0; kh < n.hkv; ++kh) {
      const int64_t h0 = kh * n.g;
      for (int64_t i0 = 0; i0 < n.t; i0 += n.tc) {
        const int64_t rows = std::min(n.tc, n.t - i0), gts = n.g * rows * n.s;
        if (n.d > 0 && n.s > 0)
          gemm(dev, s, dt, acc, rows, n.s, n.d, cfg.scale, head(qr, b, h0, i0, false, true),
               head(kr, b, kh, 0, true, false), 0.0, scores, n.s, rows * n.s, n.g);
        else if (n.s > 0)
          launch_fill(s, block3(scores, acc, 1, 0, 1, 0, gts, 1), gts, 0.0);
        FlashRows r = rows_args(cfg, n, dt, b, kh, i0, rows);
        r.s = scores;
        r.p16 = p16;
        r.lse = static_cast<char*>(device_data(lse_buf)) + (b * n.hq + h0) * n.t * dtype_size(acc);
        launch_flash_softmax_forward(s, r);
        if (n.dv == 0 || n.s == 0) continue;
        char* op = static_cast<char*>(device_data(o)) +
                   (b * o.stride(0) + h0 * o.stride(1) + i0 * o.stride(2)) * dtype_size(dt);
        gemm(dev, s, dt, dt, rows, n.dv, n.s, 1.0, buffer(p16 ? p16 : scores, rows, n.s, false),
             head(vr, b, kh, 0, false, false), 0.0, op, ldo, o.stride(1), n.g);
      }
    }
  }
  if (o.raw_data() != out.raw_data()) launch_copy(s, strided(out), strided(o), out.numel());
}

namespace {

// One (b, kh) group of the backward (Note [Eager flash attention on CUDA]).
struct BackwardGroup {
  cudaStream_t s;
  int dev;
  const FlashArgs& cfg;
  const Dims& n;
  DType dt, acc;
  const Tensor &q, &k, &v, &dout;
  char *delta, *p, *ds, *p16, *ds16, *dq, *dk, *dv;
  const char* lse;

  void run(const Tensor& dqt, const Tensor& dkt, const Tensor& dvt, int64_t b, int64_t kh) const {
    for (int64_t i0 = 0; i0 < n.t; i0 += n.tc) chunk(dqt, dkt, dvt, b, kh, i0, std::min(n.tc, n.t - i0));
    if (dkt.defined()) store_heads(s, dkt, b, kh, 1, 0, n.s, dk, acc);
    if (dvt.defined()) store_heads(s, dvt, b, kh, 1, 0, n.s, dv, acc);
  }

  // Query rows i0 .. i0+rows-1 of the group: dq of those rows, their terms of dk and dv.
  void chunk(const Tensor& dqt, const Tensor& dkt, const Tensor& dvt, int64_t b, int64_t kh, int64_t i0,
             int64_t rows) const {
    const int64_t h0 = kh * n.g, e = dtype_size(acc), gts = n.g * rows * n.s, rs = rows * n.s;
    if (n.d > 0)
      gemm(dev, s, dt, acc, rows, n.s, n.d, cfg.scale, head(q, b, h0, i0, false, true), head(k, b, kh, 0, true, false),
           0.0, p, n.s, rs, n.g);  // S
    else
      launch_fill(s, block3(p, acc, 1, 0, 1, 0, gts, 1), gts, 0.0);
    if (n.dv > 0)
      gemm(dev, s, dt, acc, rows, n.s, n.dv, 1.0, head(dout, b, h0, i0, false, true), head(v, b, kh, 0, true, false),
           0.0, ds, n.s, rs, n.g);  // dP
    else
      launch_fill(s, block3(ds, acc, 1, 0, 1, 0, gts, 1), gts, 0.0);
    FlashRows r = rows_args(cfg, n, dt, b, kh, i0, rows);
    r.s = p;
    r.dp = ds;
    r.p16 = p16;
    r.ds16 = ds16;
    r.lse = const_cast<char*>(lse) + (b * n.hq + h0) * n.t * e;
    r.delta = delta + (b * n.hq + h0) * n.t * e;
    launch_flash_softmax_backward(s, r);
    const char* pp = p16 ? p16 : p;  // the products' operands
    const char* dsp = ds16 ? ds16 : ds;
    const int64_t eo = dtype_size(dt);
    // dV = sum_g P_g^T dO_g, dK = scale sum_g dS_g^T Q_g, chunk by chunk in head order; dQ = scale dS K.
    for (int64_t gi = 0; gi < n.g; ++gi) {
      const double beta = gi == 0 && i0 == 0 ? 0.0 : 1.0;
      if (dvt.defined() && n.dv > 0)
        gemm(dev, s, dt, acc, n.s, n.dv, rows, 1.0, buffer(pp + gi * rs * eo, rows, n.s, true),
             head(dout, b, h0 + gi, i0, false, false), beta, dv, n.dv, 0, 1);
      if (dkt.defined() && n.d > 0)
        gemm(dev, s, dt, acc, n.s, n.d, rows, cfg.scale, buffer(dsp + gi * rs * eo, rows, n.s, true),
             head(q, b, h0 + gi, i0, false, false), beta, dk, n.d, 0, 1);
    }
    if (dqt.defined() && n.d > 0) {
      gemm(dev, s, dt, acc, rows, n.d, n.s, cfg.scale, buffer(dsp, rows, n.s, false), head(k, b, kh, 0, false, false),
           0.0, dq, n.d, rows * n.d, n.g);
      store_heads(s, dqt, b, h0, n.g, i0, rows, dq, acc);
    }
  }
};

}  // namespace

// Gradients of the forward above; dq/dk/dv have the shapes of q/k/v, any strides, the inputs' dtype;
// an undefined one is not computed.
void eager_attention_backward(Stream& stream, const FlashArgs& cfg, const Tensor& dq, const Tensor& dk,
                              const Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse, const Tensor& workspace) {
  const cudaStream_t s = stream_handle(stream);
  const Dims n(q, k, v);
  const DType dt = q.dtype(), acc = acc_of(dt);
  const BackwardLayout lay = backward_layout(n, dt == DType::bf16);
  TIDAL_ASSERT(workspace.numel() >= lay.total() && workspace.dtype() == acc, "flash workspace too small");
  if (n.t == 0 || n.s == 0) {  // no products: zero gradients
    for (const Tensor* g : {&dq, &dk, &dv})
      if (g->defined() && g->numel() > 0) launch_fill(s, strided(*g), g->numel(), 0.0);
    return;
  }
  char* w = static_cast<char*>(device_data(workspace));
  const int64_t e = dtype_size(acc);
  auto take = [&](int64_t elems) {
    char* r = w;
    w += elems * e;
    return r;
  };
  char* delta = take(lay.delta);
  const View4 dov{device_data(dout), {dout.stride(0), dout.stride(1), dout.stride(2), dout.stride(3)}};
  const View4 ov{device_data(out), {out.stride(0), out.stride(1), out.stride(2), out.stride(3)}};
  launch_flash_row_dot(s, dt, dov, ov, cfg.lse_grad, delta, n.b * n.hq * n.t, n.hq, n.t, n.dv);
  char *p = take(lay.p), *ds = take(lay.ds), *p16 = take(lay.p16), *ds16 = take(lay.ds16);
  char *dqa = take(lay.dq), *dka = take(lay.dk), *dva = take(lay.dv);
  const Tensor qr = gemm_ready(s, q), kr = gemm_ready(s, k), vr = gemm_ready(s, v), dor = gemm_ready(s, dout);
  const bool bf = dt == DType::bf16;
  const BackwardGroup group{s,
                            q.device().index,
                            cfg,
                            n,
                            dt,
                            acc,
                            qr,
                            kr,
                            vr,
                            dor,
                            delta,
                            p,
                            ds,
                            bf ? p16 : nullptr,
                            bf ? ds16 : nullptr,
                            dqa,
                            dka,
                            dva,
                            static_cast<const char*>(device_data(lse))};
  for (int64_t b = 0; b < n.b; ++b)
    for (int64_t kh = 0; kh < n.hkv; ++kh) group.run(dq, dk, dv, b, kh);
}

// --- the seam's methods: cuDNN's fused kernels where they apply (cudnn_sdpa.h), else the eager path.

namespace {

// `workspace` when it holds `need` elements, else a temporary that does (a fused call cuDNN refused
// after its workspace was sized for it).
Tensor workspace_of(const Tensor& workspace, int64_t need, DType acc, Device device) {
  if (workspace.defined() && workspace.numel() >= need) return workspace;
  MemoryScope scope(MemoryCategory::temporary);
  return empty({need}, acc, device);
}

}  // namespace

int64_t CudaKernels::flash_forward_workspace(const FlashArgs& cfg, const Tensor& q, const Tensor& k,
                                             const Tensor& v) const {
  return sdpa_refusal(cfg, q, k, v).empty() ? 0 : eager_forward_workspace(q, k, v);
}

int64_t CudaKernels::flash_backward_workspace(const FlashArgs& cfg, const Tensor&, const Tensor& q, const Tensor& k,
                                              const Tensor& v) const {
  return sdpa_refusal(cfg, q, k, v).empty() ? sdpa_backward_workspace(q, k) : eager_backward_workspace(q, k, v);
}

void CudaKernels::flash_attention_forward(Stream& stream, const FlashArgs& cfg, const Tensor& out, const Tensor& lse,
                                          const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& workspace) {
  if (sdpa_refusal(cfg, q, k, v).empty() && sdpa_forward(stream_handle(stream), cfg, out, lse, q, k, v, workspace))
    return;
  eager_attention_forward(stream, cfg, out, lse, q, k, v,
                          workspace_of(workspace, eager_forward_workspace(q, k, v), acc_of(q.dtype()), q.device()));
}

void CudaKernels::flash_attention_backward(Stream& stream, const FlashArgs& cfg, const Tensor& dq, const Tensor& dk,
                                           const Tensor& dv, const Tensor& dout, const Tensor& q, const Tensor& k,
                                           const Tensor& v, const Tensor& out, const Tensor& lse,
                                           const Tensor& workspace) {
  if (sdpa_refusal(cfg, q, k, v).empty() &&
      sdpa_backward(stream_handle(stream), cfg, dq, dk, dv, dout, q, k, v, out, lse, workspace))
    return;
  eager_attention_backward(stream, cfg, dq, dk, dv, dout, q, k, v, out, lse,
                           workspace_of(workspace, eager_backward_workspace(q, k, v), acc_of(q.dtype()), q.device()));
}

}  // namespace tidal::cuda
