// Streams and events: ordering, cross-stream waits, errors, copies. Run under TSan by scripts/test.sh
// (test names start with Stream or Event for that filter).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "tidal/ops/random.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {
void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }
}  // namespace

TEST(StreamTest, RunsWorkInOrderOnAWorkerThread) {
  Stream s("worker");
  std::mutex mu;
  std::vector<int> order;
  std::thread::id worker_id;
  for (int i = 0; i < 100; ++i)
    s.enqueue([&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
      worker_id = std::this_thread::get_id();
    });
  s.synchronize();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[size_t(i)], i);
  EXPECT_NE(worker_id, std::this_thread::get_id());
  EXPECT_TRUE(s.query());
}

TEST(StreamTest, ComputeStreamRunsInline) {
  Stream& c = Stream::compute();
  EXPECT_TRUE(c.is_compute());
  bool ran = false;
  c.enqueue([&] { ran = true; });
  EXPECT_TRUE(ran);
  Event e;
  e.record(c);
  EXPECT_TRUE(e.query());
}

TEST(StreamTest, CurrentStreamIsTheComputeStreamUnlessAGuardSetsOne) {
  EXPECT_EQ(&current_stream(Device::cpu()), &Stream::compute(Device::cpu()));
  EXPECT_EQ(&current_stream(Device::meta()), &Stream::compute(Device::meta()));
  EXPECT_NE(&Stream::compute(Device::cpu()), &Stream::compute(Device::meta()));
  Stream a("a"), b("b"), m("m", Device::meta());
  {
    StreamGuard ga(a);
    EXPECT_EQ(&current_stream(Device::cpu()), &a);
    EXPECT_EQ(&current_stream(Device::meta()), &Stream::compute(Device::meta()));  // per device
    {
      StreamGuard gb(b);
      StreamGuard gm(m);
      EXPECT_EQ(&current_stream(Device::cpu()), &b);
      EXPECT_EQ(&current_stream(Device::meta()), &m);
      const Stream* other = nullptr;  // per thread: another thread sees the compute stream
      std::thread([&] { other = &current_stream(Device::cpu()); }).join();
      EXPECT_EQ(other, &Stream::compute(Device::cpu()));
    }
    EXPECT_EQ(&current_stream(Device::cpu()), &a);
    EXPECT_EQ(&current_stream(Device::meta()), &Stream::compute(Device::meta()));
  }
  EXPECT_EQ(&current_stream(Device::cpu()), &Stream::compute(Device::cpu()));
}

TEST(StreamTest, CrossStreamWaitOrdersWork) {
  Stream a("a"), b("b");
  std::atomic<bool> first_done{false};
  std::atomic<bool> saw_first{false};
  a.enqueue([&] {
    sleep_ms(30);
    first_done = true;
  });
  Event e;
  e.record(a);
  b.wait(e);
  b.enqueue([&] { saw_first = first_done.load(); });
  b.synchronize();
  EXPECT_TRUE(saw_first);
}

TEST(StreamTest, ComputeStreamWaitBlocksTheHost) {
  Stream a("a");
  std::atomic<bool> done{false};
  a.enqueue([&] {
    sleep_ms(20);
    done = true;
  });
  Event e;
  e.record(a);
  Stream::compute().wait(e);
  EXPECT_TRUE(done);
}

TEST(StreamTest, ErrorOnWorkerIsRethrownAtTheEvent) {
  Stream s("failing");
  std::atomic<int> ran_after{0};
  s.enqueue([] { throw Error("copy failed: disk full"); });
  s.enqueue([&] { ++ran_after; });  // skipped: it may depend on the failed work
  Event e;
  e.record(s);
  try {
    e.synchronize();
    FAIL() << "expected the worker's error";
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(), "copy failed: disk full");
  }
  EXPECT_EQ(ran_after, 0);
  // Once reported, the stream works again.
  s.enqueue([&] { ++ran_after; });
  EXPECT_NO_THROW(s.synchronize());
  EXPECT_EQ(ran_after, 1);
}

TEST(StreamTest, ErrorPropagatesThroughAWait) {
  Stream a("a"), b("b");
  a.enqueue([] { throw Error("upstream failure"); });
  Event ea;
  ea.record(a);
  b.wait(ea);
  EXPECT_THROW(b.synchronize(), Error);
  EXPECT_THROW(ea.synchronize(), Error);
}

TEST(StreamTest, SynchronizeRethrowsAndDestructorDrains) {
  std::atomic<int> count{0};
  {
    Stream s("drain");
    for (int i = 0; i < 10; ++i)
      s.enqueue([&] {
        sleep_ms(1);
        ++count;
      });
  }  // the destructor finishes the queued work
  EXPECT_EQ(count, 10);
  Stream s("sync");
  s.enqueue([] { throw Error("boom"); });
  EXPECT_THROW(s.synchronize(), Error);
  EXPECT_NO_THROW(s.synchronize());
}

TEST(EventTest, QueryAndElapsedTime) {
  Stream s("timed");
  Event start, end;
  EXPECT_TRUE(start.query());  // never recorded
  start.record(s);
  s.enqueue([] { sleep_ms(25); });
  end.record(s);
  end.synchronize();
  EXPECT_TRUE(end.query());
  EXPECT_GE(start.elapsed_ms(end), 20.0);
  EXPECT_LT(start.elapsed_ms(end), 5000.0);
  Event never;
  EXPECT_THROW(never.elapsed_ms(end), Error);
}

TEST(EventTest, ReRecordingCapturesNewWork) {
  Stream s("rerecord");
  std::atomic<bool> release{false};
  Event e;
  e.record(s);
  e.synchronize();
  s.enqueue([&] {
    while (!release) sleep_ms(1);
  });
  e.record(s);
  EXPECT_FALSE(e.query());
  release = true;
  e.synchronize();
  EXPECT_TRUE(e.query());
}

TEST(StreamTest, CopyAsyncToHostAndBack) {
  manual_seed(1);
  Tensor dev = randn({256, 1024});
  Tensor host = empty_host({256, 1024});
  Stream d2h("d2h"), h2d("h2d");
  Event computed;
  computed.record(Stream::compute());
  d2h.wait(computed);
  copy_async(host, dev, d2h);
  Event copied;
  copied.record(d2h);
  Tensor back = empty({256, 1024});
  h2d.wait(copied);
  copy_async(back, host, h2d);
  Event returned;
  returned.record(h2d);
  returned.synchronize();
  EXPECT_EQ(back.to_vector<float>(), dev.to_vector<float>());
  EXPECT_THROW(copy_async(empty({2, 3}), empty({3, 2}), d2h), Error);
  EXPECT_THROW(copy_async(empty({3, 2}).t(), empty({2, 3}), d2h), Error);
}

// Random work across three streams with cross-stream waits: each stream's counter increases in
// order and every wait sees the producer's progress at the record.
TEST(StreamTest, RandomizedCrossStreamStress) {
  constexpr int kStreams = 3, kSteps = 300;
  std::vector<std::unique_ptr<Stream>> streams;
  const char* names[kStreams] = {"s0", "s1", "s2"};
  for (int i = 0; i < kStreams; ++i) streams.push_back(std::make_unique<Stream>(names[i]));
  std::array<std::atomic<int>, kStreams> progress{};
  std::atomic<int> violations{0};
  uint64_t rng = 12345;
  auto next = [&] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return int(rng >> 33);
  };
  std::array<int, kStreams> enqueued{};
  for (int step = 0; step < kSteps; ++step) {
    const int s = next() % kStreams;
    if (next() % 4 == 0) {
      const int src = next() % kStreams;
      if (src == s) continue;
      Event e;
      e.record(*streams[size_t(src)]);
      const int expected = enqueued[size_t(src)];
      streams[size_t(s)]->wait(e);
      streams[size_t(s)]->enqueue([&, src, expected] {
        if (progress[size_t(src)].load() < expected) ++violations;
      });
    } else {
      const int want = enqueued[size_t(s)]++;
      streams[size_t(s)]->enqueue([&, s, want] {
        if (progress[size_t(s)].load() != want) ++violations;
        progress[size_t(s)].store(want + 1);
      });
    }
  }
  for (auto& s : streams) s->synchronize();
  EXPECT_EQ(violations, 0);
  for (int i = 0; i < kStreams; ++i) EXPECT_EQ(progress[size_t(i)].load(), enqueued[size_t(i)]);
}

}  // namespace tidal
