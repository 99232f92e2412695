#pragma once
// In-order work queues (CUDA semantics), implemented per device behind seam/runtime.h. On the
// CPU backend the compute stream is the calling thread: work enqueued on it runs immediately. Every
// other stream owns a worker thread, so copies on a copy stream really overlap compute. See
// docs/streams.md.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "tidal/device.h"
#include "tidal/event.h"

namespace tidal {

class Tensor;
namespace detail {
class StreamImpl;
}

class Stream {
 public:
  // A side stream, e.g. Stream d2h("d2h") (on the CPU backend: with its own worker thread).
  explicit Stream(std::string name, Device device = Device::cpu());
  ~Stream();  // finishes the queued work first
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // The device's compute stream (on the CPU backend: runs work inline on the calling thread).
  static Stream& compute(Device device = Device::cpu());

  // Queues `task` after all earlier work on this stream. `label` (a static string) names it in traces.
  void enqueue(std::function<void()> task, const char* label = nullptr);
  // Work queued on this stream after this call starts only once `event` has completed. On the
  // compute stream this blocks the calling thread now (and rethrows the event's error).
  void wait(const Event& event);
  // Queues a copy of `bytes` between this device's memory and host memory (CUDA's cudaMemcpyAsync);
  // `keep_alive` (e.g. the storages involved) is held until the copy ran.
  void copy(void* dst, const void* src, int64_t bytes, const char* label,
            std::shared_ptr<const void> keep_alive = nullptr);
  // Time spent running this stream's work so far (copies and tasks, not waits), in nanoseconds.
  int64_t busy_ns() const;
  // Blocks until all work queued so far has run; rethrows the first error since the last report.
  void synchronize();
  // Whether all work queued so far has run.
  bool query();

  bool is_compute() const;
  const std::string& name() const { return name_; }
  Device device() const { return device_; }

  detail::StreamImpl& impl() { return *impl_; }  // the device's implementation (Event::record)

 private:
  Stream(std::string name, Device device, bool compute);
  std::string name_;
  Device device_;
  std::unique_ptr<detail::StreamImpl> impl_;
};

// The stream this thread's kernels on `device` run on: the one the innermost StreamGuard made current,
// else the device's compute stream (PyTorch's current stream). Ops pass it to every kernel
// (seam/kernels.h); on the CPU backend every kernel runs on the calling thread, so a side stream's
// kernels keep its order by running inside its tasks.
Stream& current_stream(Device device);

// Makes `stream` its device's current stream on this thread for the guard's scope (CUDAStreamGuard).
class StreamGuard {
 public:
  explicit StreamGuard(Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int slot_;
  Stream* saved_;
};

// Copies src into dst (same shape and dtype, both contiguous) on `stream`, asynchronously: both
// tensors are kept alive until the copy ran. Record an event after it to know when it is done.
void copy_async(const Tensor& dst, const Tensor& src, Stream& stream);

// Work queued on `stream` so far uses `t`'s bytes (PyTorch's record_stream; call it after queueing that
// work): once t's storage frees them, the device's allocator reuses them on any other stream only after
// that work (allocator.h, Note [Cross-stream reuse]). Nothing to do where the allocator tracks no
// streams (the CPU backend: work that uses a tensor holds it).
void record_stream(const Tensor& t, Stream& stream);

// Whether the calling thread is a CPU stream worker (kernels then run single-threaded).
bool in_stream_worker();

}  // namespace tidal
