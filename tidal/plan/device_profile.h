#pragma once
// A device profile: the rates from which tidal's cost model (plan/cost_model.h) predicts the time of
// a training step. `tidal plan --calibrate` measures this machine into a profile file; built-in
// profiles describe common accelerators (their sources cited in docs/planning.md) so that a step can
// be planned for hardware that is not here. Rates are achieved ones (what kernels reach), not peaks.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tidal::plan {

struct DeviceProfile {
  std::string name;          // "NVIDIA H100 80GB SXM", "AMD EPYC 9R14, 2 threads (calibrated)"
  std::string source;        // where the figures come from: a datasheet, or "tidal plan --calibrate, DATE"
  int64_t memory_bytes = 0;  // device memory; 0 when not known (then --memory gives the budget)
  // Matrix products (bf16: bf16 operands, f32 accumulation), FLOP/s on large operands.
  double gemm_flops_f32 = 0;
  double gemm_flops_bf16 = 0;
  // Flash attention forward and backward, FLOP/s (counted as 4·B·H·Tq·Tk·D forward, causal half; the
  // backward as 2.5 times its forward, FlashAttention-2's count: a forward + backward is 3.5x the forward's).
  double attention_flops_f32 = 0;
  double attention_flops_bf16 = 0;
  double memory_bandwidth = 0;      // bytes/s an elementwise kernel reads plus writes
  double d2h_bandwidth = 0;         // device to host copies, bytes/s (offload, swap optimizer)
  double h2d_bandwidth = 0;         // host to device copies, bytes/s
  double disk_bandwidth = 0;        // offload spill-file writes and reads, bytes/s
  double kernel_overhead_s = 0;     // fixed cost of each kernel (dispatch, launch latency), seconds
  double collective_bandwidth = 0;  // per-rank bus bandwidth of all-reduce / reduce-scatter / all-gather, bytes/s
  double collective_latency_s = 0;  // fixed cost of each collective, seconds
};

// Profile files (docs/planning.md, "Device profiles"): one JSON object, {"tidal_device_profile": 1,
// "name": ..., "source": ..., "memory_bytes": ..., and every rate above by its field name}. Every field
// is required, typed and range-checked; an unknown field is refused by name. Errors name the file and
// the field, never the file's contents.
inline constexpr int kDeviceProfileVersion = 1;
// Where `tidal plan --calibrate` writes this machine's profile by default (in the working directory),
// and where `tidal plan` and `tidal train --auto-memory` look for it when no --device is given.
inline constexpr const char* kDefaultDeviceProfileFile = "tidal-device-profile.json";

// A built-in profile: `key` is what --device takes ("h100"); the profile's name is accepted too.
struct BuiltinDevice {
  std::string key;
  DeviceProfile profile;
};
const std::vector<BuiltinDevice>& builtin_device_profiles();
std::vector<std::string> builtin_device_names();  // the keys: "a100", "h100", "h200"

// A built-in key or name (case-insensitive), else a profile file. An argument with a '/' or ending in
// ".json" is always a file.
DeviceProfile load_device_profile(const std::string& name_or_path);
// The text of a profile file; `source` names it in errors ("[device profile] FILE").
DeviceProfile parse_device_profile(std::string_view text, const std::string& source);
// Throws tidal::Error naming `source` and the field when a value is out of its range.
void check_device_profile(const DeviceProfile& p, const std::string& source);
std::string device_profile_json(const DeviceProfile& p);                    // the file's text, fields in a fixed order
void save_device_profile(const std::string& path, const DeviceProfile& p);  // atomically

// A small table of the profile's figures (units scaled: TFLOP/s, GB/s, us), for `tidal plan`.
std::string format_device_profile(const DeviceProfile& p);
// One line: "h100  NVIDIA H100 80GB SXM  80 GiB  bf16 GEMM 742 TFLOP/s  HBM 3.0 TB/s ...".
std::string format_device_line(const std::string& key, const DeviceProfile& p);

}  // namespace tidal::plan
