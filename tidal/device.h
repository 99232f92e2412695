#pragma once
// Where a tensor lives. `meta` tensors have shapes and are accounted by their allocator exactly like
// real ones, but own no bytes and no kernel runs on them: the planner runs model code on them.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace tidal {

enum class DeviceType : uint8_t { cpu, meta };
inline constexpr int kNumDeviceTypes = int(DeviceType::meta) + 1;  // the last DeviceType + 1

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device meta() { return {DeviceType::meta, 0}; }
  // "cpu" or "meta"; throws tidal::Error naming the valid choices otherwise.
  static Device parse(std::string_view text);

  bool is_meta() const { return type == DeviceType::meta; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace tidal
