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

#include "tests/dist/attention_cases.h"
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
// `packed`: packed documents (packed_starts), each call with its rows' starts.
Local ring_against_full(Communicator& group, const Case& c, Communicator* overlap = nullptr, double dropout = 0,
                        int64_t window = 0, bool packed = false) {
  AttentionOptions opt;
  opt.dropout_p = dropout;
  opt.window = window;
  const PackedStarts starts = packed_starts(c.b, c.seq, group.size(), group.rank());
  AttentionOptions mine = opt;
  if (packed) opt.documents = starts.whole, mine.documents = starts.mine;
  const Compared r = compare_with_whole(
      group, c,
      [&](const Tensor& q, const Tensor& k, const Tensor& v) { return scaled_dot_product_attention(q, k, v, opt); },
      [&](const Tensor& q, const Tensor& k, const Tensor& v) { return ring_attention(q, k, v, group, mine, overlap); });
  Errors e;
  e.out = max_error(r.mine[0], r.whole[0]);
  e.dq = max_error(r.mine[1], r.whole[1]);
  e.dk = max_error(r.mine[2], r.whole[2]);
  e.dv = max_error(r.mine[3], r.whole[3]);
  return {r.mine, e};
}

// Errors relative to max(1, |value|), measured on C = 2, 3, 4: f32 at most 1.6e-6 (summation order:
// the merge of the partial softmaxes); bf16 at most 1.56e-2, two bf16 roundings (2^-7 each) of
// values in [1, 2): the partial outputs and per-block gradients are rounded to bf16 by the kernel
// before the f32 merge. Tolerances: 4e-6 and three roundings. With a sliding window f32 stays under
// 2.9e-6, but bf16 reaches 3.9e-2 (dq, C = 4, W = 13, dropout): a row's gradient is the sum of more,
// smaller blocks' (chunk by chunk), each rounded to bf16 before the sum, and they partly cancel; six
// roundings then.
void expect_matches(Communicator& group, const Case& c, double dropout = 0, int64_t window = 0, bool packed = false) {
  const Errors e = ring_against_full(group, c, nullptr, dropout, window, packed).errors;
  const double tol = c.dtype == DType::f32 ? 4e-6 : (window > 0 || packed ? 6 : 3) * 0x1p-7;
  const std::string where = "C=" + std::to_string(group.size()) + " rank " + std::to_string(group.rank()) + " " +
                            std::string(dtype_name(c.dtype)) + " Hq=" + std::to_string(c.hq) +
                            " Hkv=" + std::to_string(c.hkv) + " dropout " + std::to_string(dropout) + " window " +
                            std::to_string(window) + (packed ? " packed" : "");
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

// A sliding window (within a chunk, across chunk boundaries, longer than the sequence): each block
// masked by the global positions of its rows and keys, the blocks wholly outside it skipped, dropout
// drawn where one call on the whole sequence draws it.
TEST(RingAttention, MatchesFullWindowedAttention) {
  Communicator& w = world();
  std::vector<int> all(size_t(w.size()));
  for (int r = 0; r < w.size(); ++r) all[size_t(r)] = r;
  std::unique_ptr<Communicator> group = w.subgroup(all), pair = w.subgroup(contiguous_group(w.rank(), 2, w.size()));
  for (Communicator* g : {group.get(), pair.get()})
    for (int64_t window : {1, 4, 13, 1000})
      for (double dropout : {0.0, 0.3}) {
        expect_matches(*g, {1, 6, 2, 20 * g->size(), 16, DType::f32}, dropout, window);  // GQA, chunks of 10
        expect_matches(*g, {2, 4, 4, 12 * g->size(), 8, DType::bf16}, dropout, window);  // chunks of 6
      }
  // The overlapped exchange skips the same blocks and gives the same bits.
  std::unique_ptr<Communicator> overlap = group->duplicate();
  const Case c{1, 6, 2, 16 * group->size(), 16, DType::f32};
  const Local blocking = ring_against_full(*group, c, nullptr, 0.2, 3);
  const Local overlapped = ring_against_full(*group, c, overlap.get(), 0.2, 3);
  for (size_t n = 0; n < blocking.results.size(); ++n)
    EXPECT_EQ(max_error(overlapped.results[n], blocking.results[n]), 0.0) << n;
}

// Packed documents (--reset-attention-mask): each block masked by its rows' global document starts and
// its keys' global positions, alone and with a window, with dropout drawn where one call draws it.
TEST(RingAttention, MatchesFullAttentionOverPackedDocuments) {
  Communicator& w = world();
  std::vector<int> all(size_t(w.size()));
  for (int r = 0; r < w.size(); ++r) all[size_t(r)] = r;
  std::unique_ptr<Communicator> group = w.subgroup(all), pair = w.subgroup(contiguous_group(w.rank(), 2, w.size()));
  for (Communicator* g : {group.get(), pair.get()})
    for (int64_t window : {0, 4})
      for (double dropout : {0.0, 0.3}) {
        expect_matches(*g, {1, 6, 2, 20 * g->size(), 16, DType::f32}, dropout, window, true);  // GQA, chunks of 10
        expect_matches(*g, {2, 4, 4, 12 * g->size(), 8, DType::bf16}, dropout, window, true);  // chunks of 6
      }
  std::unique_ptr<Communicator> overlap = group->duplicate();
  const Case c{2, 6, 2, 16 * group->size(), 16, DType::f32};
  const Local blocking = ring_against_full(*group, c, nullptr, 0.2, 0, true);
  const Local overlapped = ring_against_full(*group, c, overlap.get(), 0.2, 0, true);
  for (size_t n = 0; n < blocking.results.size(); ++n)
    EXPECT_EQ(max_error(overlapped.results[n], blocking.results[n]), 0.0) << n;
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
  const CpAttention ring = [](const Tensor& q, const Tensor& k, const Tensor& v, Communicator& group) {
    return ring_attention(q, k, v, group);
  };
  std::vector<int> all(size_t(w.size()));
  for (int r = 0; r < w.size(); ++r) all[size_t(r)] = r;
  std::unique_ptr<Communicator> group = w.subgroup(all);
  MetaCommunicator meta(w.rank(), w.size());
  EXPECT_EQ(allocations_of(ring, Device::meta(), meta), allocations_of(ring, Device::cpu(), *group));
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
