#pragma once
// For the context-parallel attention tests (ring_attention_test, context_gather_attention_test): a
// case of shapes, a rank's two chunks of a whole-sequence tensor, the error measure, and what an op
// allocates (meta parity).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "tidal/allocator.h"
#include "tidal/autograd/engine.h"
#include "tidal/dist/communicator.h"
#include "tidal/ops/documents.h"
#include "tidal/ops/ring_attention.h"
#include "tidal/ops/view.h"
#include "tidal/rng.h"
#include "tidal/tensor.h"

namespace tidal::dist {

struct Case {
  int64_t b, hq, hkv, seq, d;
  DType dtype;
};

// The largest |a - b| relative to max(1, |b|) over the elements.
inline double max_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(DType::f32).contiguous().to_vector<float>();
  const std::vector<float> y = b.to(DType::f32).contiguous().to_vector<float>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t n = 0; n < std::min(x.size(), y.size()); ++n)
    worst = std::max(worst, std::abs(double(x[n]) - double(y[n])) / std::max(1.0, std::abs(double(y[n]))));
  return worst;
}

// This rank's two chunks of a (B, T, ...) tensor along dim `dim`.
inline Tensor local_chunks(const Tensor& t, int64_t dim, const ContextChunks& at) {
  return cat({t.narrow(dim, at.first, at.chunk), t.narrow(dim, at.second, at.chunk)}, dim).contiguous();
}

// Packed documents over the whole sequence (B, seq), EOD tokens every 5 + 2b tokens from token 2 of
// row b (documents within a chunk, across chunk boundaries, of length 1 at the end), and a CP rank's
// rows of them: the starts the whole call and this rank's call take (AttentionOptions::documents).
struct PackedStarts {
  Tensor whole, mine;  // (B, seq) and (B, 2 seq / C) i32, global starts
};
inline PackedStarts packed_starts(int64_t b, int64_t seq, int size, int rank) {
  std::vector<int64_t> ids(size_t(b * seq), 3);
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t i = 2; i < seq; i += 5 + 2 * r) ids[size_t(r * seq + i)] = 0;
    ids[size_t(r * seq + seq - 2)] = 0;  // the last token alone
  }
  const Tensor packed = from_vector_i64(ids, {b, seq});
  return {document_layout(packed, 0).starts, document_layout(packed, 0, context_rows(seq, size, rank)).starts};
}

// An attention op on q (B, Hq, T, D), k, v (B, Hkv, T, D).
using Attention = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v)>;

// `whole` on the whole sequence and `mine` on this rank's two chunks of the same inputs (seeded 7, in
// the models' (B, T, H, D) memory order, read as (B, H, T, D) views; each op after manual_seed(11), so
// both draw dropout from the same point of the stream, as one process would), each with its part of
// one output gradient: this rank's out, dq, dk, dv from `mine` and the same chunks of the whole's.
struct Compared {
  std::vector<Tensor> mine, whole;
};
inline Compared compare_with_whole(Communicator& group, const Case& c, const Attention& whole, const Attention& mine) {
  manual_seed(7);  // the same whole sequence on every rank
  const auto leaf = [&](int64_t heads) { return randn({c.b, c.seq, heads, c.d}).to(c.dtype).set_requires_grad(true); };
  Tensor q = leaf(c.hq), k = leaf(c.hkv), v = leaf(c.hkv);
  const Tensor w = randn({c.b, c.hq, c.seq, c.d}).to(c.dtype);  // the output's gradient
  manual_seed(11);
  const Tensor full = whole(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2));
  autograd::backward({full}, {w});
  const ContextChunks at = context_chunks(c.seq, group.size(), group.rank());
  Tensor ql = local_chunks(q.detach(), 1, at).set_requires_grad(true);
  Tensor kl = local_chunks(k.detach(), 1, at).set_requires_grad(true);
  Tensor vl = local_chunks(v.detach(), 1, at).set_requires_grad(true);
  manual_seed(11);
  const Tensor out = mine(ql.transpose(1, 2), kl.transpose(1, 2), vl.transpose(1, 2));
  autograd::backward({out}, {local_chunks(w, 2, at)});
  return {{out.detach(), ql.grad(), kl.grad(), vl.grad()},
          {local_chunks(full.detach(), 2, at), local_chunks(q.grad(), 1, at), local_chunks(k.grad(), 1, at),
           local_chunks(v.grad(), 1, at)}};
}

// A context-parallel attention op of CP group `group` on q (2, 6, 8C, 8) and k, v (2, 2, 8C, 8), f32
// views of (B, T, H, D) memory, on `dev`: the bytes it holds after forward, its peak over forward
// and backward, and the temporary peak.
using CpAttention = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v, Communicator& group)>;
inline std::vector<int64_t> allocations_of(const CpAttention& op, Device dev, Communicator& group) {
  Allocator& alloc = device_allocator(dev);
  const int64_t t = 8 * group.size();
  Tensor q = empty({2, t, 6, 8}, DType::f32, dev).fill_(0.5).set_requires_grad(true);
  Tensor k = empty({2, t, 2, 8}, DType::f32, dev).fill_(0.25).set_requires_grad(true);
  Tensor v = empty({2, t, 2, 8}, DType::f32, dev).fill_(1.0).set_requires_grad(true);
  const Tensor g = empty({2, 6, t, 8}, DType::f32, dev).fill_(1.0);
  alloc.reset_peak_stats();
  const int64_t before = alloc.stats().allocated;
  Tensor out = op(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), group);
  const int64_t after_forward = alloc.stats().allocated - before;
  autograd::backward({out}, {g});
  return {after_forward, alloc.stats().peak_allocated - before, alloc.stats()[MemoryCategory::temporary].peak};
}

}  // namespace tidal::dist
