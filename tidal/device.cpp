#include "tidal/device.h"

#include <ostream>

#include "tidal/base/error.h"

namespace tidal {

namespace {
// cuda:N takes N below this; the machine's own count is checked when a run selects the device
// (DeviceRuntime::select).
constexpr int kMaxCudaIndex = 64;
}  // namespace

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "meta") return meta();
  if (text == "cuda") return cuda(0);
  if (text.substr(0, 5) == "cuda:" && text.size() > 5 && text.size() <= 7) {
    int index = 0;
    bool digits = true;
    for (char c : text.substr(5)) {
      digits = digits && c >= '0' && c <= '9';
      index = index * 10 + (c - '0');
    }
    if (digits) {
      if (index < kMaxCudaIndex) return cuda(index);
      detail::throw_error(
          detail::str_cat("[device] unknown device '", text, "': cuda:N takes N from 0 to ", kMaxCudaIndex - 1));
    }
  }
  detail::throw_error(
      detail::str_cat("[device] unknown device '", text, "': valid choices are cpu, meta, cuda and cuda:N"));
}

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::meta: return "meta";
    case DeviceType::cuda: return "cuda";
  }
  return "?";
}

std::string Device::str() const {
  return is_cuda() ? "cuda:" + std::to_string(index) : std::string(device_type_name(type));
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace tidal
