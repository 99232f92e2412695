// `tidal plan --calibrate`, `--device` and `--list-devices`: a quick calibration writes a profile that
// --device reads back; a built-in device's memory is the budget; bad uses are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/integration/run_command.h"

namespace {

using Result = tidal::testing::CommandResult;

const std::string kTidal = "OMP_WAIT_POLICY=passive " TIDAL_BINARY_DIR "/tidal";
const std::string kTiny = " --model tiny-gpt2 --mock-data --seq-length 64 --micro-batch-size 4";

Result run(const std::string& cmd) { return tidal::testing::run_command(cmd); }

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PlanDeviceCli, QuickCalibrationWritesAProfileThatPlanReads) {
  const std::string dir = ::testing::TempDir() + "tidal_plan_calibrate";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  // Default path: ./tidal-device-profile.json; the spill-file measurement goes to TMPDIR.
  const Result cal = run("cd " + dir + " && TMPDIR=" + dir + " " + kTidal + " plan --calibrate --quick");
  ASSERT_EQ(cal.code, 0) << cal.output;
  EXPECT_NE(cal.output.find("calibrating: GEMM f32"), std::string::npos) << cal.output;
  EXPECT_NE(cal.output.find(" (calibrated)\n  (tidal plan --calibrate (quick"), std::string::npos) << cal.output;
  EXPECT_NE(cal.output.find("collectives                  not measured (one rank)"), std::string::npos) << cal.output;
  EXPECT_NE(cal.output.find("written to tidal-device-profile.json"), std::string::npos) << cal.output;
  const std::string file = dir + "/tidal-device-profile.json";
  const nlohmann::json j = nlohmann::json::parse(read(file));
  EXPECT_EQ(j.at("tidal_device_profile"), 1);
  EXPECT_EQ(j.at("memory_bytes"), 0);
  EXPECT_GT(j.at("gemm_flops_bf16").get<double>(), 0);
  // Nothing but the profile is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);

  // Its memory is not known (0): the budget comes from --memory.
  const Result plan = run(kTidal + " plan" + kTiny + " --device " + file + " --memory 1GiB");
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_EQ(plan.output.find("Device: "), 0u) << plan.output;
  EXPECT_NE(plan.output.find(" (calibrated) (tidal plan --calibrate (quick"), std::string::npos) << plan.output;
  // With a profile, the search: step times and the fastest configuration that fits.
  EXPECT_NE(plan.output.find("Budget 1.00 GiB less 102.40 MiB of headroom: 921.60 MiB.\nAs given: device peak "),
            std::string::npos)
      << plan.output;
  EXPECT_NE(plan.output.find("Chosen"), std::string::npos) << plan.output;

  const Result out = run(kTidal + " plan --calibrate --quick --profile-out " + dir + "/other.json");
  ASSERT_EQ(out.code, 0) << out.output;
  EXPECT_TRUE(std::filesystem::exists(dir + "/other.json"));
  std::filesystem::remove_all(dir);
}

TEST(PlanDeviceCli, BuiltinDevicesAndTheirMemoryAsTheBudget) {
  const Result list = run(kTidal + " plan --list-devices");
  ASSERT_EQ(list.code, 0) << list.output;
  EXPECT_NE(list.output.find("h100   NVIDIA H100 80GB SXM    79.65 GiB  GEMM bf16 742 TFLOP/s"), std::string::npos)
      << list.output;
  EXPECT_NE(list.output.find("h200   NVIDIA H200 141GB      140.40 GiB"), std::string::npos) << list.output;
  EXPECT_NE(list.output.find("a100   NVIDIA A100 80GB SXM    80.00 GiB  GEMM bf16 234 TFLOP/s"), std::string::npos)
      << list.output;

  const Result h100 = run(kTidal + " plan" + kTiny + " --device H100");
  ASSERT_EQ(h100.code, 0) << h100.output;
  EXPECT_NE(h100.output.find("Device: NVIDIA H100 80GB SXM (NVIDIA datasheet"), std::string::npos) << h100.output;
  EXPECT_NE(h100.output.find("; its memory is the budget"), std::string::npos) << h100.output;
  EXPECT_NE(h100.output.find("Budget 79.65 GiB less 7.96 GiB of headroom"), std::string::npos) << h100.output;
  // --memory wins over the device's memory.
  const Result small = run(kTidal + " plan" + kTiny + " --device a100 --memory 3.5MiB");
  EXPECT_EQ(small.output.find("its memory is the budget"), std::string::npos) << small.output;
  EXPECT_NE(small.output.find("Budget 3.50 MiB less "), std::string::npos) << small.output;
  EXPECT_NE(small.output.find(": does not fit.\n"), std::string::npos) << small.output;
}

TEST(PlanDeviceCli, BadUsesAreRefusedByName) {
  Result r = run(kTidal + " plan" + kTiny + " --device h300");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--device h300: neither a built-in device (a100, h100, h200) nor a profile file"),
            std::string::npos)
      << r.output;
  r = run(kTidal + " plan" + kTiny + " --device /nonexistent/profile.json");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("[device profile] /nonexistent/profile.json: cannot open it (No such file or directory)"),
            std::string::npos)
      << r.output;
  r = run(kTidal + " plan --calibrate" + kTiny);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--calibrate measures this machine and takes only --profile-out and --quick"),
            std::string::npos)
      << r.output;
  r = run(kTidal + " plan" + kTiny + " --quick");
  EXPECT_NE(r.output.find("--quick and --profile-out go with --calibrate"), std::string::npos) << r.output;
  r = run(kTidal + " plan --calibrate --quick --profile-out /nonexistent/dir/p.json");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/dir/p.json"), std::string::npos) << r.output;
  const Result help = run(kTidal + " plan --help");
  EXPECT_NE(help.output.find("tidal plan --calibrate [--profile-out FILE] [--quick]"), std::string::npos);
}

}  // namespace

namespace {

TEST(PlanSearchCli, JsonSaysGivenChosenAndCandidates) {
  const Result r = run(kTidal + " plan" + kTiny + " --global-batch-size 8 --device h100 --memory 3MiB --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);  // nothing but the JSON on stdout
  for (const char* key : {"device_peak_bytes", "host_peak_bytes", "step_ms", "fits"}) {
    EXPECT_TRUE(j["given"].contains(key)) << key;
    EXPECT_TRUE(j["chosen"].contains(key)) << key;
  }
  EXPECT_FALSE(j["given"]["fits"].get<bool>());
  EXPECT_TRUE(j["chosen"]["fits"].get<bool>());
  EXPECT_LE(j["chosen"]["device_peak_bytes"].get<int64_t>(), j["target_bytes"].get<int64_t>());
  EXPECT_FALSE(j["chosen"]["flags"].get<std::string>().empty());
  EXPECT_GT(j["candidates"].size(), 10u);
  EXPECT_EQ(j["profile"]["name"], "NVIDIA H100 80GB SXM");
  // Nothing fits: exit code 3, and the reason.
  const Result none = run(kTidal + " plan" + kTiny + " --device h100 --memory 100KiB --json");
  EXPECT_EQ(none.code, 3) << none.output;
  const nlohmann::json n = nlohmann::json::parse(none.output);
  EXPECT_TRUE(n["chosen"].is_null());
  EXPECT_NE(n["nothing_fits"].get<std::string>().find("Parameters, gradients and optimizer states alone take"),
            std::string::npos);
  // --json needs step times: without a profile at hand, this machine's, calibrated first (said on stderr).
  const std::string dir = ::testing::TempDir() + "tidal_plan_json";  // without ./tidal-device-profile.json
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const Result no_profile =
      run("(cd " + dir + " && " + kTidal + " plan" + kTiny + " --memory 3MiB --json 2>" + dir + "/stderr.txt)");
  const std::string said = read(dir + "/stderr.txt");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(no_profile.code, 0) << no_profile.output;
  const nlohmann::json measured = nlohmann::json::parse(no_profile.output);  // standard output: JSON alone
  EXPECT_NE(measured["profile"]["name"].get<std::string>().find("(calibrated)"), std::string::npos);
  EXPECT_FALSE(measured["chosen"].is_null());
  EXPECT_NE(said.find("calibrating this machine now"), std::string::npos) << said;
}

}  // namespace
