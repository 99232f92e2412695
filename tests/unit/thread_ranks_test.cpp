// Ranks as threads of one process (tests/support/thread_ranks.h), the tensor-level exchange
// (dist::exchange) over them, and the distributed optimizer on 1 to 3 of them against one AdamW, bit
// for bit: on the cpu here; tests/cuda/distributed_adamw_test.cpp runs the same on GPU tensors, whose
// bytes the threads' host communicator makes dist::exchange stage through the host.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/error_of.h"
#include "tests/support/exchange_views.h"
#include "tests/support/sharded_adamw_run.h"
#include "tests/support/thread_ranks.h"
#include "tidal/dist/collectives.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

TEST(ThreadRanks, ExchangeMovesViewsInOrder) { testing::expect_exchange_moves_views(Device::cpu()); }

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
      for (bool shard_parameters : {false, true})
        for (bool in_place : {false, true}) {  // Note [Reduce-scatter in place]: the sums alike either way
          testing::ShardedRunOptions o;
          o.dtype = dtype;
          o.shard_parameters = shard_parameters;
          o.in_place = in_place;
          const testing::AdamWRun want = testing::plain_adamw_run(ranks, o);
          std::vector<testing::AdamWRun> got(static_cast<size_t>(ranks));
          testing::run_on_thread_ranks(
              ranks, [&](dist::Communicator& comm) { got[size_t(comm.rank())] = testing::sharded_adamw_run(comm, o); });
          for (int r = 0; r < ranks; ++r)
            testing::expect_same_run(got[size_t(r)], want,
                                     std::to_string(ranks) + " ranks, " + std::string(dtype_name(dtype)) +
                                         (shard_parameters ? ", ZeRO-3" : ", ZeRO-1") + (in_place ? ", in place" : "") +
                                         ", rank " + std::to_string(r));
        }
}

}  // namespace
}  // namespace tidal
