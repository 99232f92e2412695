#include "tidal/backend/cuda/stream.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <variant>

#include "tidal/backend/cuda/check.h"
#include "tidal/base/clock.h"
#include "tidal/base/error.h"
#include "tidal/stream.h"

namespace tidal::cuda {
namespace {

// A CUDA event that a worker may record later: wait() first waits until it was issued.
class CudaEvent final : public detail::EventState {
 public:
  CudaEvent() { TIDAL_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~CudaEvent() override { cudaEventDestroy(event_); }

  // Called once, on the thread that issues it (or with an error the captured work raised).
  void issue(cudaStream_t stream, std::exception_ptr error) {
    if (!error) TIDAL_CUDA_CHECK(cudaEventRecord(event_, stream));
    std::lock_guard<std::mutex> lock(mu_);
    error_ = error;
    issued_ = true;
    cv_.notify_all();
  }
  bool issued() {
    std::lock_guard<std::mutex> lock(mu_);
    return issued_;
  }
  void wait_issued() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return issued_; });
  }
  cudaEvent_t handle() const { return event_; }

  void wait() override {
    wait_issued();
    if (!error_) TIDAL_CUDA_CHECK(cudaEventSynchronize(event_));
    mark_done();
  }
  bool done() override {
    if (!issued()) return false;
    if (error_) return true;
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    if (e != cudaSuccess) return true;  // error() reports it
    mark_done();
    return true;
  }
  int64_t time_ns() override { return done_ns_; }
  std::exception_ptr error() override {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

 private:
  void mark_done() {
    if (done_ns_ == 0) done_ns_ = now_ns();  // when the host first saw it complete
  }
  cudaEvent_t event_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  bool issued_ = false;
  std::exception_ptr error_;
  int64_t done_ns_ = 0;
};

class CudaStream;
thread_local const CudaStream* t_running = nullptr;  // the side stream whose worker this thread is

// What a queued copy keeps alive until it ran, with the events that time it.
struct PendingCopy {
  cudaEvent_t start = nullptr, end = nullptr;
  std::shared_ptr<const void> keep_alive;
};

class CudaStream final : public detail::StreamImpl {
 public:
  CudaStream(std::string name, bool compute) : name_(std::move(name)), compute_(compute) {
    TIDAL_CUDA_CHECK(cudaGetDevice(&device_));
    TIDAL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    if (!compute_) worker_ = std::thread([this] { work(); });
  }
  ~CudaStream() override {
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
      }
      cv_.notify_all();
      worker_.join();
    }
    cudaStreamSynchronize(stream_);
    release_copies(true);
    cudaStreamDestroy(stream_);
  }

  bool is_compute() const override { return compute_; }
  cudaStream_t handle() const { return stream_; }

  void enqueue(std::function<void()> task, const char* label) override {
    if (compute_) return timed(task);
    push(Item{Task{std::move(task)}, label});
  }
  // On the compute stream, and from inside this stream's own task (its kernels go straight to the CUDA
  // stream: a queued item would come after them), a wait or a record is issued at once.
  void wait(const std::shared_ptr<detail::EventState>& event) override {
    if (compute_ || t_running == this) return wait_now(event);
    push(Item{Wait{event}, nullptr});
  }
  std::shared_ptr<detail::EventState> record() override {
    auto event = std::make_shared<CudaEvent>();
    if (compute_ || t_running == this) {
      event->issue(stream_, nullptr);
    } else {
      push(Item{Record{event}, nullptr});
    }
    return event;
  }
  void copy_bytes(void* dst, const void* src, int64_t bytes, const char* label,
                  std::shared_ptr<const void> keep_alive) override {
    Copy c{dst, src, bytes, std::move(keep_alive)};
    if (compute_) return issue_copy(c);
    push(Item{std::move(c), label});
  }
  void synchronize() override {
    if (!compute_) {
      std::unique_lock<std::mutex> lock(mu_);
      idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
    }
    TIDAL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    release_copies(true);
    rethrow();
  }
  // Also drops what the copies that completed kept alive (they are otherwise dropped at the next copy):
  // offload releases a block's device bytes only when nothing else holds them (memory/offload.cpp).
  bool query() override {
    release_copies(false);
    if (!compute_) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!queue_.empty() || busy_) return false;
    }
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaErrorNotReady) return false;
    TIDAL_CUDA_CHECK(e);
    return true;
  }
  int64_t busy_ns() const override {
    std::lock_guard<std::mutex> lock(copies_mu_);
    return busy_ns_;
  }

 private:
  struct Task {
    std::function<void()> fn;
  };
  struct Wait {
    std::shared_ptr<detail::EventState> event;
  };
  struct Record {
    std::shared_ptr<CudaEvent> event;
  };
  struct Copy {
    void* dst;
    const void* src;
    int64_t bytes;
    std::shared_ptr<const void> keep_alive;
  };
  struct Item {
    std::variant<Task, Wait, Record, Copy> what;
    const char* label;
  };

  void push(Item item) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(item));
    }
    cv_.notify_one();
  }

  // The side stream's worker: items in order, each issued on the worker's thread.
  void work() {
    t_running = this;
    cudaSetDevice(device_);
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      run(item);
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
      }
      idle_.notify_all();
    }
  }

  void run(Item& item) {
    try {
      if (auto* t = std::get_if<Task>(&item.what)) {
        if (failed()) return;  // after an error the stream's later work does not run (as on the CPU)
        TIDAL_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the task sees the stream's earlier work done
        timed(t->fn);
      } else if (auto* w = std::get_if<Wait>(&item.what)) {
        wait_now(w->event);
      } else if (auto* r = std::get_if<Record>(&item.what)) {
        r->event->issue(stream_, first_error());
      } else if (auto* c = std::get_if<Copy>(&item.what)) {
        if (!failed()) issue_copy(*c);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    if (auto* r = std::get_if<Record>(&item.what); r != nullptr && !r->event->issued())
      r->event->issue(stream_, first_error());  // never leave a waiter blocked
  }

  // Work queued after this point waits for `event` on the device; an event of another kind (a CPU
  // stream's) or one that carries an error is waited for on the host.
  void wait_now(const std::shared_ptr<detail::EventState>& event) {
    if (auto* e = dynamic_cast<CudaEvent*>(event.get())) {
      e->wait_issued();
      if (std::exception_ptr err = e->error()) std::rethrow_exception(err);
      TIDAL_CUDA_CHECK(cudaStreamWaitEvent(stream_, e->handle(), 0));
      return;
    }
    event->wait();
    if (std::exception_ptr err = event->error()) std::rethrow_exception(err);
  }

  void issue_copy(const Copy& c) {
    PendingCopy p;
    TIDAL_CUDA_CHECK(cudaEventCreate(&p.start));
    TIDAL_CUDA_CHECK(cudaEventCreate(&p.end));
    TIDAL_CUDA_CHECK(cudaEventRecord(p.start, stream_));
    TIDAL_CUDA_CHECK(cudaMemcpyAsync(c.dst, c.src, size_t(c.bytes), cudaMemcpyDefault, stream_));
    TIDAL_CUDA_CHECK(cudaEventRecord(p.end, stream_));
    p.keep_alive = c.keep_alive;
    std::lock_guard<std::mutex> lock(copies_mu_);
    copies_.push_back(std::move(p));
    release_copies_locked(false);
  }

  // Drops what finished copies kept alive (never inside a CUDA callback: freeing memory may call CUDA).
  void release_copies(bool all) {
    std::lock_guard<std::mutex> lock(copies_mu_);
    release_copies_locked(all);
  }
  void release_copies_locked(bool all) {
    while (!copies_.empty()) {
      PendingCopy& p = copies_.front();
      if (!all && cudaEventQuery(p.end) == cudaErrorNotReady) break;
      float ms = 0;
      if (cudaEventElapsedTime(&ms, p.start, p.end) == cudaSuccess) busy_ns_ += int64_t(double(ms) * 1e6);
      cudaEventDestroy(p.start);
      cudaEventDestroy(p.end);
      copies_.pop_front();
    }
    (void)cudaGetLastError();
  }

  void timed(const std::function<void()>& fn) {
    const int64_t t0 = now_ns();
    fn();
    std::lock_guard<std::mutex> lock(copies_mu_);
    busy_ns_ += now_ns() - t0;
  }

  bool failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_ != nullptr;
  }
  std::exception_ptr first_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  void rethrow() {
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::swap(e, error_);
    }
    if (e) std::rethrow_exception(e);
  }

  std::string name_;
  bool compute_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::thread worker_;
  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<Item> queue_;
  bool busy_ = false, stopping_ = false;
  std::exception_ptr error_;
  mutable std::mutex copies_mu_;
  std::deque<PendingCopy> copies_;
  int64_t busy_ns_ = 0;
};

}  // namespace

std::unique_ptr<detail::StreamImpl> make_stream(const std::string& name, bool compute) {
  return std::make_unique<CudaStream>(name, compute);
}

cudaStream_t stream_handle(Stream& stream) {
  auto* s = dynamic_cast<CudaStream*>(&stream.impl());
  TIDAL_ASSERT(s != nullptr, "[cuda] a kernel was given the stream '", stream.name(), "' of ", stream.device(),
               ", not a CUDA stream");
  return s->handle();
}

}  // namespace tidal::cuda
