// optim::reshard_state: a distributed optimizer's state saved by one number of ranks, read back by
// another (the checkpoints of docs/distributed.md).
#include "tidal/optim/shard_state.h"

#include <gtest/gtest.h>

#include "tests/support/error_of.h"
#include "tidal/ops/random.h"

namespace tidal::optim {
namespace {

using State = std::map<std::string, Tensor>;
constexpr int64_t kAlign = 2;

// a and c are cut inside by some layouts; d was never updated (no moments).
NamedParameters params() { return {{"a", zeros({4, 3})}, {"b", zeros({5})}, {"c", zeros({2, 4})}, {"d", zeros({7})}}; }

std::vector<int64_t> numels() { return {12, 5, 8, 7}; }

ShardLayout layout(int ranks) { return make_shard_layout(numels(), ranks, kAlign); }

// One process's state: moments for a, b, c (b and c five steps, a five too: a parameter's pieces
// always share their count), 6 optimizer steps in all.
State whole_state() {
  manual_seed(3);
  State s;
  for (const auto& [name, p] : params()) {
    if (name == "d") continue;
    s[name + ".exp_avg"] = randn(p.shape());
    s[name + ".exp_avg_sq"] = rand(p.shape());
    s[name + ".step"] = from_vector_i64({5}, Shape{});
  }
  s["step"] = from_vector_i64({6}, Shape{});
  return s;
}

// What rank `rank`'s AdamW over its fragments of layout `l` holds for whole_state(): flat pieces.
State rank_state(const ShardLayout& l, int rank) {
  const State whole = whole_state();
  const NamedParameters ps = params();
  State s{{"step", whole.at("step")}};
  for (const ShardLayout::Fragment& f : l.fragments(rank)) {
    const auto& [name, p] = ps[f.param];
    if (!whole.count(name + ".step")) continue;
    const std::string piece = fragment_name(name, p.numel(), f);
    for (const char* m : {".exp_avg", ".exp_avg_sq"})
      s[piece + m] = whole.at(name + m).view({p.numel()}).narrow(0, f.begin, f.length).contiguous();
    s[piece + ".step"] = whole.at(name + ".step");
  }
  return s;
}

// A saved state of `from` whose rank r reads `states[r]`; the ranks read are appended to `read`.
SavedState saved(const ShardLayout& from, const std::vector<State>& states, std::vector<int>* read = nullptr) {
  return {{},  // the parameters: reshard_state's own
          from,
          [states, read](int r) {
            if (read != nullptr) read->push_back(r);
            return states[size_t(r)];
          },
          [](int r) { return "file" + std::to_string(r); }};
}

std::vector<State> rank_states(const ShardLayout& l) {
  std::vector<State> out;
  for (int r = 0; r < l.ranks(); ++r) out.push_back(rank_state(l, r));
  return out;
}

void expect_equal(const State& got, const State& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [key, t] : want) {
    ASSERT_TRUE(got.count(key)) << what << ": " << key;
    EXPECT_EQ(got.at(key).shape(), t.shape()) << what << ": " << key;
    if (t.dtype() == DType::i64)
      EXPECT_EQ(got.at(key).item<int64_t>(), t.item<int64_t>()) << what << ": " << key;
    else
      EXPECT_EQ(got.at(key).to_vector<float>(), t.to_vector<float>()) << what << ": " << key;  // bit for bit
  }
}

TEST(ShardState, FragmentNames) {
  EXPECT_EQ(fragment_name("w", 12, {0, 0, 12}), "w");
  EXPECT_EQ(fragment_name("w", 12, {0, 0, 8}), "w[0:8]");
  EXPECT_EQ(fragment_name("w", 12, {0, 8, 4}), "w[8:12]");
}

TEST(ShardState, TheLayoutsUsedCutParametersInside) {
  EXPECT_EQ(layout(3).bounds, (std::vector<int64_t>{0, 12, 23, 32}));     // c cut at 6 of 8
  EXPECT_EQ(layout(4).bounds, (std::vector<int64_t>{0, 8, 16, 25, 32}));  // a cut at 8 of 12, b at 4 of 5
}

TEST(ShardState, OverlappingRanks) {
  const ShardLayout two = make_shard_layout({10, 10}, 2, 1), four = make_shard_layout({10, 10}, 4, 1);
  EXPECT_EQ(overlapping_ranks(two, four, 1), std::vector<int>{0});
  EXPECT_EQ(overlapping_ranks(two, four, 2), std::vector<int>{1});
  EXPECT_EQ(overlapping_ranks(four, two, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(overlapping_ranks(two, two, 1), std::vector<int>{1});
  // A shard of nothing still needs the optimizer's step count, which every saved rank holds.
  const ShardLayout tiny = make_shard_layout({2}, 3, 1);  // bounds 0, 1, 2, 2
  EXPECT_EQ(tiny.shard_size(2), 0);
  EXPECT_EQ(overlapping_ranks(two, tiny, 2), std::vector<int>{0});
}

// Every layout of 1 to 4 ranks read back by every other: each rank gets exactly the pieces it would
// have had, bit for bit, reading only the saved ranks that hold them (with the same layout: its own).
TEST(ShardState, EveryRankCountReadsBackAsAnyOther) {
  for (int from = 1; from <= 4; ++from) {
    for (int to = 1; to <= 4; ++to) {
      for (int rank = 0; rank < to; ++rank) {
        const std::string what = std::to_string(from) + " -> " + std::to_string(to) + " rank " + std::to_string(rank);
        std::vector<int> read;
        const State got = reshard_state(params(), saved(layout(from), rank_states(layout(from)), &read), layout(to),
                                        rank, /*whole_shapes=*/false);
        expect_equal(got, rank_state(layout(to), rank), what);
        EXPECT_EQ(read, overlapping_ranks(layout(from), layout(to), rank)) << what;
        if (from == to) {
          EXPECT_EQ(read, std::vector<int>{rank}) << what;
        }
      }
    }
  }
}

// One process's AdamW takes a whole parameter's moments in the parameter's shape; its own state is
// the layout of one rank.
TEST(ShardState, WholeShapesForOneProcess) {
  const State got = reshard_state(params(), saved(layout(3), rank_states(layout(3))), layout(1), 0, true);
  expect_equal(got, whole_state(), "3 -> one process");
  const State back = reshard_state(params(), saved(layout(1), {whole_state()}), layout(2), 1, false);
  expect_equal(back, rank_state(layout(2), 1), "one process -> 2, rank 1");
}

std::string reshard_error(std::vector<State> states, int to, int rank) {
  const ShardLayout from = make_shard_layout(numels(), int(states.size()), kAlign);
  return testing::error_of([&] { reshard_state(params(), saved(from, states), layout(to), rank, false); });
}

TEST(ShardState, ErrorsNameTheSavedFileAndTheEntry) {
  std::vector<State> s = rank_states(layout(3));
  s[1]["a.exp_avg"] = zeros({12});  // a belongs to rank 0
  EXPECT_EQ(reshard_error(s, 1, 0),
            "file1 holds 'a.exp_avg', which is not the state of a piece of saved rank 1's shard: the file does not "
            "match the checkpoint's layout or this model");

  s = rank_states(layout(3));
  s[1]["c[0:6].exp_avg"] = zeros({5});
  EXPECT_EQ(reshard_error(s, 1, 0), "file1: 'c[0:6].exp_avg' has 5 elements, the piece 6");

  s = rank_states(layout(3));
  s[2].erase("c[6:8].exp_avg_sq");
  EXPECT_EQ(reshard_error(s, 2, 1), "file2 lacks 'c[6:8].exp_avg_sq'");

  s = rank_states(layout(3));
  s[2]["step"] = from_vector_i64({7}, Shape{});
  EXPECT_EQ(reshard_error(s, 1, 0), "file2 says the optimizer took 7 steps, an earlier shard 6");
  s[2].erase("step");
  EXPECT_EQ(reshard_error(s, 1, 0), "file2 lacks the optimizer's step count 'step'");

  s = rank_states(layout(3));
  s[2]["c[6:8].step"] = from_vector_i64({4}, Shape{});
  EXPECT_EQ(reshard_error(s, 1, 0), "file2: 'c[6:8].step' is 4 but file1 says 5 for its piece of 'c'");

  s = rank_states(layout(3));  // rank 2's piece of c without moments, rank 1's with
  for (const char* k : {"c[6:8].exp_avg", "c[6:8].exp_avg_sq", "c[6:8].step"}) s[2].erase(k);
  EXPECT_EQ(reshard_error(s, 1, 0),
            "file1 holds optimizer moments for part of 'c' but file2 none for another part: the files do not belong "
            "together");
  s[2]["c[6:8].exp_avg"] = zeros({2});
  EXPECT_EQ(reshard_error(s, 1, 0), "file2: 'c[6:8].exp_avg' has no step count 'c[6:8].step'");

  s = rank_states(layout(3));  // a master copy (bf16 parameters) in one piece of c only
  s[1]["c[0:6].master"] = zeros({6});
  EXPECT_EQ(reshard_error(s, 1, 0),
            "file1 and the other saved files hold master for only part of 'c': the files do not belong together");
}

}  // namespace
}  // namespace tidal::optim
