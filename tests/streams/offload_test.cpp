// Activation offload on a block loop: gradients bitwise identical to keeping everything, device bytes
// gone while offloaded, host and disk tiers, prefetch depths, the host cap, faults, and a randomized
// stress test (these tests also run under TSan: names start with Offload).
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/support/gradcheck.h"
#include "tidal/memory/offload.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/activation.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"

namespace tidal::memory {
namespace {

struct Net {
  std::vector<Tensor> w, v;
  int64_t width, hidden;
  Net(int64_t blocks, int64_t width, int64_t hidden, uint64_t seed) : width(width), hidden(hidden) {
    MemoryScope params(MemoryCategory::parameter);
    manual_seed(seed);
    for (int64_t i = 0; i < blocks; ++i) {
      w.push_back(mul(randn({hidden, width}), 0.2).set_requires_grad(true));
      v.push_back(mul(randn({width, hidden}), 0.2).set_requires_grad(true));
    }
  }
  std::vector<Tensor> params() const {
    std::vector<Tensor> p = w;
    p.insert(p.end(), v.begin(), v.end());
    return p;
  }
  // One block: x + V gelu(W x) * gelu(W x) (the product saves one storage twice).
  Tensor block(int64_t i, const Tensor& x) const {
    Tensor h = gelu(linear(x, w[size_t(i)]));
    return add(x, linear(mul(h, h), v[size_t(i)]));
  }
};

struct Step {
  std::vector<Tensor> grads;
  int64_t device_after_forward = 0;
};

int64_t activation_bytes() { return device_allocator(Device::cpu()).stats()[MemoryCategory::activation].allocated; }

Step run(const Net& net, const Tensor& x0, Offloader* off, const std::string& policy) {
  const int64_t base = activation_bytes();
  const int64_t blocks = int64_t(net.w.size());
  if (off != nullptr) off->begin_micro_batch();
  Tensor x = x0;
  for (int64_t i = 0; i < blocks; ++i) {
    std::unique_ptr<AsyncOffload> guard;
    if (off != nullptr)
      guard =
          std::make_unique<AsyncOffload>(*off, OffloadBlock{i, blocks, offload_check(parse_offload_policy(policy), x)});
    x = net.block(i, x);
  }
  Tensor loss = sum(square(x));
  Step s;
  s.device_after_forward = activation_bytes() - base;
  loss.backward();
  for (const Tensor& p : net.params()) {
    s.grads.push_back(p.grad().clone());
    p.zero_grad();
  }
  return s;
}

void expect_same(const Step& a, const Step& b, const std::string& what) {
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(testing::bitwise_equal(a.grads[i], b.grads[i])) << what << " " << i;
}

std::string spill_dir() { return ::testing::TempDir(); }

}  // namespace

TEST(Offload, HostTierSameGradientsAndDeviceBytesGone) {
  Net net(4, 32, 64, 1);
  manual_seed(2);
  Tensor x = randn({16, 32}).set_requires_grad(true);
  const Step plain = run(net, x, nullptr, "all");
  Offloader off;
  const Step all = run(net, x, &off, "all");
  expect_same(plain, all, "all");
  // Per block: linear saves x (16x32), gelu its input (16x64), mul its two operands (one storage,
  // 16x64), the second linear its input (16x64). Only the last block stays on the device, with the
  // loss's saved input (16x32), and x: the caller still holds it, so its bytes cannot go (their copy
  // is dropped, and counted as in use).
  const int64_t per_block = 4 * (16 * 32 + 3 * 16 * 64), loss = 4 * 16 * 32, input = 4 * 16 * 32;
  EXPECT_EQ(plain.device_after_forward, 4 * per_block + loss);
  EXPECT_EQ(all.device_after_forward, per_block + loss + input);
  const OffloadStats st = off.stats();
  EXPECT_EQ(st.offloaded_bytes, 3 * per_block - input);  // one copy per storage
  EXPECT_EQ(st.in_use_bytes, input);
  EXPECT_GE(st.overlap_fraction(), 0.0);
  EXPECT_LE(st.overlap_fraction(), 1.0);
  // Steady state: a second step allocates no new host memory from the system.
  const int64_t sys = host_allocator().stats().system_allocs;
  expect_same(plain, run(net, x, &off, "all"), "second step");
  EXPECT_EQ(host_allocator().stats().system_allocs, sys);
}

TEST(Offload, ATensorEveryBlockUsesStaysOnTheDevice) {
  // `scale` is not a parameter, so the check accepts it; every block saves it (mul saves the other
  // operand). Releasing it after block 0 would pull it from under block 1: it must stay.
  Net net(3, 16, 32, 5);
  manual_seed(6);
  Tensor x = randn({8, 16});
  Tensor scale = add(mul(randn({8, 16}), 0.1), 1.0);
  auto forward = [&](Offloader* off) {
    if (off != nullptr) off->begin_micro_batch();
    Tensor h = x;
    for (int64_t i = 0; i < 3; ++i) {
      std::unique_ptr<AsyncOffload> guard;
      if (off != nullptr) guard = std::make_unique<AsyncOffload>(*off, OffloadBlock{i, 3, nullptr});
      h = net.block(i, mul(h, scale));
    }
    sum(square(h)).backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : net.params()) {
      grads.push_back(p.grad().clone());
      p.zero_grad();
    }
    return grads;
  };
  const std::vector<Tensor> plain = forward(nullptr);
  Offloader off;
  const std::vector<Tensor> offloaded = forward(&off);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(testing::bitwise_equal(plain[i], offloaded[i])) << i;
  // scale, first saved by block 1 (block 0's mul needs no gradient); x is never saved.
  EXPECT_EQ(off.stats().in_use_bytes, 8 * 16 * 4);
  EXPECT_GT(off.stats().offloaded_bytes, 0);
}

TEST(Offload, PoliciesAndPrefetchDepths) {
  Net net(5, 16, 48, 3);
  manual_seed(4);
  Tensor x = randn({8, 16}).set_requires_grad(true);
  const Step plain = run(net, x, nullptr, "all");
  for (int depth : {0, 1, 3}) {
    for (const char* policy : {"all", "layer-input", "min-bytes=1000"}) {
      OffloadOptions o;
      o.prefetch_depth = depth;
      Offloader off(o);
      const Step s = run(net, x, &off, policy);
      expect_same(plain, s, std::string(policy) + " depth " + std::to_string(depth));
      EXPECT_LT(s.device_after_forward, plain.device_after_forward) << policy;
      if (std::string(policy) == "layer-input") {
        EXPECT_EQ(off.stats().offloaded_bytes, 3 * 8 * 16 * 4);  // block 0's input is x, which the caller holds
        EXPECT_EQ(off.stats().in_use_bytes, 8 * 16 * 4);
      }
    }
  }
  EXPECT_THROW(parse_offload_policy("most"), Error);
  EXPECT_THROW(parse_offload_policy("min-bytes=lots"), Error);
}

TEST(Offload, DiskTierThroughASmallStagingBuffer) {
  Net net(3, 32, 64, 5);
  manual_seed(6);
  Tensor x = randn({16, 32}).set_requires_grad(true);
  const Step plain = run(net, x, nullptr, "all");
  OffloadOptions o;
  o.target = OffloadTarget::disk;
  o.dir = spill_dir();
  o.staging_bytes = 1000;  // several chunks per tensor
  Offloader off(o);
  const Step s = run(net, x, &off, "all");
  expect_same(plain, s, "disk");
  EXPECT_GT(off.stats().offloaded_bytes, 0);
  OffloadOptions missing;
  missing.target = OffloadTarget::disk;
  missing.dir = "/nonexistent/dir";
  EXPECT_THROW(Offloader{missing}, Error);
}

TEST(Offload, HostCapKeepsTheRestOnTheDevice) {
  Net net(4, 32, 64, 7);
  manual_seed(8);
  Tensor x = randn({16, 32}).set_requires_grad(true);
  const Step plain = run(net, x, nullptr, "all");
  OffloadOptions o;
  o.host_limit = host_allocator().stats().allocated + 10000;  // room for a few tensors only
  Offloader off(o);
  const Step s = run(net, x, &off, "all");
  expect_same(plain, s, "capped");
  EXPECT_GT(off.stats().kept_bytes, 0);
  EXPECT_GT(off.stats().offloaded_bytes, 0);
}

TEST(Offload, DiskFaultsAreErrorsNotCorruption) {
  Net net(3, 16, 32, 9);
  manual_seed(10);
  Tensor x = randn({8, 16}).set_requires_grad(true);
  OffloadOptions o;
  o.target = OffloadTarget::disk;
  o.dir = spill_dir();
  {
    Offloader off(o);
    ::setenv("TIDAL_OFFLOAD_FAULT", "write", 1);
    try {
      run(net, x, &off, "all");
      FAIL() << "expected the write error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
    }
    ::unsetenv("TIDAL_OFFLOAD_FAULT");
  }
  for (const Tensor& p : net.params()) p.zero_grad();
  {
    Offloader off(o);
    off.begin_micro_batch();
    Tensor h = x;
    for (int64_t i = 0; i < 3; ++i) {
      AsyncOffload guard(off, {i, 3, nullptr});
      h = net.block(i, h);
    }
    Tensor loss = sum(square(h));
    ::setenv("TIDAL_OFFLOAD_FAULT", "read", 1);
    EXPECT_THROW(loss.backward(), Error);
    ::unsetenv("TIDAL_OFFLOAD_FAULT");
  }
}

TEST(OffloadStress, RandomBlocksSizesSharedStoragesAndDepths) {
  uint64_t rng = 99;
  auto next = [&](int64_t n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return int64_t((rng >> 33) % uint64_t(n));
  };
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t blocks = 1 + next(5), width = 8 + next(24), hidden = 8 + next(40);
    Net net(blocks, width, hidden, 100 + uint64_t(trial));
    manual_seed(200 + uint64_t(trial));
    Tensor x = randn({1 + next(12), width}).set_requires_grad(true);
    const Step plain = run(net, x, nullptr, "all");
    OffloadOptions o;
    o.prefetch_depth = int(next(4));
    if (next(2) == 1) {
      o.target = OffloadTarget::disk;
      o.dir = spill_dir();
      o.staging_bytes = 64 + next(4096);
    }
    Offloader off(o);
    const char* policies[] = {"all", "layer-input", "min-bytes=512"};
    for (int step = 0; step < 2; ++step)
      expect_same(plain, run(net, x, &off, policies[next(3)]), "trial " + std::to_string(trial));
  }
}

}  // namespace tidal::memory
