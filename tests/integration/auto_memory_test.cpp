// `tidal train --auto-memory` (tidal/plan/auto_memory.h): a run that does not fit the device's memory
// as given trains with tidal plan's choice, under the same limit; bad uses are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/integration/run_command.h"
#include "tidal/plan/device_profile.h"
#include "tidal/plan/dry_run.h"
#include "tidal/train/arguments.h"

namespace tidal::train {
namespace {

using Result = tidal::testing::CommandResult;
Result run(const std::string& cmd) { return tidal::testing::run_command(cmd); }

const std::string kTidal = TIDAL_BINARY_DIR "/tidal";
const std::vector<std::string> kGiven = {"--model",
                                         "small-gpt2",
                                         "--mock-data",
                                         "--seq-length",
                                         "128",
                                         "--micro-batch-size",
                                         "8",
                                         "--train-iters",
                                         "3",
                                         "--eval-interval",
                                         "0",
                                         "--no-progress",
                                         "--sample-tokens",
                                         "0"};

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& w : v) s += " " + w;
  return s;
}

TEST(AutoMemory, ARunThatDoesNotFitTrainsWithThePlansChoiceUnderTheSameLimit) {
  const int64_t need = plan::dry_run(train::parse_train_args(kGiven)).device.peak_allocated;
  const std::string limit = "OMP_WAIT_POLICY=passive TIDAL_DEVICE_MEMORY=" + std::to_string(need * 3 / 4) + " ";
  const Result as_given = run(limit + kTidal + " train" + joined(kGiven));
  EXPECT_EQ(as_given.code, 3) << as_given.output;  // out of memory
  const Result automatic = run(limit + kTidal + " train" + joined(kGiven) + " --auto-memory --device-profile h100");
  ASSERT_EQ(automatic.code, 0) << automatic.output;
  EXPECT_NE(automatic.output.find("--auto-memory: --"), std::string::npos) << automatic.output;
  EXPECT_NE(automatic.output.find("on NVIDIA H100 80GB SXM"), std::string::npos) << automatic.output;
}

TEST(AutoMemory, OutOfMemoryAdviceNamesThePlansChoiceWhenAProfileIsAtHand) {
  const int64_t need = plan::dry_run(train::parse_train_args(kGiven)).device.peak_allocated;
  const std::string dir = ::testing::TempDir() + "tidal_auto_memory_oom";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  plan::save_device_profile(dir + "/" + plan::kDefaultDeviceProfileFile,
                            plan::load_device_profile("h100"));  // as --calibrate writes it
  const Result r = run("cd " + dir + " && OMP_WAIT_POLICY=passive TIDAL_DEVICE_MEMORY=" + std::to_string(need * 3 / 4) +
                       " " + kTidal + " train" + joined(kGiven));
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.code, 3) << r.output;
  const size_t at = r.output.find("tidal plan's choice for ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("on NVIDIA H100 80GB SXM): --", at), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(rerun with --auto-memory to apply it)", at), std::string::npos) << r.output;
}

TEST(AutoMemory, BadUsesAreRefusedByName) {
  Result r =
      run("env -u TIDAL_DEVICE_MEMORY " + kTidal + " train" + joined(kGiven) + " --auto-memory --device-profile h100");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("tidal train --auto-memory: no device memory to fit"), std::string::npos) << r.output;
  r = run(kTidal + " train" + joined(kGiven) + " --auto-memory-budget 1GiB");
  EXPECT_NE(r.output.find("--auto-memory-budget needs --auto-memory"), std::string::npos) << r.output;
  r = run(kTidal + " train" + joined(kGiven) + " --device-profile h100");
  EXPECT_NE(r.output.find("--device-profile needs --auto-memory"), std::string::npos) << r.output;
  r = run(kTidal + " train" + joined(kGiven) + " --auto-memory --auto-memory-budget 64KiB --device-profile h100");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("tidal train --auto-memory: Nothing fits"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Parameters, gradients and optimizer states alone take"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tidal::train
