#pragma once
// The other half of the backend seam (seam/kernels.h has the kernels): what a device provides to
// the core's Allocator, Stream and Event — raw memory for the caching allocators, and stream and
// event implementations. A backend implements DeviceRuntime and registers it in
// backend/registry.cpp; the core classes stay device-neutral (docs/architecture.md).
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "tidal/device.h"
#include "tidal/seam/memory_backing.h"

namespace tidal {

namespace detail {

// The completion of the work an Event captured.
struct EventState {
  virtual ~EventState() = default;
  virtual void wait() = 0;  // blocks until complete
  virtual bool done() = 0;
  virtual int64_t time_ns() = 0;           // completion time on tidal's clock; after done()
  virtual std::exception_ptr error() = 0;  // what the captured work threw, if anything; after done()
};

// One in-order queue of a device (stream.h has the semantics).
class StreamImpl {
 public:
  virtual ~StreamImpl() = default;
  virtual bool is_compute() const = 0;
  virtual void enqueue(std::function<void()> task, const char* label) = 0;
  virtual void wait(const std::shared_ptr<EventState>& event) = 0;
  virtual std::shared_ptr<EventState> record() = 0;
  virtual void synchronize() = 0;
  virtual bool query() = 0;
  // Queues a copy of `bytes` between this device's memory and host memory (either direction, or
  // within one); `keep_alive` is held until the copy ran.
  virtual void copy_bytes(void* dst, const void* src, int64_t bytes, const char* label,
                          std::shared_ptr<const void> keep_alive) = 0;
  // Time spent running this stream's work so far (copies and tasks, not waits), in nanoseconds.
  virtual int64_t busy_ns() const = 0;
};

}  // namespace detail

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  virtual MemoryBacking device_backing() = 0;
  virtual MemoryBacking host_backing(HostMemory kind) = 0;
  // `compute`: the device's compute stream (one per device); otherwise a side stream.
  virtual std::unique_ptr<detail::StreamImpl> make_stream(const std::string& name, bool compute) = 0;
  // Makes device `index` of this type the process's current one (CUDA: cudaSetDevice), before any
  // allocation on it; throws tidal::Error naming the valid indices when there is no such device. A
  // program calls it once, through select_device (devices with one instance do nothing).
  virtual void select(int index) = 0;
};

DeviceRuntime& device_runtime(Device device);
// device_runtime(device).select(device.index): `tidal train --device cuda:N` calls it before building.
inline void select_device(Device device) { device_runtime(device).select(device.index); }

}  // namespace tidal
