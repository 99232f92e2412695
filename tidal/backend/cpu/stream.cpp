// CPU streams: the compute stream runs work inline; side streams run it on a worker thread.
#include "tidal/backend/cpu/stream.h"

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "tidal/base/clock.h"
#include "tidal/range_recorder.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace cpu {
namespace {

struct CpuEvent final : detail::EventState {
  std::mutex mu;
  std::condition_variable cv;
  bool done_ = false;
  int64_t time_ns_ = 0;
  std::exception_ptr error_;

  void complete(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done_ = true;
      time_ns_ = now_ns();
      error_ = std::move(e);
    }
    cv.notify_all();
  }
  void wait() override {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done_; });
  }
  bool done() override {
    std::lock_guard<std::mutex> lock(mu);
    return done_;
  }
  int64_t time_ns() override {
    std::lock_guard<std::mutex> lock(mu);
    return time_ns_;
  }
  std::exception_ptr error() override {
    std::lock_guard<std::mutex> lock(mu);
    return error_;
  }
};

// "Device" and host memory are one RAM: a copy is a memcpy (none when both are the same bytes).
void copy_memory(void* dst, const void* src, int64_t bytes) {
  if (dst != src) std::memcpy(dst, src, size_t(bytes));
}

thread_local bool t_in_worker = false;

struct StreamWorker {
  enum class Kind { work, record, wait };
  struct Task {
    Kind kind = Kind::work;
    std::function<void()> fn;
    const char* label = nullptr;
    std::shared_ptr<detail::EventState> event;  // a CpuEvent to complete (record), any to wait for
  };

  std::mutex mu;
  std::condition_variable cv;
  std::condition_variable idle_cv;
  std::deque<Task> queue;
  bool stop = false;
  bool busy = false;
  std::exception_ptr pending;       // first error since the last event took it
  std::atomic<int64_t> busy_ns{0};  // time spent running work tasks
  std::thread thread;
  std::string name;

  void push(Task t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(std::move(t));
    }
    cv.notify_one();
  }

  void run(Task& t) {
    switch (t.kind) {
      case Kind::work: {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (pending) return;  // work after a failure is skipped until the error is reported
        }
        const bool recording = profile::recording();
        const int64_t start = now_ns();
        try {
          t.fn();
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          pending = std::current_exception();
        }
        const int64_t end = now_ns();
        busy_ns.fetch_add(end - start, std::memory_order_relaxed);
        if (recording) profile::record_stream_task(name, t.label, start, end);
        return;
      }
      case Kind::record: {
        std::exception_ptr e;
        {
          std::lock_guard<std::mutex> lock(mu);
          e = std::exchange(pending, nullptr);
        }
        static_cast<CpuEvent&>(*t.event).complete(std::move(e));
        return;
      }
      case Kind::wait: {
        t.event->wait();
        if (std::exception_ptr e = t.event->error()) {
          std::lock_guard<std::mutex> lock(mu);
          if (!pending) pending = std::move(e);
        }
        return;
      }
    }
  }

  void loop();
};

void StreamWorker::loop() {
  t_in_worker = true;
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;  // stopped and drained
      t = std::move(queue.front());
      queue.pop_front();
      busy = t.kind != Kind::record;  // a record is a marker: whoever it wakes sees the stream idle
    }
    run(t);
    {
      std::lock_guard<std::mutex> lock(mu);
      busy = false;
    }
    idle_cv.notify_all();
  }
}

// The compute stream: work runs inline on the calling thread; wait() blocks it.
class InlineStream final : public detail::StreamImpl {
 public:
  explicit InlineStream(std::string name) : name_(std::move(name)) {}
  bool is_compute() const override { return true; }
  void enqueue(std::function<void()> task, const char*) override { task(); }
  void wait(const std::shared_ptr<detail::EventState>& event) override {
    const bool recording = profile::recording();
    const int64_t start = recording ? now_ns() : 0;
    event->wait();
    if (std::exception_ptr e = event->error()) std::rethrow_exception(e);
    if (recording) profile::record_stream_task(name_, "wait", start, now_ns());
  }
  std::shared_ptr<detail::EventState> record() override {
    auto e = std::make_shared<CpuEvent>();
    e->complete(nullptr);
    return e;
  }
  void synchronize() override {}
  bool query() override { return true; }
  void copy_bytes(void* dst, const void* src, int64_t bytes, const char*, std::shared_ptr<const void>) override {
    copy_memory(dst, src, bytes);
  }
  int64_t busy_ns() const override { return 0; }  // its work runs on the caller's time

 private:
  std::string name_;
};

// A side stream: a worker thread runs the queue in order.
class WorkerStream final : public detail::StreamImpl {
 public:
  explicit WorkerStream(const std::string& name) {
    w_.name = name;
    w_.thread = std::thread([w = &w_] { w->loop(); });
  }
  ~WorkerStream() override {  // finishes the queued work, then joins the worker
    {
      std::lock_guard<std::mutex> lock(w_.mu);
      w_.stop = true;
    }
    w_.cv.notify_one();
    w_.thread.join();
  }
  bool is_compute() const override { return false; }
  void enqueue(std::function<void()> task, const char* label) override {
    w_.push({StreamWorker::Kind::work, std::move(task), label, nullptr});
  }
  void wait(const std::shared_ptr<detail::EventState>& event) override {
    w_.push({StreamWorker::Kind::wait, nullptr, nullptr, event});
  }
  std::shared_ptr<detail::EventState> record() override {
    auto e = std::make_shared<CpuEvent>();
    w_.push({StreamWorker::Kind::record, nullptr, nullptr, e});
    return e;
  }
  void synchronize() override {
    std::shared_ptr<detail::EventState> e = record();
    e->wait();
    if (std::exception_ptr err = e->error()) std::rethrow_exception(err);
  }
  bool query() override {
    std::lock_guard<std::mutex> lock(w_.mu);
    return w_.queue.empty() && !w_.busy;
  }
  void copy_bytes(void* dst, const void* src, int64_t bytes, const char* label,
                  std::shared_ptr<const void> keep_alive) override {
    enqueue([dst, src, bytes, keep = std::move(keep_alive)] { copy_memory(dst, src, bytes); }, label);
  }
  int64_t busy_ns() const override { return w_.busy_ns.load(std::memory_order_relaxed); }

 private:
  StreamWorker w_;
};

}  // namespace

std::unique_ptr<detail::StreamImpl> make_stream(const std::string& name, bool compute) {
  if (compute) return std::make_unique<InlineStream>(name);
  return std::make_unique<WorkerStream>(name);
}

}  // namespace cpu

bool in_stream_worker() { return cpu::t_in_worker; }

}  // namespace tidal
