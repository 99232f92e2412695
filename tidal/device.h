#pragma once
// Where a tensor lives. `meta` tensors have shapes and are accounted by their allocator exactly like
// real ones, but own no bytes and no kernel runs on them: the planner runs model code on them. `cuda`
// tensors live on an NVIDIA GPU (backend/cuda/, built with -DTIDAL_CUDA=ON; docs/cuda.md).
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace tidal {

enum class DeviceType : uint8_t { cpu, meta, cuda };
inline constexpr int kNumDeviceTypes = int(DeviceType::cuda) + 1;  // the last DeviceType + 1

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device meta() { return {DeviceType::meta, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  // "cpu", "meta", "cuda" (cuda:0) or "cuda:N"; throws tidal::Error naming the valid choices otherwise.
  static Device parse(std::string_view text);

  bool is_meta() const { return type == DeviceType::meta; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  std::string str() const;  // "cpu", "meta", "cuda:N"

  friend bool operator==(const Device&, const Device&) = default;
};

std::ostream& operator<<(std::ostream& os, const Device& d);

// "cpu", "meta", "cuda": the type's name, also its backend's folder (tidal/backend/<name>/).
const char* device_type_name(DeviceType type);

}  // namespace tidal
