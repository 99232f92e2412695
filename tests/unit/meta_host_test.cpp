// The meta device's host side and ranks, what a dry run's offload, swap optimizer and sharding run on
// (plan/dry_run.h): the meta host allocator counts as the real host allocator counts, meta streams
// order copies and move nothing, a counted spill file allocates regions as a real one without a file,
// and the meta communicator plays one rank of N.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/error_of.h"
#include "tidal/allocator.h"
#include "tidal/dist/meta_communicator.h"
#include "tidal/memory/spill_file.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

TEST(MetaHost, CountsLikeTheRealHostAllocatorAndTouchesNothing) {
  Allocator& meta = host_allocator(Device::meta());
  Allocator& real = host_allocator();
  EXPECT_NE(&meta, &real);
  EXPECT_EQ(meta.device(), Device::meta());
  EXPECT_FALSE(meta.touches_memory());
  const MemoryStats m0 = meta.stats(), r0 = real.stats();
  {
    Tensor a = empty_host({1000, 3}, DType::f32, Device::meta());
    const Tensor b = empty_host({1000, 3}, DType::f32);
    EXPECT_TRUE(a.is_meta());
    EXPECT_FALSE(b.is_meta());
    const MemoryStats m = meta.stats(), r = real.stats();
    EXPECT_EQ(m[MemoryCategory::host_offload].allocated - m0[MemoryCategory::host_offload].allocated, 12000);
    EXPECT_EQ(m[MemoryCategory::host_offload].blocks - m0[MemoryCategory::host_offload].blocks,
              r[MemoryCategory::host_offload].blocks - r0[MemoryCategory::host_offload].blocks);  // same rounding
    // A copy between meta device and meta host memory runs no kernel and moves nothing.
    const Tensor d = empty({1000, 3}, DType::f32, Device::meta());
    a.copy_(d);
    Stream side("meta side", Device::meta());
    side.copy(a.storage()->data(), d.storage()->data(), a.nbytes(), "offload d2h");
    Event done;
    done.record(side);
    EXPECT_TRUE(done.query());  // in order, on the calling thread
    EXPECT_FALSE(side.is_compute());
  }
  EXPECT_EQ(meta.stats().allocated, m0.allocated);
}

TEST(MetaHost, ACountedSpillFileAllocatesAsARealOneWithoutAFile) {
  auto counted = memory::SpillFile::counted();
  memory::SpillFile real(::testing::TempDir());
  for (memory::SpillFile* f : {counted.get(), &real}) {
    EXPECT_EQ(f->allocate(100), 0);
    EXPECT_EQ(f->allocate(50), 100);
    f->release(0);
    EXPECT_EQ(f->allocate(60), 0);  // first fit in the freed region
    EXPECT_EQ(f->size(), 150);
  }
  char buffer[8] = {};
  counted->write(0, buffer, 8);  // nothing written, nothing read
  counted->read(0, buffer, 8);
}

TEST(MetaCommunicator, PlaysOneRankOfN) {
  dist::MetaCommunicator comm(1, 3);
  EXPECT_EQ(comm.rank(), 1);
  EXPECT_EQ(comm.size(), 3);
  const int64_t mine = 7;
  std::vector<int64_t> all(3, 0);
  comm.all_gather(&mine, all.data(), sizeof mine);
  EXPECT_EQ(all, (std::vector<int64_t>{7, 7, 7}));  // every rank is taken to have this one's
  const std::vector<int64_t> send = {1, 2, 3};
  std::vector<int64_t> recv(3, 0);
  comm.all_to_all(send.data(), recv.data(), sizeof(int64_t));
  EXPECT_EQ(recv, (std::vector<int64_t>{2, 2, 2}));  // every rank's block for rank 1
  const auto dup = comm.duplicate();
  EXPECT_EQ(dup->rank(), 1);
  EXPECT_EQ(std::string(dup->backend()), "meta");
  EXPECT_EQ(testing::error_of([] { dist::MetaCommunicator bad(3, 3); }),
            "[dist] a dry run's rank must be in [0, 3), got 3");
  EXPECT_EQ(testing::error_of([&] { comm.abort(3); }), "[dist] a dry run's rank 1 of 3 aborted (exit code 3)");
}

}  // namespace
}  // namespace tidal
