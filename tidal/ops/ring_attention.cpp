#include "tidal/ops/ring_attention.h"

#include <array>
#include <cmath>
#include <future>
#include <optional>
#include <vector>

#include "tidal/autograd/grad_mode.h"
#include "tidal/base/clock.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/common.h"
#include "tidal/ops/documents.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/view.h"
#include "tidal/range_recorder.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

constexpr const char* kOp = "ring_attention";

DType accumulate_type(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// A partial attention: the output (q's dtype) and its per-row log-sum-exp (accumulate type).
struct Partial {
  Tensor out, lse;
};

// Flash forward of q against k, v (no history): the kernel a one-rank attention runs.
Partial flash_block(const FlashArgs& cfg, const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t b = q.size(0), hq = q.size(1), t = q.size(2), dv = v.size(3);
  const DType acc = accumulate_type(q.dtype());
  Partial p;
  p.out = empty({b, t, hq, dv}, q.dtype(), q.device()).transpose(1, 2);  // (B, Hq, T, Dv)
  p.lse = empty({b, hq, t}, acc, q.device());                            // (B, Hq, T)
  Tensor ws = empty({device_kernels(q.device()).flash_forward_workspace(cfg, q, k, v)}, acc, q.device());
  if (Kernels* kern = kernels_for(p.out))
    kern->flash_attention_forward(current_stream(p.out.device()), cfg, p.out, p.lse, q, k, v, ws);
  return p;
}

// A partial's log-sum-exp with its rows that saw no key (the kernel's +inf: a sliding window hides a
// whole row of some blocks) at -inf, the log of an empty sum, which the merge below weighs 0.
Tensor merge_lse(const Tensor& lse) { return masked_fill(lse, eq(lse, INFINITY), -INFINITY); }

// (out, lse) ← the attention over the keys of both: out = Σ exp(lse_s − lse)·out_s, in place on
// views of the accumulators (out in the accumulate type). Every row of the accumulators has seen a
// key (its own diagonal block comes first) or p's has.
void merge(Tensor out, Tensor lse, const Partial& p) {
  const Tensor m = maximum(lse, p.lse);
  const Tensor merged = add(m, log(add(exp(sub(lse, m)), exp(sub(p.lse, m)))));
  const Tensor mine = exp(sub(lse, merged)).unsqueeze(-1), theirs = exp(sub(p.lse, merged)).unsqueeze(-1);
  out.copy_(add(mul(out, mine), mul(p.out.to(out.dtype()), theirs)));
  lse.copy_(merged);
}

// Sends `send` (contiguous) to the next rank of the ring and receives the previous rank's into
// `recv`, in order. Meta tensors hold no bytes: nothing moves.
void ring_exchange(dist::Communicator& comm, const std::vector<Tensor>& send, const std::vector<Tensor>& recv) {
  if (send.front().is_meta()) return;
  if (!send.front().device().is_cpu() && !comm.reads_device_memory()) {  // MPI moves host bytes: through the host
    std::vector<Tensor> host_send, host_recv;
    for (const Tensor& t : send) host_send.push_back(t.detach().to(Device::cpu()));
    for (const Tensor& t : recv) host_recv.push_back(empty(t.shape(), t.dtype()));
    ring_exchange(comm, host_send, host_recv);
    for (size_t i = 0; i < recv.size(); ++i) Tensor(recv[i].detach()).copy_(host_recv[i].to(recv[i].device()));
    return;
  }
  const int c = comm.size(), next = (comm.rank() + 1) % c, prev = (comm.rank() + c - 1) % c;
  std::vector<dist::Communicator::Transfer> sends, receives;
  for (const Tensor& t : send) sends.push_back({next, t.raw_data(), t.nbytes()});
  for (const Tensor& t : recv) receives.push_back({prev, t.raw_data(), t.nbytes()});
  comm.exchange(sends, receives);
}

// The exchange on the compute thread, which waits for it: a range of its own (not compute) in a profile.
void blocking_ring_exchange(dist::Communicator& comm, const std::vector<Tensor>& send,
                            const std::vector<Tensor>& recv) {
  profile::Range range("ring exchange", profile::kComm);
  ring_exchange(comm, send, recv);
}

// The exchange of the next K/V block: on a worker thread over `overlap` (a duplicate of the CP
// communicator, whose messages never match the main one's) while this thread computes, or at once
// over `cp` when there is none. The tensors are held until it is done.
class BlockExchange {
 public:
  BlockExchange(dist::Communicator& cp, dist::Communicator* overlap, std::vector<Tensor> send,
                std::vector<Tensor> recv) {
    if (overlap == nullptr || send.front().is_meta()) {
      blocking_ring_exchange(cp, send, recv);
      return;
    }
    done_ = std::async(std::launch::async, [overlap, send = std::move(send), recv = std::move(recv)] {
      const int64_t t0 = now_ns();
      ring_exchange(*overlap, send, recv);
      // The profiler's side lane: how much of the exchange the compute thread hid (docs/profiling.md).
      if (profile::recording()) profile::record_stream_task("cp ring", "k/v block", t0, now_ns());
    });
  }
  BlockExchange(const BlockExchange&) = delete;
  BlockExchange& operator=(const BlockExchange&) = delete;
  ~BlockExchange() {
    if (done_.valid()) done_.wait();
  }
  void wait() {  // rethrows the worker's error
    if (!done_.valid()) return;
    const int64_t t0 = now_ns();
    done_.get();
    if (profile::recording()) profile::record_stream_task("compute", "wait", t0, now_ns());
  }

 private:
  std::future<void> done_;
};

// Which part of the block of CP rank j the queries of rank i see at a ring step (see the header).
enum class Part { own, first_keys, second_queries };
Part part_of(int i, int j) { return j == i ? Part::own : j < i ? Part::first_keys : Part::second_queries; }

// One flash call of a ring step: local query rows [q0, q0 + qn) against local key rows [k0, k0 + kn)
// of the block in hand. With dropout each call covers one chunk of queries and one of keys, so that
// it is one contiguous block of the whole (T_g, T_g) matrix, drawn where one call on it would draw
// (AttentionDropoutFrame); without, a step is one or two calls on the chunks concatenated.
struct Block {
  int64_t q0, qn, k0, kn;
  bool causal;
};
std::vector<Block> blocks_of(Part part, int64_t half, bool per_chunk) {
  const int64_t h = half, t = 2 * half;
  if (!per_chunk) {
    if (part == Part::own) return {{0, t, 0, t, true}};
    if (part == Part::first_keys) return {{0, t, 0, h, false}};
    return {{h, h, 0, t, false}};
  }
  // Queries of the first chunk never see keys of the second (of this block or a later rank's).
  if (part == Part::own) return {{0, h, 0, h, true}, {h, h, 0, h, false}, {h, h, h, h, true}};
  if (part == Part::first_keys) return {{0, h, 0, h, false}, {h, h, 0, h, false}};
  return {{h, h, 0, h, false}, {h, h, h, h, false}};
}

// The attention dropout of a ring: the range reserved for the whole (B, Hq, T_g, T_g) matrix and
// the ranks' chunk starts, from which each block's place in it follows; and the sliding window,
// whose mask each (per-chunk) block takes by the global positions of its rows and keys.
struct RingDropout {
  double p = 0;
  RandomRange rng;
  int c = 1;
  int64_t half = 0;
  int64_t window = 0;
  Tensor documents;  // (B, T) i32 global document starts of this rank's rows; undefined: none
  // Chunk by chunk: dropout, a window and documents mask by global positions.
  bool per_chunk() const { return p > 0 || window > 0 || documents.defined(); }
  // Blocks whose rows may see no key at all: their partial log-sum-exps need merge_lse.
  bool rows_may_see_none() const { return window > 0 || documents.defined(); }
  // The global position of local row `local` (0 or half: a chunk's start) of CP rank `rank`.
  int64_t global(int rank, int64_t local) const {
    const ContextChunks at = context_chunks(2 * half * c, c, rank);
    return local == 0 ? at.first : at.second;
  }
  // cfg for block b of query rank i and key rank j.
  FlashArgs args(FlashArgs cfg, const Block& b, int i, int j) const {
    cfg.causal = b.causal;
    if (window > 0) {  // query r sees key c iff K + c <= R + r and K + c > R + r - W
      cfg.causal = true;
      cfg.window = window;
      cfg.diagonal = global(i, b.q0) - global(j, b.k0);
    }
    if (documents.defined()) cfg.documents = document_mask(documents.narrow(1, b.q0, b.qn), global(j, b.k0));
    if (p == 0) return cfg;
    cfg.dropout_p = p;
    cfg.seed = rng.seed;
    cfg.rng_start = rng.start;
    cfg.rng_row_offset = global(i, b.q0);
    cfg.rng_col_offset = global(j, b.k0);
    cfg.rng_rows = cfg.rng_cols = 2 * half * c;
    return cfg;
  }
};

// Whether a block's mask leaves any (query, key) pair: a block wholly outside the window is skipped.
bool sees_any(const FlashArgs& cfg, const Block& b) {
  const RowRange rows = rows_seeing_keys(cfg, 0, b.kn, b.qn, b.kn);
  return rows.first < rows.end;
}

// A double buffer for blocks received around the ring: the block in hand is sent while the next
// lands in the other buffer.
struct RingBuffers {
  std::array<Tensor, 2> buf;
  Tensor next(int step, const Tensor& like) {
    Tensor& b = buf[size_t(step % 2)];
    if (!b.defined()) b = empty(like.shape(), like.dtype(), like.device());
    return b;
  }
};

struct RingAttentionBackward : Node {
  SavedTensor q, k, v, out, lse;
  dist::Communicator* comm = nullptr;
  dist::Communicator* overlap = nullptr;  // carries the K/V blocks from a worker thread; null: none
  double scale = 1.0;
  RingDropout drop;
  const char* name() const override { return "RingAttentionBackward"; }

  // dq, dk, dv of one block, in the inputs' dtype.
  static std::array<Tensor, 3> block_backward(const FlashArgs& cfg, const Tensor& g, const Tensor& q, const Tensor& k,
                                              const Tensor& v, const Tensor& o, const Tensor& l) {
    Tensor dq = empty(q.shape(), q.dtype(), q.device()), dk = empty(k.shape(), k.dtype(), k.device());
    Tensor dv = empty(v.shape(), v.dtype(), v.device());
    Tensor ws = empty({device_kernels(q.device()).flash_backward_workspace(cfg, dq, q, k, v)},
                      accumulate_type(q.dtype()), q.device());
    if (Kernels* kern = kernels_for(ws))
      kern->flash_attention_backward(current_stream(ws.device()), cfg, dq, dk, dv, g, q, k, v, o, l, ws);
    return {dq, dk, dv};
  }

  TensorList apply(TensorList&& grads) override {
    if (!grads[0].defined()) return {Tensor(), Tensor(), Tensor()};
    const Tensor qv = q.unpack(name()), kv = k.unpack(name()), vv = v.unpack(name());
    const Tensor ov = out.unpack(name()), lv = lse.unpack(name());
    const int c = comm->size(), i = comm->rank();  // c >= 2: one rank is plain attention
    const int64_t half = qv.size(2) / 2;
    const DType acc = accumulate_type(qv.dtype());
    Tensor dq = empty_like_layout(qv, qv.dtype()), dk = empty_like_layout(kv, kv.dtype());
    Tensor dv = empty_like_layout(vv, vv.dtype());
    {
      MemoryScope scope(MemoryCategory::temporary);
      const Tensor g = grads[0].detach();
      Tensor dq_acc = zeros(qv.shape(), acc, qv.device());
      Tensor kcur = kv.detach().contiguous(), vcur = vv.detach().contiguous();
      RingBuffers kb, vb, dkb, dvb;
      // The gradient of the block in hand, travelling with it.
      Tensor dk_cur = dkb.buf[0] = zeros(kv.shape(), acc, kv.device());
      Tensor dv_cur = dvb.buf[0] = zeros(vv.shape(), acc, vv.device());
      FlashArgs cfg;
      cfg.scale = scale;
      // Step s computes the gradients of the block in hand (rank j's). Its K/V came with the previous
      // step's exchange; the partial dK/dV of the ranks before this one (zero at s = 0: the own
      // block) come with this step's, together with the next K/V block, while the first flash call
      // computes. The sums are the blocking order's: the arrived partial first, then each call's part.
      for (int s = 0; s < c; ++s) {
        std::vector<Tensor> send, recv;
        Tensor k_next, v_next;
        if (s + 1 < c) {
          k_next = kb.next(s + 1, kcur);
          v_next = vb.next(s + 1, vcur);
          send = {kcur, vcur};
          recv = {k_next, v_next};
        }
        if (s > 0) {  // the previous step's block and its gradient move on; this block's arrives
          const Tensor dk_in = dkb.next(s, dk_cur), dv_in = dvb.next(s, dv_cur);
          send.insert(send.end(), {dk_cur, dv_cur});
          recv.insert(recv.end(), {dk_in, dv_in});
          dk_cur = dk_in;
          dv_cur = dv_in;
        }
        std::optional<BlockExchange> exchange;
        exchange.emplace(*comm, overlap, std::move(send), std::move(recv));
        const int j = (i - s + c) % c;
        for (const Block& blk : blocks_of(part_of(i, j), half, drop.per_chunk())) {
          const FlashArgs args = drop.args(cfg, blk, i, j);
          if (!sees_any(args, blk)) continue;
          const Tensor l = lv.narrow(2, blk.q0, blk.qn).contiguous();
          const auto d = block_backward(args, g.narrow(2, blk.q0, blk.qn), qv.narrow(2, blk.q0, blk.qn).detach(),
                                        kcur.narrow(2, blk.k0, blk.kn), vcur.narrow(2, blk.k0, blk.kn),
                                        ov.narrow(2, blk.q0, blk.qn).detach(), l);
          if (exchange) {  // after the first call: the later ones' parts add at once, as blocking
            exchange->wait();
            exchange.reset();
          }
          dq_acc.narrow(2, blk.q0, blk.qn).add_(d[0].to(acc));
          dk_cur.narrow(2, blk.k0, blk.kn).add_(d[1].to(acc));
          dv_cur.narrow(2, blk.k0, blk.kn).add_(d[2].to(acc));
        }
        if (exchange) exchange->wait();  // every block of the step was outside the window
        if (s + 1 < c) {
          kcur = k_next;
          vcur = v_next;
        }
      }
      // The last block's gradient goes home: after C steps each rank holds its own.
      const Tensor dk_home = dkb.next(c, dk_cur), dv_home = dvb.next(c, dv_cur);
      blocking_ring_exchange(*comm, {dk_cur, dv_cur}, {dk_home, dv_home});
      dk_cur = dk_home;
      dv_cur = dv_home;
      dq.copy_(dq_acc);
      dk.copy_(dk_cur);
      dv.copy_(dv_cur);
    }
    return {dq, dk, dv};
  }
  void release_saved() override {
    autograd::reset_all(q, k, v, out, lse);
    drop.documents = Tensor();
  }
};

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt) {
  TIDAL_CHECK(opt.kernel == AttentionKernel::flash, "[", kOp,
              "] context parallelism runs the flash attention kernel only; use the flash kernel (not eager)");
  TIDAL_CHECK(opt.dropout_p >= 0.0 && opt.dropout_p < 1.0, "[", kOp, "] dropout_p must be in [0, 1), got ",
              opt.dropout_p);
  const AttentionDropoutFrame& f = opt.dropout_frame;
  TIDAL_CHECK(f.row_offset == 0 && f.col_offset == 0 && f.rows == 0 && f.cols == 0 && !f.rng, "[", kOp,
              "] takes no dropout_frame: it places each block of the whole matrix itself");
  TIDAL_CHECK(opt.causal, "[", kOp, "] context parallelism supports causal attention only");
  TIDAL_CHECK(opt.window >= 0, "[", kOp, "] the sliding window must be >= 0 (0: none), got ", opt.window);
  TIDAL_CHECK(std::isfinite(opt.scale), "[", kOp, "] scale must be finite, got ", opt.scale);
  detail::check_dim(kOp, q, 4, "q (B, Hq, T, D)");
  detail::check_dim(kOp, k, 4, "k (B, Hkv, T, D)");
  detail::check_dim(kOp, v, 4, "v (B, Hkv, T, Dv)");
  detail::check_floating(kOp, q);
  detail::check_same(kOp, q, k);
  detail::check_same(kOp, q, v);
  const auto shapes = [&] { return detail::str_cat("q ", q.shape(), ", k ", k.shape(), ", v ", v.shape()); };
  TIDAL_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(2) == q.size(2) && v.size(2) == q.size(2) &&
                  v.size(1) == k.size(1),
              "[", kOp, "] q, k and v must have the same batch and length, k and v the same heads: ", shapes());
  TIDAL_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "[", kOp,
              "] query heads must be a multiple of kv heads (GQA): ", shapes());
  TIDAL_CHECK(k.size(3) == q.size(3) && q.size(3) > 0, "[", kOp, "] q and k need one positive head dim: ", shapes());
  TIDAL_CHECK(q.size(2) % 2 == 0, "[", kOp, "] a rank holds two chunks of equal length, got length ", q.size(2));
  TIDAL_CHECK(opt.key_offset == 0, "[", kOp, "] places its blocks itself: key_offset must be 0, got ", opt.key_offset);
  check_documents(kOp, opt.documents, 0, q.size(0), q.size(2), q);
}

}  // namespace

ContextChunks context_chunks(int64_t seq, int size, int rank) {
  TIDAL_CHECK(size >= 1 && rank >= 0 && rank < size, "[context_chunks] rank ", rank, " is not one of ", size);
  TIDAL_CHECK(seq > 0 && seq % (2 * int64_t(size)) == 0, "[context_chunks] 2 x context-parallel size (", 2 * size,
              ") must divide the sequence length ", seq);
  const int64_t chunk = seq / (2 * size);
  return {chunk, rank * chunk, (2 * size - 1 - rank) * chunk};
}

std::vector<int64_t> context_rows(int64_t seq, int size, int rank) {
  const ContextChunks at = context_chunks(seq, size, rank);
  std::vector<int64_t> rows;
  rows.reserve(size_t(2 * at.chunk));
  for (int64_t start : {at.first, at.second})
    for (int64_t r = start; r < start + at.chunk; ++r) rows.push_back(r);
  return rows;
}

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, dist::Communicator& cp,
                      const AttentionOptions& opt, dist::Communicator* overlap) {
  OpScope scope(kOp);
  check_inputs(q, k, v, opt);
  if (cp.size() == 1) return scaled_dot_product_attention(q, k, v, opt);
  const int c = cp.size(), i = cp.rank();
  const int64_t b = q.size(0), hq = q.size(1), t = q.size(2), dv = v.size(3), half = t / 2;
  const DType acc = accumulate_type(q.dtype());
  FlashArgs cfg;
  cfg.scale = opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(double(q.size(3)));
  RingDropout drop;  // the whole matrix's range, reserved on every rank as one call on it would
  drop.c = c;
  drop.half = half;
  drop.window = opt.window < t * c ? opt.window : 0;  // a window over the whole sequence is plain causal
  drop.documents = opt.documents;
  if (opt.dropout_p > 0) {
    drop.p = opt.dropout_p;
    drop.rng = reserve_attention_dropout(b, hq, t * c, t * c);
  }
  Tensor out = empty({b, t, hq, dv}, q.dtype(), q.device()).transpose(1, 2);  // (B, Hq, T, Dv) view
  Tensor lse = empty({b, hq, t}, acc, q.device());                            // (B, Hq, T)
  {
    MemoryScope temporary(MemoryCategory::temporary);
    NoGradGuard no_grad;
    const Tensor qd = q.detach();
    Tensor kcur = k.detach().contiguous(), vcur = v.detach().contiguous();  // sent as they are
    RingBuffers kb, vb;
    std::array<bool, 2> filled{};                             // which chunks of queries hold a partial result
    Tensor acc_out = empty({b, hq, t, dv}, acc, q.device());  // (B, Hq, T, Dv)
    for (int s = 0; s < c; ++s) {
      // The next K/V block comes while this one computes.
      const Tensor k_next = s + 1 < c ? kb.next(s + 1, kcur) : Tensor();
      const Tensor v_next = s + 1 < c ? vb.next(s + 1, vcur) : Tensor();
      std::optional<BlockExchange> blocks;
      if (s + 1 < c) blocks.emplace(cp, overlap, std::vector<Tensor>{kcur, vcur}, std::vector<Tensor>{k_next, v_next});
      const int j = (i - s + c) % c;
      for (const Block& blk : blocks_of(part_of(i, j), half, drop.per_chunk())) {
        const FlashArgs args = drop.args(cfg, blk, i, j);
        if (!sees_any(args, blk)) continue;  // wholly outside the window: no compute (the block still travels)
        Partial p = flash_block(args, qd.narrow(2, blk.q0, blk.qn), kcur.narrow(2, blk.k0, blk.kn),
                                vcur.narrow(2, blk.k0, blk.kn));
        if (drop.rows_may_see_none()) p.lse = merge_lse(p.lse);
        Tensor o = acc_out.narrow(2, blk.q0, blk.qn), l = lse.narrow(2, blk.q0, blk.qn);
        if (filled[size_t(blk.q0 / half)]) {  // (a block's rows are all filled or none)
          merge(o, l, p);
          continue;
        }
        o.copy_(p.out);
        l.copy_(p.lse);
        for (int64_t r = blk.q0; r < blk.q0 + blk.qn; r += half) filled[size_t(r / half)] = true;
      }
      if (blocks) {
        blocks->wait();
        kcur = k_next;
        vcur = v_next;
      }
    }
    out.copy_(acc_out);
  }
  if (autograd::needs_grad(q, k, v)) {
    auto node = autograd::make_node<RingAttentionBackward>({&q, &k, &v});
    node->q = SavedTensor(q);
    node->k = SavedTensor(k);
    node->v = SavedTensor(v);
    node->out = SavedTensor(out);
    node->lse = SavedTensor(lse);
    node->comm = &cp;
    node->overlap = overlap;
    node->scale = cfg.scale;
    node->drop = drop;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace tidal
