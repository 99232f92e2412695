// The CUDA runtime behind the seam: memory through tidal's allocator, host round trips, streams and
// events. Skipped without a GPU.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "tests/cuda/cuda_test_util.h"
#include "tidal/allocator.h"
#include "tidal/event.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

TEST(CudaRuntime, RoundTripThroughDeviceMemoryIsExactAndAccounted) {
  TIDAL_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  const int64_t before = device_allocator(dev).stats().allocated;
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.5f - 7.f;
  {
    Tensor t = from_vector(std::vector<double>(v.begin(), v.end()), {10, 100}, DType::f32, dev);
    EXPECT_EQ(t.device(), dev);
    EXPECT_EQ(device_allocator(dev).stats().allocated - before, 4000);
    EXPECT_EQ(t.to_vector<float>(), v);
  }
  EXPECT_EQ(device_allocator(dev).stats().allocated, before);
}

TEST(CudaRuntime, SideStreamCopiesAndTasksRunInOrder) {
  TIDAL_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  std::vector<float> v(1 << 20, 3.f), back(v.size(), 0.f);
  Tensor t = empty({int64_t(v.size())}, DType::f32, dev);
  Stream side("test side", dev);
  side.copy(t.raw_data(), v.data(), t.nbytes(), "h2d");
  int ran = 0;
  side.enqueue([&] { ran = 1; }, "task");
  side.copy(back.data(), t.raw_data(), t.nbytes(), "d2h");
  Event done;
  done.record(side);
  done.synchronize();
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(back, v);
  EXPECT_TRUE(side.query());
}

TEST(CudaRuntime, AnErrorInASideStreamTaskIsRethrownBySynchronize) {
  TIDAL_REQUIRE_CUDA();
  Stream side("test errors", Device::cuda(0));
  side.enqueue([] { throw std::runtime_error("task failed"); }, "bad");
  EXPECT_THROW(side.synchronize(), std::runtime_error);
}

}  // namespace
}  // namespace tidal
