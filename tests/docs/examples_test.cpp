// The code examples of docs/*.md, compiled and run. Each test body below is a block from the docs,
// marked there "```cpp example:NAME"; DocsExamples.InSync checks that every such block appears here
// verbatim, so the docs cannot drift from code that works.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/support/gradcheck.h"
#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/saved_tensor.h"
#include "tidal/memory/offload.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"
#include "tidal/profile/profiler.h"
#include "tidal/stream.h"

namespace tidal {

// clang-format off
TEST(DocsExamples, Views) {
Tensor a = arange(0, 24, 1, DType::f32).reshape({2, 3, 4});  // (2, 3, 4)
Tensor t = a.transpose(1, 2);                                // (2, 4, 3), a view
EXPECT_TRUE(t.is_alias_of(a));
EXPECT_FALSE(t.is_contiguous());
Tensor c = t.contiguous();  // copies, because t is not contiguous
EXPECT_FALSE(c.is_alias_of(a));
EXPECT_TRUE(c.contiguous().is_alias_of(c));  // no copy when already contiguous
std::vector<Tensor> parts = split(a, {1, 3}, 2);  // views of (2, 3, 1) and (2, 3, 3)
EXPECT_TRUE(parts[1].is_alias_of(a));
EXPECT_THROW(t.view({-1}), Error);  // a transposed tensor cannot be flattened without a copy
EXPECT_EQ(t.reshape({-1}).shape(), Shape{24});  // reshape copies when it must
}

TEST(DocsExamples, Meta) {
Allocator& meta = device_allocator(Device::meta());
const int64_t before = meta.stats().allocated;
Tensor x = empty({8, 1024, 4096}, DType::f32, Device::meta());  // 128 MiB, none of it touched
Tensor w = empty({4096, 4096}, DType::f32, Device::meta());
Tensor y = matmul(x, w);  // shapes are computed, no kernel runs
EXPECT_EQ(y.shape(), (Shape{8, 1024, 4096}));
EXPECT_EQ(meta.stats().allocated - before, 2 * (int64_t(8) * 1024 * 4096 * 4) + int64_t(4096) * 4096 * 4);
EXPECT_THROW(y.data<float>(), Error);  // a meta tensor has no data
}

TEST(DocsExamples, Categories) {
Allocator& dev = device_allocator(Device::cpu());
auto activation = [&] { return dev.stats()[MemoryCategory::activation].allocated; };
const int64_t base = activation();
Tensor w;
{
  MemoryScope scope(MemoryCategory::parameter);  // allocations in this scope are parameters
  w = full({1024}, 0.5).set_requires_grad(true);
}
Tensor y = exp(tanh(w));  // tanh and exp each save their output: 2 x 4 KiB of activations
EXPECT_EQ(activation() - base, 2 * 4096);
sum(y).backward();  // each node drops what it saved right after its backward
EXPECT_EQ(activation() - base, 0);
EXPECT_EQ(w.grad().storage()->category(), MemoryCategory::gradient);
}

TEST(DocsExamples, Limit) {
Allocator& dev = device_allocator(Device::cpu());
const int64_t old_limit = dev.limit();
dev.set_limit(dev.stats().reserved + (int64_t(1) << 20));  // 1 MiB of headroom
try {
  Tensor big = empty({1 << 20});  // 4 MiB
  FAIL() << "expected OutOfMemory";
} catch (const OutOfMemory& e) {
  EXPECT_EQ(e.requested(), int64_t(4) << 20);
  EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos);
}
dev.set_limit(old_limit);
}

TEST(DocsExamples, Release) {
Tensor t = full({256}, 3.0);
Tensor view = t.narrow(0, 10, 5);
std::shared_ptr<Storage> s = t.storage();
s->release();  // bytes freed; t and view still refer to s
EXPECT_THROW(view.data<float>(), Error);
s->rematerialize();  // new bytes, same Storage: t and view are valid again
view.fill_(7.0);
EXPECT_EQ(t.to_vector<float>()[12], 7.0f);
}

TEST(DocsExamples, Streams) {
Tensor activation = randn({256, 1024});
Tensor host = empty_host({256, 1024});  // offload target, accounted by host_allocator()
Stream d2h("d2h");
Event produced;
produced.record(Stream::compute());  // everything computed so far
d2h.wait(produced);                  // the copy starts after it
copy_async(host, activation, d2h);
Event copied;
copied.record(d2h);
// ... the compute thread goes on working here while the copy runs ...
copied.synchronize();  // now host holds the data; the device bytes could be released
EXPECT_EQ(host.to_vector<float>(), activation.to_vector<float>());

Stream failing("failing");
failing.enqueue([] { throw Error("disk full"); });
Event after;
after.record(failing);
EXPECT_THROW(after.synchronize(), Error);  // the worker's error surfaces here
}

TEST(DocsExamples, Hooks) {
// Hooks that count what autograd saves and hand the tensors back unchanged.
class Counting : public autograd::SavedTensorHooks {
 public:
  int packed = 0;
  int64_t bytes = 0;
  std::shared_ptr<void> pack(const Tensor& t) override {
    ++packed;
    bytes += t.nbytes();
    return std::make_shared<Tensor>(t);
  }
  Tensor unpack(const std::shared_ptr<void>& p) override { return *static_cast<Tensor*>(p.get()); }
};

auto hooks = std::make_shared<Counting>();
Tensor w = randn({64, 32}).set_requires_grad(true);
Tensor x = randn({16, 32});
Tensor loss;
{
  autograd::SavedTensorHooksGuard guard(hooks);  // RAII: active in this scope only
  loss = sum(tanh(linear(x, w)));  // linear saves x (for w's gradient), tanh its output
}
EXPECT_EQ(hooks->packed, 2);  // w is not saved: x needs no gradient
EXPECT_EQ(hooks->bytes, (16 * 32 + 16 * 64) * 4);
loss.backward();  // unpacks through the same hooks
}

TEST(DocsExamples, Checkpoint) {
Tensor w1, w2;
{
  MemoryScope params(MemoryCategory::parameter);  // saved parameters stay parameters
  w1 = mul(randn({128, 32}), 0.1).set_requires_grad(true);
  w2 = mul(randn({16, 128}), 0.1).set_requires_grad(true);
}
auto block = [&](const Tensor& x) { return linear(dropout(tanh(linear(x, w1)), 0.1), w2); };
Tensor x = randn({64, 32});

Allocator& dev = device_allocator(Device::cpu());
auto activation = [&] { return dev.stats()[MemoryCategory::activation].allocated; };
const int64_t base = activation();
manual_seed(1);
Tensor plain = block(x);  // keeps x, tanh's output, the dropout mask and dropout's output
EXPECT_EQ(activation() - base, 64 * 32 * 4 + 64 * 128 * (4 + 1 + 4));
sum(plain).backward();
Tensor g_plain = w1.grad().clone();
w1.zero_grad();
w2.zero_grad();

manual_seed(1);
Tensor ck = autograd::checkpoint(block, x);  // keeps x only
EXPECT_EQ(activation() - base, 64 * 32 * 4);
sum(ck).backward();  // replays block once, with the same dropout mask
EXPECT_TRUE(testing::bitwise_equal(w1.grad(), g_plain));
}

TEST(DocsExamples, Offload) {
Tensor w;
{
  MemoryScope params(MemoryCategory::parameter);  // parameters are never offloaded
  w = mul(randn({64, 64}), 0.1).set_requires_grad(true);
}
Tensor x = randn({32, 64});
Allocator& dev = device_allocator(Device::cpu());
const int64_t base = dev.stats()[MemoryCategory::activation].allocated;

memory::OffloadOptions options;  // host tier, prefetch depth 1, no host cap
memory::Offloader offloader(options);
offloader.begin_micro_batch();  // entries are keyed by (micro-batch, block, index)
Tensor h = x;
for (int64_t i = 0; i < 4; ++i) {
  memory::AsyncOffload guard(offloader, {.block_idx = i, .depth = 4,
                                         .check = memory::offload_check({memory::OffloadPolicyKind::all})});
  h = tanh(matmul(h, w));  // (32, 64): matmul saves its input h, tanh its output (8 KiB each)
}
// Block b's tanh output is block b+1's input: it leaves the device once block b+1 is done with it.
// Still here: x (the caller holds it), block 2's output (block 3's input) and block 3's output.
EXPECT_EQ(dev.stats()[MemoryCategory::activation].allocated - base, 3 * 32 * 64 * 4);
sum(h).backward();  // block 3's first unpack prefetches block 2, and so on down
const memory::OffloadStats st = offloader.stats();
EXPECT_EQ(st.offloaded_bytes, 2 * 32 * 64 * 4);  // blocks 0 and 1's outputs went to host and back
EXPECT_EQ(st.in_use_bytes, 2 * 32 * 64 * 4);     // x and block 2's output never could
EXPECT_GE(st.overlap_fraction(), 0.0);
}

TEST(DocsExamples, Profiler) {
const std::string dir = ::testing::TempDir() + "tidal_docs_profile";
profile::Profiler profiler({dir, 1, 1}, {{"model", "one matmul"}});  // steps 1 to 1 into dir
Tensor w = randn({256, 256}).set_requires_grad(true);
profiler.begin_step(1);
Tensor y;
{
  profile::Range phase("forward", profile::kPhase);  // a phase band in memory.svg, a range in the trace
  y = tanh(matmul(randn({64, 256}), w));
}
{
  profile::Range phase("backward", profile::kPhase);
  sum(y).backward();
}
profiler.end_step(1, nullptr);  // the window's last step: the files are written
EXPECT_TRUE(std::filesystem::exists(dir + "/memory.svg"));
EXPECT_GE(profiler.data().ranges.size(), 6u);  // 2 phases, matmul, tanh, sum, backward and its nodes
}
// clang-format on

namespace {
std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

TEST(DocsExamples, InSync) {
  const std::string root = TIDAL_SOURCE_DIR;
  const std::string tests = read_file(root + "/tests/docs/examples_test.cpp");
  ASSERT_FALSE(tests.empty());
  int blocks = 0;
  for (const char* doc : {"docs/tensors.md", "docs/memory-accounting.md", "docs/streams.md", "docs/autograd.md",
                          "docs/offload.md", "docs/profiling.md"}) {
    const std::string text = read_file(root + "/" + doc);
    ASSERT_FALSE(text.empty()) << doc;
    const std::regex block("```cpp example:([a-z_]+)\n([\\s\\S]*?)```");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), block); it != std::sregex_iterator(); ++it) {
      ++blocks;
      EXPECT_NE(tests.find((*it)[2].str()), std::string::npos)
          << doc << ": example '" << (*it)[1] << "' is not in tests/docs/examples_test.cpp verbatim";
    }
  }
  EXPECT_EQ(blocks, 10);
}

}  // namespace tidal
