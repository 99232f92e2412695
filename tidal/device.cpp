#include "tidal/device.h"

#include <ostream>

#include "tidal/base/error.h"

namespace tidal {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "meta") return meta();
  detail::throw_error(detail::str_cat("[device] unknown device '", text, "': valid choices are cpu, meta"));
}

std::string Device::str() const { return type == DeviceType::cpu ? "cpu" : "meta"; }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace tidal
