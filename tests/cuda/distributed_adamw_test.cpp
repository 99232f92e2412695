// The distributed optimizer (--use-distributed-optimizer, ZeRO-1/3; optim/distributed_adamw.h) on GPU
// tensors, against one AdamW on the same GPU, bit for bit: over a one-rank NCCL communicator and the
// one-rank host communicator (one rank's shard is the whole model: nothing crosses ranks, but the
// optimizer runs its device path), and over 2 and 3 ranks as threads sharing the GPU
// (tests/support/thread_ranks.h), whose host communicator makes every exchange of the optimizer (the
// gradients' reduce-scatter, the parameters' all-gather) stage the GPU's bytes through the host, as
// MPI does. One GPU cannot run NCCL on several ranks (docs/cuda.md). Skipped without a GPU.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tests/support/exchange_views.h"
#include "tests/support/sharded_adamw_run.h"
#include "tests/support/thread_ranks.h"
#include "tidal/dist/collectives.h"
#include "tidal/dist/communicator_factory.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

const Device kGpu = Device::cuda(0);

std::string describe(const testing::ShardedRunOptions& o, const std::string& over) {
  return over + ", " + std::string(dtype_name(o.dtype)) + (o.shard_parameters ? ", ZeRO-3" : ", ZeRO-1");
}

// Every dtype and sharding of the runs, on the GPU.
std::vector<testing::ShardedRunOptions> gpu_runs() {
  std::vector<testing::ShardedRunOptions> out;
  for (DType dtype : {DType::f32, DType::bf16})
    for (bool shard_parameters : {false, true}) {
      testing::ShardedRunOptions o;
      o.device = kGpu;
      o.dtype = dtype;
      o.shard_parameters = shard_parameters;
      out.push_back(o);
    }
  return out;
}

TEST(CudaDistributedAdamW, OneRankNcclIsAdamWBitForBit) {
  TIDAL_REQUIRE_CUDA();
  dist::SingleCommunicator host;
  std::unique_ptr<dist::Communicator> nccl = dist::make_communicator(dist::DistributedBackend::nccl, host, kGpu);
  ASSERT_TRUE(nccl->reads_device_memory());
  for (const testing::ShardedRunOptions& o : gpu_runs())
    testing::expect_same_run(testing::sharded_adamw_run(*nccl, o), testing::plain_adamw_run(1, o),
                             describe(o, "nccl, 1 rank"));
}

TEST(CudaDistributedAdamW, OneRankHostCommunicatorIsAdamWBitForBit) {
  TIDAL_REQUIRE_CUDA();
  dist::SingleCommunicator host;
  for (const testing::ShardedRunOptions& o : gpu_runs())
    testing::expect_same_run(testing::sharded_adamw_run(host, o), testing::plain_adamw_run(1, o),
                             describe(o, "single, 1 rank"));
}

TEST(CudaDistributedAdamW, RanksStagingThroughTheHostAreAdamWBitForBit) {
  TIDAL_REQUIRE_CUDA();
  for (int ranks : {2, 3})
    for (const testing::ShardedRunOptions& o : gpu_runs()) {
      const testing::AdamWRun want = testing::plain_adamw_run(ranks, o);
      std::vector<testing::AdamWRun> got(static_cast<size_t>(ranks));
      testing::run_on_thread_ranks(ranks, [&](dist::Communicator& comm) {
        ASSERT_FALSE(comm.reads_device_memory());
        got[size_t(comm.rank())] = testing::sharded_adamw_run(comm, o);
      });
      for (int r = 0; r < ranks; ++r)
        testing::expect_same_run(got[size_t(r)], want,
                                 describe(o, std::to_string(ranks) + " ranks, rank " + std::to_string(r)));
    }
}

// dist::exchange on GPU views for a host communicator: a view sent to two ranks, two messages to one
// rank matched in order, receives into rows of one GPU tensor.
TEST(CudaDistributedAdamW, StagedExchangeMovesGpuViews) {
  TIDAL_REQUIRE_CUDA();
  testing::expect_exchange_moves_views(kGpu);
}

}  // namespace
}  // namespace tidal
