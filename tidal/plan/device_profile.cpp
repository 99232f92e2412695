#include "tidal/plan/device_profile.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tidal/base/error.h"
#include "tidal/base/json.h"
#include "tidal/io/atomic_file.h"
#include "tidal/memory_stats.h"

namespace tidal::plan {
namespace {

using json = nlohmann::json;

// Note [Built-in device profiles]. The fields are achieved rates, so each built-in is a datasheet
// peak times an efficiency factor (sources in docs/planning.md, "Device profiles"):
//  - GEMM 0.75 of the dense tensor-core peak: large bf16 products reach ~0.8 (788 of 989 TFLOP/s at
//    8192^3 on an H200, measured on this project's device machine), training-step shapes less.
//    f32 is TF32 on the tensor cores, as Megatron-LM and PyTorch with allow_tf32 run f32 products.
//  - attention 0.55 of the same peak, forward + backward, causal: FlashAttention-2 (Dao 2023) reaches
//    50-73% forward and less backward on an A100, FlashAttention-3 (Shah et al. 2024) up to 75%
//    forward on an H100 with a slower backward.
//  - memory 0.90 of the HBM bandwidth (a device-to-device copy moved 4.3 of 4.8 TB/s on an H200 here).
//  - host copies 0.80 of one direction of the PCIe x16 link (Gen5 64 GB/s, Gen4 32 GB/s), pinned.
//  - collectives 0.80 of one direction of NVLink (NVLink 4: 450 GB/s, NVLink 3: 300 GB/s) as the
//    all-reduce bus bandwidth NCCL's nccl-tests report within one 8-GPU node; 10 us a collective.
//  - kernel overhead 5 us (a CUDA launch and its tail); disk 3 GB/s, a local NVMe SSD: a host
//    property, not the GPU's (calibrate the host, or edit the file).
constexpr double kGemm = 0.75, kAttention = 0.55, kMemory = 0.90, kPcie = 0.80, kNvlink = 0.80;
constexpr double kTera = 1e12, kGiga = 1e9;
constexpr int64_t kMiB = int64_t(1) << 20;

DeviceProfile nvidia(const char* name, int64_t memory_mib, double bf16_tflops, double tf32_tflops, double hbm_tbs,
                     double pcie_gbs, double nvlink_gbs) {
  DeviceProfile p;
  p.name = name;
  p.source = "NVIDIA datasheet peaks x efficiency factors (docs/planning.md, \"Device profiles\")";
  p.memory_bytes = memory_mib * kMiB;  // what nvidia-smi reports as the total
  p.gemm_flops_bf16 = kGemm * bf16_tflops * kTera;
  p.gemm_flops_f32 = kGemm * tf32_tflops * kTera;
  p.attention_flops_bf16 = kAttention * bf16_tflops * kTera;
  p.attention_flops_f32 = kAttention * tf32_tflops * kTera;
  p.memory_bandwidth = kMemory * hbm_tbs * kTera;
  p.d2h_bandwidth = p.h2d_bandwidth = kPcie * pcie_gbs * kGiga;
  p.disk_bandwidth = 3 * kGiga;
  p.kernel_overhead_s = 5e-6;
  p.collective_bandwidth = kNvlink * nvlink_gbs * kGiga;
  p.collective_latency_s = 10e-6;
  return p;
}

// Peaks: dense bf16 and TF32 tensor-core TFLOP/s, HBM TB/s, PCIe and NVLink GB/s one way.
const std::vector<BuiltinDevice> kBuiltins = {
    {"a100", nvidia("NVIDIA A100 80GB SXM", 81920, 312, 156, 2.039, 32, 300)},
    {"h100", nvidia("NVIDIA H100 80GB SXM", 81559, 989.4, 494.7, 3.35, 64, 450)},
    {"h200", nvidia("NVIDIA H200 141GB", 143771, 989.4, 494.7, 4.8, 64, 450)},
};

// The fields after name, source and memory_bytes. zero_allowed false: 0 is refused (a rate every step
// uses); otherwise 0 means "not measured" (collectives on one rank, per-kernel cost). A rate, when not 0,
// is at least `min` (1 per second: a denormal rate planned steps of inf s and -nan% before).
struct RateField {
  const char* key;
  double DeviceProfile::*member;
  const char* unit;
  double min, max;
  bool zero_allowed;
};
const RateField kRates[] = {
    {"gemm_flops_f32", &DeviceProfile::gemm_flops_f32, "FLOP/s", 1, 1e18, false},
    {"gemm_flops_bf16", &DeviceProfile::gemm_flops_bf16, "FLOP/s", 1, 1e18, false},
    {"attention_flops_f32", &DeviceProfile::attention_flops_f32, "FLOP/s", 1, 1e18, false},
    {"attention_flops_bf16", &DeviceProfile::attention_flops_bf16, "FLOP/s", 1, 1e18, false},
    {"memory_bandwidth", &DeviceProfile::memory_bandwidth, "bytes/s", 1, 1e15, false},
    {"d2h_bandwidth", &DeviceProfile::d2h_bandwidth, "bytes/s", 1, 1e15, false},
    {"h2d_bandwidth", &DeviceProfile::h2d_bandwidth, "bytes/s", 1, 1e15, false},
    {"disk_bandwidth", &DeviceProfile::disk_bandwidth, "bytes/s", 1, 1e15, false},
    {"kernel_overhead_s", &DeviceProfile::kernel_overhead_s, "seconds", 0, 1.0, true},
    {"collective_bandwidth", &DeviceProfile::collective_bandwidth, "bytes/s", 1, 1e15, true},
    {"collective_latency_s", &DeviceProfile::collective_latency_s, "seconds", 0, 1.0, true},
};
constexpr const char* kVersionKey = "tidal_device_profile";
constexpr int64_t kMaxMemoryBytes = int64_t(1) << 50;  // 1 PiB
constexpr size_t kMaxText = 256;
constexpr uintmax_t kMaxFileBytes = 64 << 10;

const char* kWhatToDo =
    "write one with 'tidal plan --calibrate --profile-out FILE' or name a built-in device (tidal plan "
    "--list-devices)";

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

bool printable(std::string_view s) {
  return std::none_of(s.begin(), s.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; });
}

// An unknown key from a file, quoted only when it is short and printable.
std::string describe_key(const std::string& key) {
  if (key.size() <= 64 && printable(key)) return "\"" + key + "\"";
  return detail::str_cat("of ", key.size(), " bytes");
}

void check_text(const std::string& v, const std::string& source, const char* key) {
  TIDAL_CHECK(!v.empty() && v.size() <= kMaxText && printable(v), source, ": field ", key,
              " must be a non-empty string of at most ", kMaxText, " printable characters");
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string scaled(double v, double unit, const char* suffix) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.4g %s", v / unit, suffix);
  return buf;
}

}  // namespace

const std::vector<BuiltinDevice>& builtin_device_profiles() { return kBuiltins; }

std::vector<std::string> builtin_device_names() {
  std::vector<std::string> names;
  for (const BuiltinDevice& b : kBuiltins) names.push_back(b.key);
  return names;
}

void check_device_profile(const DeviceProfile& p, const std::string& source) {
  check_text(p.name, source, "name");
  check_text(p.source, source, "source");
  TIDAL_CHECK(p.memory_bytes >= 0 && p.memory_bytes <= kMaxMemoryBytes, source,
              ": field memory_bytes must be in [0, 2^50] bytes (0: not known), got ", p.memory_bytes);
  for (const RateField& f : kRates) {
    const double v = p.*f.member;
    const bool ok = std::isfinite(v) && v <= f.max && ((f.zero_allowed && v == 0) || (v > 0 && v >= f.min));
    const std::string range =
        f.min > 0 ? detail::str_cat("from ", f.min, " to ", f.max) : detail::str_cat("at most ", f.max);
    TIDAL_CHECK(ok, source, ": field ", f.key, " must be ", f.zero_allowed ? "zero or positive" : "positive", " (",
                f.unit, ", ", range, "), got ", v);
  }
}

DeviceProfile parse_device_profile(std::string_view text, const std::string& source) {
  json j;
  try {
    j = parse_json(text, source);
  } catch (const Error& e) {
    detail::throw_error(detail::str_cat(e.what(), "; ", kWhatToDo));
  }
  TIDAL_CHECK(j.is_object(), source, " must be a JSON object (a device profile), found ", json_kind(j), "; ",
              kWhatToDo);
  const json* version = json_find(j, kVersionKey, source);
  TIDAL_CHECK(version != nullptr, source, " is not a tidal device profile (no field ", kVersionKey, "); ", kWhatToDo);
  const auto where = [&](const std::string& key) { return source + ": field " + key; };
  const int64_t v = json_int(*version, where(kVersionKey));
  TIDAL_CHECK(v == kDeviceProfileVersion, source, ": field ", kVersionKey, " is ", v, ", this tidal reads version ",
              kDeviceProfileVersion, "; ", kWhatToDo);
  for (const auto& [key, value] : j.items()) {
    bool known = key == kVersionKey || key == "name" || key == "source" || key == "memory_bytes";
    for (const RateField& f : kRates) known = known || key == f.key;
    TIDAL_CHECK(known, source, ": unknown field ", describe_key(key),
                " (a profile holds exactly the fields tidal plan --calibrate writes; docs/planning.md)");
  }
  const auto need = [&](const char* key, const char* kind) -> const json& {
    const json* f = json_find(j, key, source);
    TIDAL_CHECK(f != nullptr, source, ": field ", key, " is missing (", kind, ")");
    return *f;
  };
  DeviceProfile p;
  p.name = json_string(need("name", "a string"), where("name"));
  p.source = json_string(need("source", "a string"), where("source"));
  p.memory_bytes = json_int(need("memory_bytes", "an integer, bytes; 0 when not known"), where("memory_bytes"));
  for (const RateField& f : kRates) {
    const std::string kind = detail::str_cat("a number, ", f.unit);
    p.*f.member = json_number(need(f.key, kind.c_str()), where(f.key));
  }
  check_device_profile(p, source);
  return p;
}

DeviceProfile load_device_profile(const std::string& name_or_path) {
  const bool path_like =
      name_or_path.find('/') != std::string::npos || (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  if (!path_like) {
    for (const BuiltinDevice& b : kBuiltins)
      if (lower(name_or_path) == b.key || lower(name_or_path) == lower(b.profile.name)) return b.profile;
    TIDAL_CHECK(::access(name_or_path.c_str(), F_OK) == 0, "--device ", name_or_path, ": neither a built-in device (",
                join(builtin_device_names()),
                ") nor a profile file; list the built-ins with tidal plan --list-devices, or measure this machine "
                "with tidal plan --calibrate");
  }
  const std::string source = "[device profile] " + name_or_path;
  std::error_code ec;
  if (std::filesystem::exists(name_or_path, ec)) {
    TIDAL_CHECK(std::filesystem::is_regular_file(name_or_path, ec), source, ": not a regular file; ", kWhatToDo);
    const auto size = std::filesystem::file_size(name_or_path, ec);
    TIDAL_CHECK(!ec && size <= kMaxFileBytes, source, ": larger than ", kMaxFileBytes,
                " bytes, too large for a device profile (tidal plan --calibrate writes under 1 KiB); ", kWhatToDo);
  }
  std::ifstream in(name_or_path, std::ios::binary);
  TIDAL_CHECK(in.good(), source, ": cannot open it (", std::strerror(errno), "); ", kWhatToDo);
  std::ostringstream text;
  text << in.rdbuf();
  TIDAL_CHECK(!in.bad(), source, ": cannot read it; ", kWhatToDo);
  return parse_device_profile(text.str(), source);
}

std::string device_profile_json(const DeviceProfile& p) {
  nlohmann::ordered_json j;
  j[kVersionKey] = kDeviceProfileVersion;
  j["name"] = p.name;
  j["source"] = p.source;
  j["memory_bytes"] = p.memory_bytes;
  for (const RateField& f : kRates) j[f.key] = p.*f.member;
  return j.dump(2) + "\n";
}

void save_device_profile(const std::string& path, const DeviceProfile& p) {
  check_device_profile(p, "[device profile] " + path);
  const std::string text = device_profile_json(p);
  io::write_atomically(path, [&](int fd) { io::write_all(fd, text.data(), text.size(), path); });
}

std::string format_device_profile(const DeviceProfile& p) {
  std::ostringstream os;
  const auto row = [&](const char* what, const std::string& value) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-28s %s\n", what, value.c_str());
    os << buf;
  };
  os << p.name << "\n  (" << p.source << ")\n";
  row("device memory", p.memory_bytes > 0 ? format_bytes(p.memory_bytes) : "not known (give --memory)");
  row("GEMM f32 / bf16", scaled(p.gemm_flops_f32, 1e12, "/ ") + scaled(p.gemm_flops_bf16, 1e12, "TFLOP/s"));
  row("flash attention f32 / bf16",
      scaled(p.attention_flops_f32, 1e12, "/ ") + scaled(p.attention_flops_bf16, 1e12, "TFLOP/s"));
  row("memory bandwidth", scaled(p.memory_bandwidth, 1e9, "GB/s"));
  row("device->host / host->device", scaled(p.d2h_bandwidth, 1e9, "/ ") + scaled(p.h2d_bandwidth, 1e9, "GB/s"));
  row("disk (spill file)", scaled(p.disk_bandwidth, 1e9, "GB/s"));
  row("kernel overhead", scaled(p.kernel_overhead_s, 1e-6, "us"));
  row("collectives", p.collective_bandwidth > 0 ? scaled(p.collective_bandwidth, 1e9, "GB/s, ") +
                                                      scaled(p.collective_latency_s, 1e-6, "us each")
                                                : std::string("not measured (one rank)"));
  return os.str();
}

std::string format_device_line(const std::string& key, const DeviceProfile& p) {
  char buf[320];
  std::snprintf(
      buf, sizeof buf, "%-6s %-22s %10s  GEMM bf16 %s  attention bf16 %s  memory %s  host copies %s  collectives %s\n",
      key.c_str(), p.name.c_str(), format_bytes(p.memory_bytes).c_str(),
      scaled(p.gemm_flops_bf16, 1e12, "TFLOP/s").c_str(), scaled(p.attention_flops_bf16, 1e12, "TFLOP/s").c_str(),
      scaled(p.memory_bandwidth, 1e12, "TB/s").c_str(), scaled(p.h2d_bandwidth, 1e9, "GB/s").c_str(),
      scaled(p.collective_bandwidth, 1e9, "GB/s").c_str());
  return buf;
}

}  // namespace tidal::plan
