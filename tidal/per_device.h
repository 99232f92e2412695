#pragma once
// One object per device (its compute stream, its allocators), made on first use by whatever device
// registered itself (seam/registry.h), so the core names no device. Lock-free to read once made.
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/device.h"

namespace tidal {

inline constexpr int kMaxDeviceIndex = 16;  // devices of one type: cuda:0 .. cuda:15
inline constexpr int kNumDeviceSlots = kNumDeviceTypes * kMaxDeviceIndex;

inline int device_slot(Device device) {
  TIDAL_CHECK(device.index >= 0 && device.index < kMaxDeviceIndex, "[device] ", device, ": device index ", device.index,
              " outside [0, ", kMaxDeviceIndex, ")");
  return int(device.type) * kMaxDeviceIndex + device.index;
}

template <class T>
class PerDevice {
 public:
  // The device's object, made by `make(device)` (a std::unique_ptr<T>) the first time; kept until exit.
  template <class Make>
  T& get(Device device, Make&& make) {
    std::atomic<T*>& slot = slots_[size_t(device_slot(device))];
    if (T* t = slot.load(std::memory_order_acquire)) [[likely]]
      return *t;
    std::lock_guard<std::mutex> lock(mu_);
    if (T* t = slot.load(std::memory_order_relaxed)) return *t;
    owned_.push_back(make(device));
    slot.store(owned_.back().get(), std::memory_order_release);
    return *owned_.back();
  }

 private:
  std::array<std::atomic<T*>, kNumDeviceSlots> slots_{};
  std::mutex mu_;
  std::vector<std::unique_ptr<T>> owned_;
};

}  // namespace tidal
