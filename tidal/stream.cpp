// Stream, Event and copy_async over the device's implementation (seam/runtime.h).
#include "tidal/stream.h"

#include <array>
#include <utility>

#include "tidal/per_device.h"
#include "tidal/seam/runtime.h"
#include "tidal/tensor.h"

namespace tidal {
// --- Event

void Event::record(Stream& stream) { state_ = stream.impl().record(); }

void Event::synchronize() const {
  if (!state_) return;
  state_->wait();
  if (std::exception_ptr e = state_->error()) std::rethrow_exception(e);
}

bool Event::query() const { return !state_ || state_->done(); }

int64_t Event::time_ns() const {
  TIDAL_CHECK(state_ != nullptr, "[event] time_ns() of an event that was never recorded");
  TIDAL_CHECK(state_->done(), "[event] time_ns() of an event that has not completed; synchronize() first");
  return state_->time_ns();
}

double Event::elapsed_ms(const Event& end) const { return double(end.time_ns() - time_ns()) / 1e6; }

// --- Stream

Stream::Stream(std::string name, Device device) : Stream(std::move(name), device, false) {}

Stream::Stream(std::string name, Device device, bool compute)
    : name_(std::move(name)), device_(device), impl_(device_runtime(device).make_stream(name_, compute)) {}

Stream::~Stream() = default;  // the implementation finishes its queue

Stream& Stream::compute(Device device) {
  static PerDevice<Stream> streams;
  return streams.get(device, [](Device d) { return std::unique_ptr<Stream>(new Stream("compute", d, true)); });
}

namespace {
thread_local std::array<Stream*, kNumDeviceSlots> t_current{};  // nullptr: the device's compute stream
}  // namespace

Stream& current_stream(Device device) {
  Stream* s = t_current[size_t(device_slot(device))];
  return s != nullptr ? *s : Stream::compute(device);
}

StreamGuard::StreamGuard(Stream& stream) : slot_(device_slot(stream.device())), saved_(t_current[size_t(slot_)]) {
  t_current[size_t(slot_)] = &stream;
}

StreamGuard::~StreamGuard() { t_current[size_t(slot_)] = saved_; }

bool Stream::is_compute() const { return impl_->is_compute(); }
// A side stream's task runs with that stream current, so the kernels it launches queue on it (a device
// with queues: in order with the stream's copies; the CPU backend runs them in the task). What the task
// holds is freed while the stream is still current too: its last use was this stream's (Note
// [Cross-stream reuse], allocator_streams.h).
void Stream::enqueue(std::function<void()> task, const char* label) {
  if (impl_->is_compute()) return impl_->enqueue(std::move(task), label);
  impl_->enqueue(
      [this, task = std::move(task)]() mutable {
        StreamGuard guard(*this);
        task();
        task = nullptr;
      },
      label);
}
void Stream::synchronize() { impl_->synchronize(); }
bool Stream::query() { return impl_->query(); }
int64_t Stream::busy_ns() const { return impl_->busy_ns(); }

void Stream::copy(void* dst, const void* src, int64_t bytes, const char* label,
                  std::shared_ptr<const void> keep_alive) {
  if (bytes > 0) impl_->copy_bytes(dst, src, bytes, label, std::move(keep_alive));
}

void Stream::wait(const Event& event) {
  if (event.recorded()) impl_->wait(event.state());
}

void record_stream(const Tensor& t, Stream& stream) {
  if (!t.defined() || t.is_meta() || !t.storage()->is_materialized()) return;
  TIDAL_CHECK(t.device() == stream.device(), "[record_stream] a tensor on ", t.device(), " used by a stream of ",
              stream.device());
  t.storage()->allocator().record_stream(t.storage()->data(), stream.impl());
}

void copy_async(const Tensor& dst, const Tensor& src, Stream& stream) {
  TIDAL_CHECK(dst.defined() && src.defined(), "[copy_async] undefined tensor");
  TIDAL_CHECK(dst.shape() == src.shape() && dst.dtype() == src.dtype(), "[copy_async] destination ", dst.shape(), " ",
              dst.dtype(), " does not match source ", src.shape(), " ", src.dtype());
  TIDAL_CHECK(dst.is_contiguous() && src.is_contiguous(), "[copy_async] needs contiguous tensors, got strides ",
              dst.strides(), " and ", src.strides());
  TIDAL_CHECK(dst.is_meta() == src.is_meta(), "[copy_async] cannot copy between a meta tensor and a real one");
  if (dst.is_meta()) return;
  TIDAL_CHECK(dst.storage()->is_materialized() && src.storage()->is_materialized(), "[copy_async] the ",
              dst.storage()->is_materialized() ? "source" : "destination", " ", src.shape(), " has released its bytes");
  stream.copy(dst.raw_data(), src.raw_data(), src.nbytes(), "copy",
              std::make_shared<const std::pair<Tensor, Tensor>>(dst, src));
}

}  // namespace tidal
