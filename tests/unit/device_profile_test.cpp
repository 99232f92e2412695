// tidal/plan/device_profile.h and calibrate.h: profile files round-trip, every bad input is refused
// with a message naming the file and the field (never its contents), built-ins load by key and name,
// and a quick calibration yields a complete profile (its structure only, never its timings).
#include "tidal/plan/device_profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/error_of.h"
#include "tidal/allocator.h"
#include "tidal/plan/calibrate.h"

namespace tidal::plan {
namespace {

using testing::error_of;
using json = nlohmann::json;

DeviceProfile sample() {
  DeviceProfile p;
  p.name = "Test GPU 24GB";
  p.source = "a unit test";
  p.memory_bytes = int64_t(24) << 30;
  p.gemm_flops_f32 = 1.25e13;
  p.gemm_flops_bf16 = 1.0 / 3.0 * 1e14;  // not a short decimal: the round trip must be exact
  p.attention_flops_f32 = 7e12;
  p.attention_flops_bf16 = 2.2e13;
  p.memory_bandwidth = 9.1e11;
  p.d2h_bandwidth = 2.4e10;
  p.h2d_bandwidth = 2.5e10;
  p.disk_bandwidth = 3e9;
  p.kernel_overhead_s = 4.5e-6;
  p.collective_bandwidth = 0;  // not measured
  p.collective_latency_s = 0;
  return p;
}

void expect_same(const DeviceProfile& a, const DeviceProfile& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.memory_bytes, b.memory_bytes);
  EXPECT_EQ(a.gemm_flops_f32, b.gemm_flops_f32);
  EXPECT_EQ(a.gemm_flops_bf16, b.gemm_flops_bf16);
  EXPECT_EQ(a.attention_flops_f32, b.attention_flops_f32);
  EXPECT_EQ(a.attention_flops_bf16, b.attention_flops_bf16);
  EXPECT_EQ(a.memory_bandwidth, b.memory_bandwidth);
  EXPECT_EQ(a.d2h_bandwidth, b.d2h_bandwidth);
  EXPECT_EQ(a.h2d_bandwidth, b.h2d_bandwidth);
  EXPECT_EQ(a.disk_bandwidth, b.disk_bandwidth);
  EXPECT_EQ(a.kernel_overhead_s, b.kernel_overhead_s);
  EXPECT_EQ(a.collective_bandwidth, b.collective_bandwidth);
  EXPECT_EQ(a.collective_latency_s, b.collective_latency_s);
}

std::string temp_path(const std::string& name) { return ::testing::TempDir() + "tidal_device_profile_" + name; }

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// The sample's JSON with one field changed (or removed when `value` is discarded).
std::string with(const std::string& key, const json& value) {
  json j = json::parse(device_profile_json(sample()));
  if (value.is_discarded())
    j.erase(key);
  else
    j[key] = value;
  return j.dump();
}

std::string parse_error(const std::string& text) {
  return error_of([&] { parse_device_profile(text, "[device profile] p.json"); });
}

TEST(DeviceProfile, RoundTripsThroughAFileExactly) {
  const std::string path = temp_path("round_trip.json");
  save_device_profile(path, sample());
  expect_same(load_device_profile(path), sample());
  expect_same(parse_device_profile(device_profile_json(sample()), "x"), sample());
  // The fields in a fixed order, the format's version first.
  const std::string text = device_profile_json(sample());
  EXPECT_EQ(text.find("\"tidal_device_profile\": 1"), 4u) << text;
  EXPECT_LT(text.find("\"gemm_flops_f32\""), text.find("\"collective_latency_s\"")) << text;
  std::filesystem::remove(path);
}

TEST(DeviceProfile, BuiltinsLoadByKeyOrNameAndAreValid) {
  ASSERT_EQ(builtin_device_names(), (std::vector<std::string>{"a100", "h100", "h200"}));
  for (const BuiltinDevice& b : builtin_device_profiles()) {
    check_device_profile(b.profile, b.key);
    expect_same(load_device_profile(b.key), b.profile);
    expect_same(load_device_profile(b.profile.name), b.profile);  // the full name, any case
    EXPECT_GT(b.profile.memory_bytes, int64_t(79) << 30) << b.key;
    // Achieved rates below the datasheet's dense bf16 peaks (989.4 / 312 TFLOP/s).
    EXPECT_LT(b.profile.gemm_flops_bf16, b.key == "a100" ? 312e12 : 989.4e12) << b.key;
  }
  expect_same(load_device_profile("H100"), load_device_profile("nvidia h100 80gb sxm"));
  // The H200 is an H100 with more, faster memory.
  const DeviceProfile h100 = load_device_profile("h100"), h200 = load_device_profile("h200");
  EXPECT_EQ(h100.gemm_flops_bf16, h200.gemm_flops_bf16);
  EXPECT_GT(h200.memory_bandwidth, h100.memory_bandwidth);
  EXPECT_EQ(h200.memory_bytes, int64_t(143771) << 20);
}

TEST(DeviceProfile, UnknownBuiltinAndMissingFileSayWhatToDo) {
  std::string msg = error_of([] { load_device_profile("h300"); });
  EXPECT_EQ(msg,
            "--device h300: neither a built-in device (a100, h100, h200) nor a profile file; list the built-ins "
            "with tidal plan --list-devices, or measure this machine with tidal plan --calibrate");
  const std::string missing = temp_path("missing.json");
  msg = error_of([&] { load_device_profile(missing); });
  EXPECT_NE(msg.find("[device profile] " + missing +
                     ": cannot open it (No such file or directory); write one with "
                     "'tidal plan --calibrate --profile-out FILE' or name a built-in device"),
            std::string::npos)
      << msg;
  msg = error_of([] { load_device_profile("/tmp/"); });
  EXPECT_NE(msg.find("[device profile] /tmp/: not a regular file"), std::string::npos) << msg;
}

TEST(DeviceProfile, BadJsonNamesTheFileAndNeverEchoesIt) {
  const std::string path = temp_path("bad.json");
  write(path, "root:x:0:0:root:/root:/bin/bash");
  std::string msg = error_of([&] { load_device_profile(path); });
  EXPECT_NE(msg.find("[device profile] " + path + " is not valid JSON (syntax error near byte"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("tidal plan --calibrate"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("root"), std::string::npos) << msg;
  write(path, std::string(100 << 10, ' '));
  msg = error_of([&] { load_device_profile(path); });
  EXPECT_NE(msg.find("larger than 65536 bytes, too large for a device profile"), std::string::npos) << msg;
  std::filesystem::remove(path);
  EXPECT_NE(parse_error("[1, 2]").find("[device profile] p.json must be a JSON object (a device profile), found an "
                                       "array"),
            std::string::npos);
  EXPECT_NE(parse_error(R"({"name": "x"})")
                .find("[device profile] p.json is not a tidal device profile (no field tidal_device_profile)"),
            std::string::npos);
  EXPECT_NE(parse_error(with("tidal_device_profile", 2))
                .find("p.json: field tidal_device_profile is 2, this tidal reads version 1"),
            std::string::npos);
}

TEST(DeviceProfile, EveryFieldIsTypedAndRangeChecked) {
  EXPECT_NE(
      parse_error(with("gemm_flops_f32", "fast")).find("p.json: field gemm_flops_f32 must be a number, found a string"),
      std::string::npos);
  EXPECT_NE(parse_error(with("memory_bytes", 1.5))
                .find("p.json: field memory_bytes must be an integer, found a "
                      "fractional number"),
            std::string::npos);
  EXPECT_NE(parse_error(with("name", 7)).find("p.json: field name must be a string, found an integer"),
            std::string::npos);
  EXPECT_NE(parse_error(with("memory_bandwidth", -1))
                .find("p.json: field memory_bandwidth must be positive (bytes/s, from 1 to 1e+15), got -1"),
            std::string::npos);
  EXPECT_NE(parse_error(with("gemm_flops_bf16", 0))
                .find("p.json: field gemm_flops_bf16 must be positive (FLOP/s, from 1 to 1e+18), got 0"),
            std::string::npos);
  EXPECT_NE(parse_error(with("disk_bandwidth", 1e300)).find("field disk_bandwidth must be positive"),
            std::string::npos);
  // A denormal rate is positive but plans steps of inf seconds: refused, as is a collective rate below 1 B/s.
  EXPECT_NE(parse_error(with("gemm_flops_f32", 5e-324)).find("field gemm_flops_f32 must be positive (FLOP/s, from 1"),
            std::string::npos);
  EXPECT_NE(parse_error(with("collective_bandwidth", 1e-300))
                .find("field collective_bandwidth must be zero or positive (bytes/s, from 1 to 1e+15)"),
            std::string::npos);
  EXPECT_NE(parse_error(with("collective_latency_s", -1e-6))
                .find("field collective_latency_s must be zero or positive (seconds, at most 1)"),
            std::string::npos);
  EXPECT_NE(parse_error(with("memory_bytes", -1)).find("field memory_bytes must be in [0, 2^50] bytes"),
            std::string::npos);
  EXPECT_NE(parse_error(with("name", "")).find("field name must be a non-empty string of at most 256 printable"),
            std::string::npos);
  EXPECT_NE(parse_error(with("source", "a\x1b[2Jb")).find("field source must be a non-empty string"),
            std::string::npos);
  EXPECT_NE(parse_error(with("h2d_bandwidth", json(json::value_t::discarded)))
                .find("p.json: field h2d_bandwidth is missing (a number, bytes/s)"),
            std::string::npos);
  EXPECT_NE(parse_error(with("kernel_overhead_s", nullptr)).find("field kernel_overhead_s is missing"),
            std::string::npos);
}

TEST(DeviceProfile, UnknownFieldsAreRefusedByName) {
  std::string msg = parse_error(with("gemm_flops_fp8", 1e15));
  EXPECT_NE(msg.find("p.json: unknown field \"gemm_flops_fp8\" (a profile holds exactly the fields tidal plan "
                     "--calibrate writes"),
            std::string::npos)
      << msg;
  // A long or unprintable key is described, not echoed.
  msg = parse_error(with(std::string(100, 's'), 1));
  EXPECT_NE(msg.find("unknown field of 100 bytes"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("sss"), std::string::npos) << msg;
}

TEST(DeviceProfile, SaveRefusesAnInvalidProfileAndTheTableShowsEveryFigure) {
  DeviceProfile p = sample();
  p.gemm_flops_f32 = std::nan("");
  EXPECT_NE(error_of([&] {
              save_device_profile(temp_path("nan.json"), p);
            }).find("field gemm_flops_f32 must be positive (FLOP/s, from 1 to 1e+18), got nan"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(temp_path("nan.json")));
  const std::string table = format_device_profile(sample());
  EXPECT_NE(table.find("GEMM f32 / bf16              12.5 / 33.33 TFLOP/s"), std::string::npos) << table;
  EXPECT_NE(table.find("kernel overhead              4.5 us"), std::string::npos) << table;
  EXPECT_NE(table.find("collectives                  not measured (one rank)"), std::string::npos) << table;
  EXPECT_NE(format_device_line("h100", load_device_profile("h100")).find("GEMM bf16 742 TFLOP/s"), std::string::npos);
}

// An emulated device budget (TIDAL_DEVICE_MEMORY) is the run's, not the measurements': calibrating under
// one smaller than their tensors works and leaves the budget as it was.
TEST(Calibrate, MeasuresOutsideAnEmulatedDeviceBudget) {
  Allocator& device = device_allocator(Device::cpu());
  const int64_t saved = device.limit();
  constexpr int64_t kBudget = int64_t(64) << 10;  // the quick run's copies alone take 1 MiB
  device.set_limit(kBudget);
  CalibrateOptions o;
  o.quick = true;
  o.temp_dir = ::testing::TempDir();
  DeviceProfile p;
  std::string error;
  try {
    p = calibrate(o);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const int64_t after = device.limit();
  device.set_limit(saved);
  EXPECT_EQ(error, "");
  EXPECT_EQ(after, kBudget);
  check_device_profile(p, "calibrated");
}

TEST(Calibrate, AQuickRunGivesACompleteProfile) {
  std::vector<std::string> steps;
  CalibrateOptions o;
  o.quick = true;
  o.temp_dir = ::testing::TempDir();
  o.progress = [&](const std::string& what) { steps.push_back(what); };
  const DeviceProfile p = calibrate(o);
  check_device_profile(p, "calibrated");  // every rate positive, finite and in range
  EXPECT_NE(p.name.find(" (calibrated)"), std::string::npos) << p.name;
  EXPECT_NE(p.source.find("tidal plan --calibrate (quick"), std::string::npos) << p.source;
  EXPECT_EQ(p.memory_bytes, 0);
  EXPECT_GT(p.kernel_overhead_s, 0);
  EXPECT_EQ(p.collective_bandwidth, 0);  // one rank: not measured
  EXPECT_EQ(steps.size(), 8u);
  EXPECT_EQ(steps.front(), "GEMM f32");
  EXPECT_EQ(steps.back(), "disk (spill file)");
  // The spill-file measurement leaves nothing in its directory.
  for (const auto& e : std::filesystem::directory_iterator(::testing::TempDir()))
    EXPECT_EQ(e.path().filename().string().find("tidal-calibrate-"), std::string::npos) << e.path();
  expect_same(parse_device_profile(device_profile_json(p), "x"), p);
}

}  // namespace
}  // namespace tidal::plan
