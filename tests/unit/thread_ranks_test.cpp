// Ranks as threads of one process (tests/support/thread_ranks.h), the tensor-level exchange
// (dist::exchange) over them, and the distributed optimizer on 1 to 3 of them against one AdamW, bit
// for bit: on the cpu here; tests/cuda/distributed_adamw_test.cpp runs the same on GPU tensors, whose
// bytes the threads' host communicator makes dist::exchange stage through the host.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/error_of.h"
#include "tests/support/sharded_adamw_run.h"
#include "tests/support/thread_ranks.h"
#include "tidal/dist/collectives.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

std::vector<double> ramp(int64_t n, double start) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = start + double(i);
  return v;
}

TEST(ThreadRanks, ExchangeMovesViewsInOrder) {
  std::vector<std::vector<double>> got(3);
  testing::run_on_thread_ranks(3, [&](dist::Communicator& comm) {
    const int me = comm.rank();
    const Tensor mine = from_vector(ramp(10, 100.0 * me), {10});
    const Tensor piece = mine.narrow(0, 2, 5);  // one view for both peers
    std::vector<dist::TensorTransfer> sends, receives;
    const Tensor in = zeros({3, 6});
    for (int r = 0; r < 3; ++r) {
      if (r == me) continue;
      sends.push_back({r, piece});
      sends.push_back({r, mine.narrow(0, 9, 1)});  // a second message to the same rank, matched after
      receives.push_back({r, in.select(0, r).narrow(0, 0, 5)});
      receives.push_back({r, in.select(0, r).narrow(0, 5, 1)});
    }
    dist::exchange(comm, sends, receives);
    got[size_t(me)] = in.to_vector<double>();
  });
  for (int me = 0; me < 3; ++me)
    for (int r = 0; r < 3; ++r) {
      std::vector<double> want(6, 0.0);
      if (r != me) want = {100.0 * r + 2, 100.0 * r + 3, 100.0 * r + 4, 100.0 * r + 5, 100.0 * r + 6, 100.0 * r + 9};
      const std::vector<double> row(got[size_t(me)].begin() + 6 * r, got[size_t(me)].begin() + 6 * (r + 1));
      EXPECT_EQ(row, want) << "rank " << me << " from rank " << r;
    }
}

TEST(ThreadRanks, ExchangeRefusesAStridedView) {
  testing::run_on_thread_ranks(1, [](dist::Communicator& comm) {
    const Tensor t = zeros({4, 4}).transpose(0, 1);
    EXPECT_NE(testing::error_of([&] {
                dist::exchange(comm, {{0, t}}, {});
              }).find("must be contiguous"),
              std::string::npos);
  });
}

TEST(ThreadRanks, AFailingRankFailsTheOthersWaits) {
  const std::string e = testing::error_of([] {
    testing::run_on_thread_ranks(2, [](dist::Communicator& comm) {
      TIDAL_CHECK(comm.rank() != 0, "rank 0 gave up");
      comm.barrier();  // rank 1 waits for rank 0, which never comes
    });
  });
  EXPECT_EQ(e, "rank 0 gave up");
}

TEST(ThreadRanks, DistributedAdamWIsOneAdamWBitForBit) {
  for (int ranks : {1, 2, 3})
    for (DType dtype : {DType::f32, DType::bf16})
      for (bool shard_parameters : {false, true}) {
        testing::ShardedRunOptions o;
        o.dtype = dtype;
        o.shard_parameters = shard_parameters;
        const testing::AdamWRun want = testing::plain_adamw_run(ranks, o);
        std::vector<testing::AdamWRun> got(static_cast<size_t>(ranks));
        testing::run_on_thread_ranks(
            ranks, [&](dist::Communicator& comm) { got[size_t(comm.rank())] = testing::sharded_adamw_run(comm, o); });
        for (int r = 0; r < ranks; ++r)
          testing::expect_same_run(got[size_t(r)], want,
                                   std::to_string(ranks) + " ranks, " + std::string(dtype_name(dtype)) +
                                       (shard_parameters ? ", ZeRO-3" : ", ZeRO-1") + ", rank " + std::to_string(r));
      }
}

}  // namespace
}  // namespace tidal
