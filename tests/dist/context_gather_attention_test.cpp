// Eager attention under context parallelism (all-gathered K/V) on CP groups of however many ranks
// this runs on, against eager attention of the whole sequence on one rank: every rank computes the
// whole attention itself and compares its two chunks (chunks i and 2C-1-i) of the output and of the
// q/k/v gradients.
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
#include "tidal/ops/context_gather_attention.h"
#include "tidal/ops/random.h"
#include "tidal/ops/ring_attention.h"
#include "tidal/ops/view.h"
#include "tidal/rng.h"

namespace tidal::dist {
namespace {

AttentionOptions eager(double dropout, int64_t window = 0) {
  AttentionOptions opt;
  opt.kernel = AttentionKernel::eager;
  opt.dropout_p = dropout;
  opt.window = window;
  return opt;
}

// Errors of out, dq, dk, dv against the whole sequence's eager attention (inputs not contiguous:
// views of (B, T, H, D) memory).
// `packed`: packed documents (packed_starts), each call with its rows' starts.
std::vector<double> against_full(Communicator& group, const Case& c, double dropout, int64_t window, bool packed) {
  AttentionOptions opt = eager(dropout, window), mine = opt;
  const PackedStarts starts = packed_starts(c.b, c.seq, group.size(), group.rank());
  if (packed) opt.documents = starts.whole, mine.documents = starts.mine;
  const Compared r = compare_with_whole(
      group, c,
      [&](const Tensor& q, const Tensor& k, const Tensor& v) { return scaled_dot_product_attention(q, k, v, opt); },
      [&](const Tensor& q, const Tensor& k, const Tensor& v) {
        return context_gather_attention(q, k, v, group, mine);
      });
  std::vector<double> errors;
  for (size_t n = 0; n < r.mine.size(); ++n) errors.push_back(max_error(r.mine[n], r.whole[n]));
  return errors;
}

// Errors relative to max(1, |value|), measured on C = 2 and 4: f32 at most 7.5e-7 (summation order:
// GEMMs grouped differently, dK/dV summed over the ranks; at C = 2 the output and dq are the same
// bits); bf16 at most 1.76e-2 in dK/dV, whose per-rank partial sums are rounded to bf16 before the
// sum over the ranks (the output and dq are the same bits). Tolerances: 2e-6 and three bf16
// roundings of values in [1, 2) (the ring's).
void expect_matches(Communicator& group, const Case& c, double dropout, int64_t window = 0, bool packed = false) {
  const std::vector<double> e = against_full(group, c, dropout, window, packed);
  const double tol = c.dtype == DType::f32 ? 2e-6 : 3 * 0x1p-7;
  const std::string where = "C=" + std::to_string(group.size()) + " rank " + std::to_string(group.rank()) + " " +
                            std::string(dtype_name(c.dtype)) + " Hq=" + std::to_string(c.hq) +
                            " Hkv=" + std::to_string(c.hkv) + " dropout " + std::to_string(dropout) + " window " +
                            std::to_string(window) + (packed ? " packed" : "");
  const char* names[] = {"out", "dq", "dk", "dv"};
  for (size_t n = 0; n < e.size(); ++n) EXPECT_LE(e[n], tol) << where << " " << names[n];
  if (std::getenv("TIDAL_PRINT_ERRORS"))
    std::printf("%s out %.3g dq %.3g dk %.3g dv %.3g\n", where.c_str(), e[0], e[1], e[2], e[3]);
}

// Dropout 0.3: a mask that differed anywhere would move outputs by O(1) (kept values scale by 1/0.7).
void expect_all_cases(Communicator& group) {
  for (DType dt : {DType::f32, DType::bf16}) {
    for (double dropout : {0.0, 0.3}) {
      expect_matches(group, {2, 4, 4, 4 * group.size(), 8, dt}, dropout);  // MHA, chunks of 2
      expect_matches(group, {1, 6, 2, 6 * group.size(), 8, dt}, dropout);  // GQA 3:1, chunks of 3
    }
  }
}

std::unique_ptr<Communicator> contiguous_group(Communicator& w, int size) {
  std::vector<int> members;
  for (int m = w.rank() - w.rank() % size; m < std::min(w.size(), w.rank() - w.rank() % size + size); ++m)
    members.push_back(m);
  return w.subgroup(members);
}

TEST(ContextGatherAttention, MatchesWholeSequenceEagerAttentionOnPairs) {
  Communicator& w = world();
  expect_all_cases(*contiguous_group(w, 2));
}

// A sliding window: each chunk's queries attend only the gathered keys of their window, under the
// window's bottom-right mask (within a chunk, across chunks, longer than the sequence).
TEST(ContextGatherAttention, MatchesWholeSequenceWindowedAttention) {
  Communicator& w = world();
  std::unique_ptr<Communicator> pair = contiguous_group(w, 2);
  for (int64_t window : {1, 2, 5, 1000})
    for (double dropout : {0.0, 0.3}) {
      expect_matches(*pair, {1, 6, 2, 6 * pair->size(), 8, DType::f32}, dropout, window);  // chunks of 3
      expect_matches(*pair, {2, 4, 4, 8 * pair->size(), 8, DType::bf16}, dropout, window);
    }
}

// Packed documents: each chunk's queries masked by their global document starts over the gathered keys.
TEST(ContextGatherAttention, MatchesWholeSequencePackedDocuments) {
  Communicator& w = world();
  std::unique_ptr<Communicator> pair = contiguous_group(w, 2);
  for (int64_t window : {0, 2})
    for (double dropout : {0.0, 0.3}) {
      expect_matches(*pair, {1, 6, 2, 6 * pair->size(), 8, DType::f32}, dropout, window, true);
      expect_matches(*pair, {2, 4, 4, 8 * pair->size(), 8, DType::bf16}, dropout, window, true);
    }
}

TEST(ContextGatherAttention, MatchesWholeSequenceEagerAttentionOnFourRanks) {
  Communicator& w = world();
  if (w.size() != 4) GTEST_SKIP() << "runs on four ranks (ctest dist4)";
  expect_all_cases(*contiguous_group(w, 4));
}

// A dry run's rank allocates exactly what the real rank does, forward and backward (the meta
// communicator moves no bytes); what forward keeps is what the header says it saves.
TEST(ContextGatherAttention, MetaAllocatesWhatARealRankAllocates) {
  Communicator& w = world();
  const CpAttention gather = [](const Tensor& q, const Tensor& k, const Tensor& v, Communicator& group) {
    return context_gather_attention(q, k, v, group, eager(0.1));
  };
  std::unique_ptr<Communicator> group = contiguous_group(w, w.size());
  MetaCommunicator meta(group->rank(), group->size());
  const std::vector<int64_t> real = allocations_of(gather, Device::cpu(), *group);
  EXPECT_EQ(allocations_of(gather, Device::meta(), meta), real);
  // Kept after forward: the output (2, 6, T, 8) and the gathered K and V (2, 2, C·T, 8) each, in f32
  // (T = 8C this rank's tokens); per chunk of global rows [s, s + L) (L = T / 2) its probabilities and
  // dropped ones (L x (s + L) for each of 2 x 6 heads, f32) and the u8 dropout mask.
  if (group->size() == 1) return;  // scaled_dot_product_attention
  const int64_t c = group->size(), t = 8 * c, l = t / 2;
  const ContextChunks mine = context_chunks(c * t, int(c), group->rank());
  const int64_t cols = (mine.first + l) + (mine.second + l);  // keys the rank's two chunks see
  EXPECT_EQ(real[0], 4 * 2 * 6 * t * 8 + 2 * 4 * 2 * 2 * c * t * 8 + 2 * 6 * l * cols * (4 + 4 + 1));
}

TEST(ContextGatherAttention, RefusesWhatItDoesNotRun) {
  Communicator& w = world();
  const Tensor q = empty({1, 2, 4, 8}), k = empty({1, 2, 4, 8});
  AttentionOptions flash;
  EXPECT_EQ(testing::error_of([&] { context_gather_attention(q, k, k, w, flash); }),
            "[context_gather_attention] runs the eager attention kernel (ring_attention runs flash under context "
            "parallelism)");
  AttentionOptions framed = eager(0.1);
  framed.dropout_frame.row_offset = 2;
  EXPECT_EQ(testing::error_of([&] { context_gather_attention(q, k, k, w, framed); }),
            "[context_gather_attention] takes no dropout_frame: it places each chunk in the whole matrix itself");
  AttentionOptions bidirectional = eager(0);
  bidirectional.causal = false;
  EXPECT_EQ(testing::error_of([&] { context_gather_attention(q, k, k, w, bidirectional); }),
            "[context_gather_attention] context parallelism supports causal attention only");
  EXPECT_NE(testing::error_of([&] {
              context_gather_attention(empty({1, 2, 3, 8}), empty({1, 2, 3, 8}), empty({1, 2, 3, 8}), w, eager(0));
            }).find("two chunks of equal length, got length 3"),
            std::string::npos);
}

}  // namespace
}  // namespace tidal::dist
