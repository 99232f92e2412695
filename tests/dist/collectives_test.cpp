// Tensor collectives on however many ranks this runs on (1, or 2 and 3 under mpirun): the results
// equal a single process adding the ranks' contributions in rank order, bit for bit.
#include "tidal/dist/collectives.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tidal/allocator.h"
#include "tidal/memory_stats.h"

namespace tidal::dist {
namespace {

// Rank r's contribution: values that make fp32 addition order visible (mixed magnitudes).
Tensor contribution(int rank, int64_t n, DType dtype = DType::f32) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::ldexp(1.0 + 0.37 * double(i % 7), int((rank * 13 + i) % 40) - 20);
  return from_vector(v, {n}).to(dtype);
}

// What one process gets adding the contributions of ranks 0..size-1 in order.
Tensor sequential_sum(int size, int64_t n, DType dtype = DType::f32) {
  Tensor sum = contribution(0, n, dtype);
  for (int r = 1; r < size; ++r) sum.add_(contribution(r, n, dtype));
  return sum;
}

void expect_bitwise_equal(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.numel(), b.numel());
  const auto x = a.to(DType::f32).to_vector<float>(), y = b.to(DType::f32).to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << "element " << i;
}

TEST(Collectives, AllReduceSumsInRankOrderForEvenAndUnevenSizes) {
  Communicator& comm = world();
  for (int64_t n : {int64_t(1), int64_t(6), int64_t(7), int64_t(1000), int64_t(1001)}) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
      Tensor t = contribution(comm.rank(), n, dtype);
      all_reduce_sum(comm, t);
      expect_bitwise_equal(t, sequential_sum(comm.size(), n, dtype));
    }
  }
}

TEST(Collectives, ReduceScatterThenAllGatherIsAllReduce) {
  Communicator& comm = world();
  const int64_t shard = 5, n = shard * comm.size();
  Tensor in = contribution(comm.rank(), n);
  Tensor mine = empty({shard});
  reduce_scatter_sum(comm, mine, in);
  expect_bitwise_equal(mine, sequential_sum(comm.size(), n).narrow(0, comm.rank() * shard, shard));
  Tensor all = empty({n});
  all_gather(comm, all, mine);
  expect_bitwise_equal(all, sequential_sum(comm.size(), n));
}

TEST(Collectives, BroadcastAndScalars) {
  Communicator& comm = world();
  Tensor t = full({3}, double(comm.rank() + 1));
  broadcast(comm, t, comm.size() - 1);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{float(comm.size()), float(comm.size()), float(comm.size())}));
  EXPECT_EQ(all_reduce_sum(comm, double(comm.rank() + 1)), double(comm.size() * (comm.size() + 1) / 2));
  EXPECT_EQ(all_reduce_max(comm, double(comm.rank())), double(comm.size() - 1));
  const std::vector<std::string> names = all_gather_strings(comm, std::string(size_t(comm.rank()), 'x'));
  ASSERT_EQ(int(names.size()), comm.size());
  for (int r = 0; r < comm.size(); ++r) EXPECT_EQ(names[size_t(r)], std::string(size_t(r), 'x'));
}

TEST(Collectives, ScratchIsTemporaryMemoryExactlyAndMetaMovesNothing) {
  Communicator& comm = world();
  Allocator& meta = device_allocator(Device::meta());
  for (int64_t n : {int64_t(12), int64_t(13)}) {
    Tensor t = empty({n}, DType::f32, Device::meta());
    meta.reset_peak_stats();
    const int64_t before = meta.stats()[MemoryCategory::temporary].allocated;
    all_reduce_sum(comm, t);  // accounted, no bytes touched
    const int64_t size = comm.size(), shard = (n + size - 1) / size, padded = shard * size != n ? shard * size : 0;
    // docs/distributed.md: the shard being summed, every rank's block of it, and a padded copy when
    // the size does not divide evenly.
    const int64_t expected = size == 1 ? 0 : 4 * (shard + size * shard + padded);
    EXPECT_EQ(meta.stats()[MemoryCategory::temporary].peak - before, expected) << "n=" << n;
    EXPECT_EQ(meta.stats()[MemoryCategory::temporary].allocated, before);
  }
}

// The communicator counts what it moves (summary.comm): an all-reduce of n elements is an all-to-all
// of every rank's blocks, then an all-gather of the sums: 2 (N - 1) n / N elements out, as many in.
TEST(Collectives, StatisticsCountTheBytesMoved) {
  Communicator& comm = world();
  const int64_t n = 6 * comm.size();
  Tensor t = contribution(comm.rank(), n);
  const CommStats before = comm.stats();
  all_reduce_sum(comm, t);
  const CommStats after = comm.stats();
  if (comm.size() == 1) {
    EXPECT_EQ(after.calls, before.calls);  // nothing to move
    return;
  }
  const int64_t moved = 2 * (comm.size() - 1) * (n / comm.size()) * 4;
  EXPECT_EQ(after.calls - before.calls, 2);
  EXPECT_EQ(after.bytes_sent - before.bytes_sent, moved);
  EXPECT_EQ(after.bytes_received - before.bytes_received, moved);
  EXPECT_GT(after.busy_ns, before.busy_ns);
}

TEST(Collectives, ShapeMistakesAreExplained) {
  Communicator& comm = world();
  Tensor in = zeros({3 * comm.size() + 1}), out = zeros({3});
  try {
    reduce_scatter_sum(comm, out, in);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[reduce_scatter] in must hold"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tidal::dist
