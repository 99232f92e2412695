// Ring attention (context parallel) on the CP groups of however many ranks this runs on, against
// causal attention of the whole sequence on one rank: every rank computes the whole attention
// itself and compares its two chunks (chunks i and 2C-1-i) of the output and of the q/k/v gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/error_of.h"
#include "tidal/allocator.h"
#include "tidal/autograd/engine.h"
#include "tidal/dist/communicator.h"
#include "tidal/dist/meta_communicator.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/random.h"
#include "tidal/ops/ring_attention.h"
#include "tidal/ops/view.h"
#include "tidal/rng.h"

namespace tidal::dist {
namespace {

struct Case {
  int64_t b, hq, hkv, seq, d;
  DType dtype;
};

// The largest |a - b| relative to max(1, |b|) over the elements.
double max_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(DType::f32).contiguous().to_vector<float>();
  const std::vector<float> y = b.to(DType::f32).contiguous().to_vector<float>();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0;
  for (size_t n = 0; n < std::min(x.size(), y.size()); ++n)
    worst = std::max(worst, std::abs(double(x[n]) - double(y[n])) / std::max(1.0, std::abs(double(y[n]))));
  return worst;
}

// This rank's two chunks of a (B, T, ...) tensor along dim `dim`.
Tensor local_chunks(const Tensor& t, int64_t dim, const ContextChunks& at) {
  return cat({t.narrow(dim, at.first, at.chunk), t.narrow(dim, at.second, at.chunk)}, dim).contiguous();
}

struct Errors {
  double out = 0, dq = 0, dk = 0, dv = 0;
};

// This rank's output and q/k/v gradients, and their errors against the whole attention.
struct Local {
  std::vector<Tensor> results;  // out, dq, dk, dv
  Errors errors;
};

// Inputs in the models' (B, T, H, D) memory order, read as (B, H, T, D) views. `overlap`: a
// duplicate of `group` that moves the K/V blocks from a worker thread.
// With `dropout`, both draw from the same point of the stream (manual_seed(11) before each), as one
// process would: the ring's blocks must put together the whole call's mask.
Local ring_against_full(Communicator& group, const Case& c, Communicator* overlap = nullptr, double dropout = 0) {
  manual_seed(7);  // the same whole sequence on every rank
  const auto leaf = [&](int64_t heads) { return randn({c.b, c.seq, heads, c.d}).to(c.dtype).set_requires_grad(true); };
  Tensor q = leaf(c.hq), k = leaf(c.hkv), v = leaf(c.hkv);
  const Tensor w = randn({c.b, c.hq, c.seq, c.d}).to(c.dtype);  // the output's gradient
  AttentionOptions opt;
  opt.dropout_p = dropout;
  manual_seed(11);
  const Tensor full = scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), opt);
  autograd::backward({full}, {w});

  const ContextChunks at = context_chunks(c.seq, group.size(), group.rank());
  Tensor ql = local_chunks(q.detach(), 1, at).set_requires_grad(true);
  Tensor kl = local_chunks(k.detach(), 1, at).set_requires_grad(true);
  Tensor vl = local_chunks(v.detach(), 1, at).set_requires_grad(true);
  manual_seed(11);
  const Tensor out = ring_attention(ql.transpose(1, 2), kl.transpose(1, 2), vl.transpose(1, 2), group, opt, overlap);
  autograd::backward({out}, {local_chunks(w, 2, at)});
  Errors e;
  e.out = max_error(out, local_chunks(full.detach(), 2, at));
  e.dq = max_error(ql.grad(), local_chunks(q.grad(), 1, at));
  e.dk = max_error(kl.grad(), local_chunks(k.grad(), 1, at));
  e.dv = max_error(vl.grad(), local_chunks(v.grad(), 1, at));
  return {{out.detach(), ql.grad(), kl.grad(), vl.grad()}, e};
}

// Errors relative to max(1, |value|), measured on C = 2, 3, 4: f32 at most 1.6e-6 (summation order:
// the merge of the partial softmaxes); bf16 at most 1.56e-2, two bf16 roundings (2^-7 each) of
// values in [1, 2): the partial outputs and per-block gradients are rounded to bf16 by the kernel
// before the f32 merge. Tolerances: 4e-6 and three roundings.
void expect_matches(Communicator& group, const Case& c, double dropout = 0) {
  const Errors e = ring_against_full(group, c, nullptr, dropout).errors;
  const double tol = c.dtype == DType::f32 ? 4e-6 : 3 * 0x1p-7;
  const std::string where = "C=" + std::to_string(group.size()) + " rank " + std::to_string(group.rank()) + " " +
                            std::string(dtype_name(c.dtype)) + " Hq=" + std::to_string(c.hq) +
                            " Hkv=" + std::to_string(c.hkv) + " dropout " + std::to_string(dropout);
  EXPECT_LE(e.out, tol) << where;
  EXPECT_LE(e.dq, tol) << where;
  EXPECT_LE(e.dk, tol) << where;
  EXPECT_LE(e.dv, tol) << where;
  if (std::getenv("TIDAL_PRINT_ERRORS"))
    std::printf("%s out %.3g dq %.3g dk %.3g dv %.3g\n", where.c_str(), e.out, e.dq, e.dk, e.dv);
}

std::vector<int> contiguous_group(int rank, int size, int world) {
  std::vector<int> members;
  for (int m = rank - rank % size; m < std::min(world, rank - rank % size + size); ++m) members.push_back(m);
  return members;
}

// Dropout 0.3: a mask that differed anywhere would move outputs by O(1) (kept values scale by 1/0.7).
void expect_all_cases(Communicator& group) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (double dropout : {0.0, 0.3}) {
      expect_matches(group, {2, 4, 4, 12 * group.size(), 8, dt}, dropout);   // MHA, chunks of 6
      expect_matches(group, {1, 6, 2, 20 * group.size(), 16, dt}, dropout);  // GQA 3:1, chunks of 10
    }
  }
}

TEST(RingAttention, MatchesFullCausalAttentionOnAllRanks) {
  Communicator& world_comm = world();
  std::vector<int> all(size_t(world_comm.size()));
  for (int r = 0; r < world_comm.size(); ++r) all[size_t(r)] = r;
  std::unique_ptr<Communicator> group = world_comm.subgroup(all);
  expect_all_cases(*group);
}

// Contiguous pairs (on three ranks the last one is alone, C = 1: plain attention).
TEST(RingAttention, MatchesFullCausalAttentionOnPairs) {
  Communicator& w = world();
  std::unique_ptr<Communicator> pair = w.subgroup(contiguous_group(w.rank(), 2, w.size()));
  expect_all_cases(*pair);
}

TEST(RingAttention, MatchesFullCausalAttentionOnFourRanks) {
  Communicator& w = world();
  if (w.size() != 4) GTEST_SKIP() << "runs on four ranks (ctest dist4)";
  std::unique_ptr<Communicator> pair = w.subgroup(contiguous_group(w.rank(), 2, 4));
  expect_all_cases(w);
  expect_all_cases(*pair);
}

// The K/V blocks moved from a worker thread over a duplicate communicator while the blocks compute:
// the same arithmetic in the same order, so the same bits.
TEST(RingAttention, OverlappedExchangeGivesTheSameBits) {
  Communicator& w = world();
  std::vector<int> all(size_t(w.size()));
  for (int r = 0; r < w.size(); ++r) all[size_t(r)] = r;
  std::unique_ptr<Communicator> group = w.subgroup(all), overlap = group->duplicate();
  for (DType dt : {DType::f32, DType::bf16}) {
    const Case c{1, 6, 2, 16 * group->size(), 16, dt};
    const Local blocking = ring_against_full(*group, c, nullptr, 0.2);
    const Local overlapped = ring_against_full(*group, c, overlap.get(), 0.2);
    for (size_t n = 0; n < blocking.results.size(); ++n)
      EXPECT_EQ(max_error(overlapped.results[n], blocking.results[n]), 0.0) << n;
  }
}

// A dry run's rank allocates exactly what the real rank does, forward and backward (the meta
// communicator moves no bytes).
TEST(RingAttention, MetaAllocatesWhatARealRankAllocates) {
  Communicator& w = world();
  const auto run = [&](Device dev, Communicator& group) {
    Allocator& alloc = device_allocator(dev);
    const int64_t t = 8 * group.size();
    Tensor q = empty({2, t, 6, 8}, DType::f32, dev).fill_(0.5).set_requires_grad(true);
    Tensor k = empty({2, t, 2, 8}, DType::f32, dev).fill_(0.25).set_requires_grad(true);
    Tensor v = empty({2, t, 2, 8}, DType::f32, dev).fill_(1.0).set_requires_grad(true);
    const Tensor g = empty({2, 6, t, 8}, DType::f32, dev).fill_(1.0);
    alloc.reset_peak_stats();
    const int64_t before = alloc.stats().allocated;
    Tensor out = ring_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), group);
    const int64_t after_forward = alloc.stats().allocated - before;
    autograd::backward({out}, {g});
    return std::vector<int64_t>{after_forward, alloc.stats().peak_allocated - before,
                                alloc.stats()[MemoryCategory::temporary].peak};
  };
  std::vector<int> all(size_t(w.size()));
  for (int r = 0; r < w.size(); ++r) all[size_t(r)] = r;
  std::unique_ptr<Communicator> group = w.subgroup(all);
  MetaCommunicator meta(w.rank(), w.size());
  EXPECT_EQ(run(Device::meta(), meta), run(Device::cpu(), *group));
}

TEST(RingAttention, RefusesWhatItDoesNotRunYet) {
  Communicator& w = world();
  const Tensor q = empty({1, 2, 4, 8}), k = empty({1, 2, 4, 8});
  AttentionOptions eager;
  eager.kernel = AttentionKernel::eager;
  EXPECT_NE(testing::error_of([&] { ring_attention(q, k, k, w, eager); }).find("flash attention kernel only"),
            std::string::npos);
  AttentionOptions framed;
  framed.dropout_p = 0.1;
  framed.dropout_frame.row_offset = 2;
  EXPECT_EQ(testing::error_of([&] { ring_attention(q, k, k, w, framed); }),
            "[ring_attention] takes no dropout_frame: it places each block of the whole matrix itself");
  EXPECT_NE(testing::error_of([&] {
              ring_attention(empty({1, 2, 3, 8}), empty({1, 2, 3, 8}), empty({1, 2, 3, 8}), w);
            }).find("two chunks of equal length, got length 3"),
            std::string::npos);
  EXPECT_EQ(testing::error_of([] { context_chunks(20, 3, 0); }),
            "[context_chunks] 2 x context-parallel size (6) must divide the sequence length 20");
  const ContextChunks at = context_chunks(24, 3, 1);
  EXPECT_EQ(at.chunk, 4);
  EXPECT_EQ(at.first, 4);
  EXPECT_EQ(at.second, 16);
}

}  // namespace
}  // namespace tidal::dist
