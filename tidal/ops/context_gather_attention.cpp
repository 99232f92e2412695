#include "tidal/ops/context_gather_attention.h"

#include <algorithm>
#include <cmath>

#include "tidal/dist/collectives.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/common.h"
#include "tidal/ops/documents.h"
#include "tidal/ops/ring_attention.h"
#include "tidal/ops/view.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::TensorList;

constexpr const char* kOp = "context_gather_attention";

// The gradient of the gathered whole (B, H, T, D) summed back to its owners: block r of the
// reduce-scatter's input holds rank r's two chunks, so rank r receives the sum over the ranks of
// its chunks' gradients (in rank order: collectives.h).
struct ContextAllGatherBackward : Node {
  dist::Communicator* comm = nullptr;
  const char* name() const override { return "ContextAllGatherBackward"; }
  TensorList apply(TensorList&& grads) override {
    const Tensor& g = grads[0];  // (B, H, T, D)
    if (!g.defined()) return {Tensor()};
    const int c = comm->size();
    const int64_t b = g.size(0), h = g.size(1), t = g.size(2), d = g.size(3), local = t / c;
    Tensor mine = empty({b, h, local, d}, g.dtype(), g.device());
    {
      MemoryScope scope(MemoryCategory::temporary);
      Tensor blocks = empty({c, b, h, local, d}, g.dtype(), g.device());  // rank r's chunks in block r
      const Tensor gd = g.detach();
      for (int r = 0; r < c; ++r) {
        const ContextChunks at = context_chunks(t, c, r);
        Tensor block = blocks.select(0, r);
        block.narrow(2, 0, at.chunk).copy_(gd.narrow(2, at.first, at.chunk));
        block.narrow(2, at.chunk, at.chunk).copy_(gd.narrow(2, at.second, at.chunk));
      }
      dist::reduce_scatter_sum(*comm, mine, blocks);
    }
    return {mine};
  }
};

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt) {
  TIDAL_CHECK(opt.kernel == AttentionKernel::eager, "[", kOp,
              "] runs the eager attention kernel (ring_attention runs flash under context parallelism)");
  const AttentionDropoutFrame& f = opt.dropout_frame;
  TIDAL_CHECK(f.row_offset == 0 && f.col_offset == 0 && f.rows == 0 && f.cols == 0 && !f.rng, "[", kOp,
              "] takes no dropout_frame: it places each chunk in the whole matrix itself");
  TIDAL_CHECK(opt.causal, "[", kOp, "] context parallelism supports causal attention only");
  detail::check_dim(kOp, q, 4, "q (B, Hq, T, D)");
  detail::check_dim(kOp, k, 4, "k (B, Hkv, T, D)");
  detail::check_dim(kOp, v, 4, "v (B, Hkv, T, Dv)");
  const auto shapes = [&] { return detail::str_cat("q ", q.shape(), ", k ", k.shape(), ", v ", v.shape()); };
  TIDAL_CHECK(k.size(2) == q.size(2) && v.size(2) == q.size(2), "[", kOp,
              "] q, k and v must hold the same tokens (this rank's two chunks): ", shapes());
  TIDAL_CHECK(q.size(2) % 2 == 0, "[", kOp, "] a rank holds two chunks of equal length, got length ", q.size(2));
  TIDAL_CHECK(opt.key_offset == 0, "[", kOp, "] places its chunks itself: key_offset must be 0, got ", opt.key_offset);
  check_documents(kOp, opt.documents, 0, q.size(0), q.size(2), q);
}

}  // namespace

Tensor context_all_gather(const Tensor& k, dist::Communicator& cp) {
  OpScope scope("context_all_gather");
  detail::check_dim("context_all_gather", k, 4, "k (B, H, T, D)");
  const int c = cp.size();
  const int64_t b = k.size(0), h = k.size(1), local = k.size(2), d = k.size(3), t = local * c;
  Tensor whole = empty({b, h, t, d}, k.dtype(), k.device());  // (B, H, T, D), global order
  {
    MemoryScope temporary(MemoryCategory::temporary);
    const Tensor mine = k.detach().contiguous();                        // sent as it is
    Tensor blocks = empty({c, b, h, local, d}, k.dtype(), k.device());  // rank r's chunks in block r
    dist::all_gather(cp, blocks, mine);
    for (int r = 0; r < c; ++r) {
      const ContextChunks at = context_chunks(t, c, r);
      const Tensor block = blocks.select(0, r);
      whole.narrow(2, at.first, at.chunk).copy_(block.narrow(2, 0, at.chunk));
      whole.narrow(2, at.second, at.chunk).copy_(block.narrow(2, at.chunk, at.chunk));
    }
  }
  if (autograd::needs_grad(k)) {
    auto node = autograd::make_node<ContextAllGatherBackward>({&k});
    node->comm = &cp;
    autograd::set_history(whole, node);
  }
  return whole;
}

Tensor context_gather_attention(const Tensor& q, const Tensor& k, const Tensor& v, dist::Communicator& cp,
                                const AttentionOptions& opt) {
  OpScope scope(kOp);
  check_inputs(q, k, v, opt);
  if (cp.size() == 1) return scaled_dot_product_attention(q, k, v, opt);
  const int c = cp.size();
  const int64_t b = q.size(0), hq = q.size(1), local = q.size(2), t = local * c;
  const Tensor kw = context_all_gather(k, cp), vw = context_all_gather(v, cp);  // (B, Hkv, T, D), global order
  const ContextChunks at = context_chunks(t, c, cp.rank());
  // Every rank reserves the whole (B, Hq, T, T) matrix's range, as one call on it does.
  AttentionOptions chunk_opt = opt;
  if (opt.dropout_p > 0) {
    chunk_opt.dropout_frame.rng = reserve_attention_dropout(b, hq, t, t);
    chunk_opt.dropout_frame.rows = chunk_opt.dropout_frame.cols = t;
  }
  // Queries of the chunk at global rows [start, start + chunk) see the keys [0, start + chunk), with a
  // window W only [start - W + 1, start + chunk): the bottom-right mask (and window) of those keys is
  // the mask by global positions, and the keys before the window are never multiplied. Packed
  // documents mask by global positions too (key_offset: the first key's).
  const auto chunk_attention = [&](int64_t row, int64_t start) {
    const int64_t first = opt.window > 0 ? std::max<int64_t>(0, start - opt.window + 1) : 0;
    const int64_t keys = start + at.chunk - first;
    chunk_opt.dropout_frame.row_offset = opt.dropout_p > 0 ? start : 0;
    chunk_opt.dropout_frame.col_offset = opt.dropout_p > 0 ? first : 0;
    if (opt.documents.defined()) {  // the chunk's rows' global document starts; its keys start at `first`
      chunk_opt.documents = opt.documents.narrow(1, row, at.chunk);
      chunk_opt.key_offset = first;
    }
    return scaled_dot_product_attention(q.narrow(2, row, at.chunk), kw.narrow(2, first, keys),
                                        vw.narrow(2, first, keys), chunk_opt);  // (B, Hq, chunk, Dv)
  };
  const Tensor first = chunk_attention(0, at.first), second = chunk_attention(at.chunk, at.second);
  return cat({first, second}, 2);  // (B, Hq, T_local, Dv)
}

}  // namespace tidal
