// The NCCL communicator (--distributed-backend nccl) on one GPU: one GPU cannot run a two-rank NCCL job,
// so these tests make a one-rank communicator (bootstrapped over the one-rank host communicator) and
// check that every collective moves device bytes through NCCL, host buffers through the host
// communicator, splits and duplicates work, and the calls are counted. Several ranks are not tested
// here (docs/cuda.md). Skipped without a GPU; the flag's parsing runs everywhere.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tidal/base/error.h"
#include "tidal/base/flags.h"
#include "tidal/dist/collectives.h"
#include "tidal/dist/communicator_factory.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/parallel/layout.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

const Device kGpu = Device::cuda(0);

std::vector<double> ramp(int64_t n, double start) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = start + double(i % 251);
  return v;
}

TEST(Nccl, TheFlagParsesIntoTheLayout) {
  Flags f("tidal train");
  parallel::add_parallel_flags(f);
  f.parse({"--distributed-backend", "nccl"});
  EXPECT_EQ(parallel::parse_parallel_layout(f).backend, dist::DistributedBackend::nccl);
  Flags none("tidal train");
  parallel::add_parallel_flags(none);
  none.parse({});
  EXPECT_EQ(parallel::parse_parallel_layout(none).backend, dist::DistributedBackend::mpi);
  EXPECT_THROW(dist::parse_distributed_backend("gloo"), Error);
  EXPECT_TRUE(dist::communicator_available(dist::DistributedBackend::nccl));  // a CUDA build registers it
}

TEST(Nccl, RefusesAHostDevice) {
  dist::SingleCommunicator host;
  EXPECT_THROW(dist::make_communicator(dist::DistributedBackend::nccl, host, Device::cpu()), Error);
}

TEST(Nccl, OneRankCollectivesMoveDeviceBytes) {
  TIDAL_REQUIRE_CUDA();
  dist::SingleCommunicator host;
  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(dist::DistributedBackend::nccl, host, kGpu);
  ASSERT_EQ(comm->rank(), 0);
  ASSERT_EQ(comm->size(), 1);
  EXPECT_STREQ(comm->backend(), "nccl");
  for (int64_t n : {1, 7, 1000, 4097, 1 << 20}) {
    const std::vector<double> v = ramp(n, 3);
    Tensor in = from_vector(v, {n}, DType::u8, kGpu);
    Tensor out = zeros({n}, DType::u8, kGpu);
    comm->all_gather(in.raw_data(), out.raw_data(), n);
    EXPECT_EQ(out.to_vector<double>(), v) << "all_gather of " << n << " bytes";
    Tensor out2 = zeros({n}, DType::u8, kGpu);
    comm->all_to_all(in.raw_data(), out2.raw_data(), n);
    EXPECT_EQ(out2.to_vector<double>(), v) << "all_to_all of " << n << " bytes";
    comm->broadcast(in.raw_data(), n, 0);
    EXPECT_EQ(in.to_vector<double>(), v) << "broadcast of " << n << " bytes";
  }
  comm->exchange({}, {});  // no peers: nothing to move
  comm->barrier();
  EXPECT_GE(comm->stats().calls, 15);
}

TEST(Nccl, TensorCollectivesOnTheGpu) {
  TIDAL_REQUIRE_CUDA();
  dist::SingleCommunicator host;
  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(dist::DistributedBackend::nccl, host, kGpu);
  const std::vector<double> v = ramp(4097, -100);
  Tensor in = from_vector(v, {4097}, DType::f32, kGpu);
  Tensor out = zeros({4097}, DType::f32, kGpu);
  dist::all_gather(*comm, out, in);
  EXPECT_EQ(out.to_vector<double>(), v);
  dist::broadcast(*comm, out, 0);
  EXPECT_EQ(out.to_vector<double>(), v);
}

TEST(Nccl, HostBuffersGoThroughTheHostCommunicator) {
  TIDAL_REQUIRE_CUDA();
  dist::SingleCommunicator host;
  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(dist::DistributedBackend::nccl, host, kGpu);
  EXPECT_EQ(dist::all_gather_values(*comm, 3.5), std::vector<double>{3.5});
  EXPECT_EQ(dist::all_gather_strings(*comm, "rank zero"), std::vector<std::string>{"rank zero"});
  EXPECT_EQ(dist::any_rank(*comm, std::string("\1\0\1", 3)), std::string("\1\0\1", 3));
  int64_t x = 42;
  comm->broadcast(&x, sizeof x, 0);
  EXPECT_EQ(x, 42);
}

TEST(Nccl, SplitsAndDuplicatesAreNcclCommunicatorsSharingStatistics) {
  TIDAL_REQUIRE_CUDA();
  dist::SingleCommunicator host;
  std::unique_ptr<dist::Communicator> comm = dist::make_communicator(dist::DistributedBackend::nccl, host, kGpu);
  std::unique_ptr<dist::Communicator> sub = comm->subgroup({0});
  std::unique_ptr<dist::Communicator> dup = comm->duplicate();
  EXPECT_THROW(comm->subgroup({1}), Error);
  const int64_t calls = comm->stats().calls;
  for (dist::Communicator* c : {sub.get(), dup.get()}) {
    EXPECT_STREQ(c->backend(), "nccl");
    EXPECT_EQ(c->rank(), 0);
    EXPECT_EQ(c->size(), 1);
    const std::vector<double> v = ramp(777, 1);
    Tensor in = from_vector(v, {777}, DType::u8, kGpu);
    Tensor out = zeros({777}, DType::u8, kGpu);
    c->all_gather(in.raw_data(), out.raw_data(), 777);
    EXPECT_EQ(out.to_vector<double>(), v);
  }
  EXPECT_EQ(comm->stats().calls, calls + 2);
}

}  // namespace
}  // namespace tidal
