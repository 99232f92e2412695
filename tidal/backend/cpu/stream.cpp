// CPU streams: the compute stream runs work inline; side streams run it on a worker thread.
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "tidal/base/clock.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace detail {

struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int64_t time_ns = 0;
  std::exception_ptr error;

  void complete(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      time_ns = now_ns();
      error = std::move(e);
    }
    cv.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

std::atomic<StreamObserver> g_observer{nullptr};

struct StreamWorker {
  enum class Kind { work, record, wait };
  struct Task {
    Kind kind = Kind::work;
    std::function<void()> fn;
    const char* label = nullptr;
    std::shared_ptr<EventState> event;
  };

  std::mutex mu;
  std::condition_variable cv;
  std::condition_variable idle_cv;
  std::deque<Task> queue;
  bool stop = false;
  bool busy = false;
  std::exception_ptr pending;  // first error since the last event took it
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
        const StreamObserver observer = g_observer.load(std::memory_order_relaxed);
        const int64_t start = observer != nullptr ? now_ns() : 0;
        try {
          t.fn();
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          pending = std::current_exception();
        }
        if (observer != nullptr) observer(name, t.label, start, now_ns());
        return;
      }
      case Kind::record: {
        std::exception_ptr e;
        {
          std::lock_guard<std::mutex> lock(mu);
          e = std::exchange(pending, nullptr);
        }
        t.event->complete(std::move(e));
        return;
      }
      case Kind::wait: {
        t.event->wait();
        std::lock_guard<std::mutex> ev_lock(t.event->mu);
        if (t.event->error) {
          std::lock_guard<std::mutex> lock(mu);
          if (!pending) pending = t.event->error;
        }
        return;
      }
    }
  }

  void loop();
};

thread_local bool t_in_worker = false;

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

}  // namespace detail

using detail::EventState;
using detail::StreamWorker;

bool in_stream_worker() { return detail::t_in_worker; }

void set_stream_observer(StreamObserver observer) { detail::g_observer.store(observer); }

// --- Event

void Event::record(Stream& stream) {
  state_ = std::make_shared<EventState>();
  stream.record(state_);
}

void Event::synchronize() const {
  if (!state_) return;
  state_->wait();
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->error) std::rethrow_exception(state_->error);
}

bool Event::query() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

int64_t Event::time_ns() const {
  TIDAL_CHECK(state_ != nullptr, "[event] time_ns() of an event that was never recorded");
  std::lock_guard<std::mutex> lock(state_->mu);
  TIDAL_CHECK(state_->done, "[event] time_ns() of an event that has not completed; synchronize() first");
  return state_->time_ns;
}

double Event::elapsed_ms(const Event& end) const { return double(end.time_ns() - time_ns()) / 1e6; }

// --- Stream

Stream::Stream(std::string name, Device device) : Stream(std::move(name), device, false) {}

Stream::Stream(std::string name, Device device, bool compute) : name_(std::move(name)), device_(device) {
  if (!compute) {
    worker_ = std::make_unique<StreamWorker>();
    worker_->name = name_;
    worker_->thread = std::thread([w = worker_.get()] { w->loop(); });
  }
}

Stream::~Stream() {
  if (!worker_) return;
  {
    std::lock_guard<std::mutex> lock(worker_->mu);
    worker_->stop = true;
  }
  worker_->cv.notify_one();
  worker_->thread.join();
}

Stream& Stream::compute(Device device) {
  static Stream cpu("compute", Device::cpu(), true);
  static Stream meta("compute", Device::meta(), true);
  return device.is_meta() ? meta : cpu;
}

void Stream::enqueue(std::function<void()> task, const char* label) {
  if (!worker_) {
    task();
    return;
  }
  worker_->push({StreamWorker::Kind::work, std::move(task), label, nullptr});
}

void Stream::wait(const Event& event) {
  if (!event.recorded()) return;
  if (!worker_) {
    const StreamObserver observer = detail::g_observer.load(std::memory_order_relaxed);
    const int64_t start = observer != nullptr ? now_ns() : 0;
    event.synchronize();
    if (observer != nullptr) observer(name_, "wait", start, now_ns());
    return;
  }
  worker_->push({StreamWorker::Kind::wait, nullptr, nullptr, event.state()});
}

void Stream::record(const std::shared_ptr<EventState>& state) {
  if (!worker_) {
    state->complete(nullptr);
    return;
  }
  worker_->push({StreamWorker::Kind::record, nullptr, nullptr, state});
}

void Stream::synchronize() {
  if (!worker_) return;
  Event e;
  e.record(*this);
  e.synchronize();
}

bool Stream::query() {
  if (!worker_) return true;
  std::lock_guard<std::mutex> lock(worker_->mu);
  return worker_->queue.empty() && !worker_->busy;
}

void copy_async(const Tensor& dst, const Tensor& src, Stream& stream) {
  TIDAL_CHECK(dst.defined() && src.defined(), "[copy_async] undefined tensor");
  TIDAL_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), "[copy_async] destination ", dst.shape(), " ",
              dst.dtype(), " does not match source ", src.shape(), " ", src.dtype());
  TIDAL_CHECK(dst.is_contiguous() && src.is_contiguous(), "[copy_async] needs contiguous tensors, got strides ",
              dst.strides(), " and ", src.strides());
  TIDAL_CHECK(dst.is_meta() == src.is_meta(), "[copy_async] cannot copy between a meta tensor and a real one");
  if (dst.is_meta()) return;
  TIDAL_CHECK(dst.storage()->is_materialized() && src.storage()->is_materialized(),
              "[copy_async] the ", dst.storage()->is_materialized() ? "source" : "destination", " ", src.shape(),
              " has released its bytes");
  stream.enqueue(
      [dst, src] {
        if (dst.raw_data() != src.raw_data()) std::memcpy(dst.raw_data(), src.raw_data(), size_t(src.nbytes()));
      },
      "copy");
}

}  // namespace tidal
