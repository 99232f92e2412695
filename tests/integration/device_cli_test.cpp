// `--device` on the command line: on a machine without a usable GPU (or a build without the CUDA
// backend) `tidal train --device cuda` and `tidal generate --device cuda` stop with an error that says
// why, never a crash; `tidal info` lists the backends; tidal plan's --device stays a device profile.
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/run_command.h"

namespace {

using Result = tidal::testing::CommandResult;
Result run(const std::string& cmd) { return tidal::testing::run_command(cmd); }

const std::string kTidal = TIDAL_BINARY_DIR "/tidal";
const std::string kTiny =
    " train --model tiny-gpt2 --mock-data --seq-length 16 --micro-batch-size 1 --global-batch-size 1 --train-iters 1 "
    "--no-progress --eval-interval 0";

bool has(const Result& r, const std::string& part) { return r.output.find(part) != std::string::npos; }

// CUDA's reason (a CUDA build on a machine without a GPU or driver) or the build's (CUDA not linked in).
bool names_why_cuda_is_missing(const Result& r) {
  return has(r, "[cuda] cannot use cuda:0") || has(r, "is not linked in");
}

TEST(DeviceCli, TrainOnCudaWithoutAGpuSaysWhy) {
  const Result r = run(kTidal + kTiny + " --device cuda");
  if (r.code == 0) GTEST_SKIP() << "a usable GPU here: the run trained (tests/cuda covers it)";
  EXPECT_EQ(r.code, 1) << r.output;  // an error, not a signal
  EXPECT_TRUE(names_why_cuda_is_missing(r)) << r.output;
  const Result bad = run(kTidal + kTiny + " --device cuda:x");
  EXPECT_EQ(bad.code, 1) << bad.output;
  EXPECT_TRUE(has(bad, "--device") && has(bad, "valid choices are cpu, meta, cuda and cuda:N")) << bad.output;
  const Result far = run(kTidal + kTiny + " --device cuda:99");
  EXPECT_EQ(far.code, 1) << far.output;
  EXPECT_TRUE(has(far, "cuda:N takes N from 0 to 63")) << far.output;
  const Result cpu = run(kTidal + kTiny + " --device cpu");
  EXPECT_EQ(cpu.code, 0) << cpu.output;
}

TEST(DeviceCli, InfoListsEveryBackend) {
  const Result r = run(kTidal + " info");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(has(r, "devices        cpu, meta")) << r.output;
  EXPECT_TRUE(has(r, "cost           recorded from shapes")) << r.output;  // the meta backend's line
  EXPECT_TRUE(has(r, "device memory  ")) << r.output;
}

TEST(DeviceCli, PlanDeviceIsStillAProfile) {
  const Result r = run(kTidal + " plan --model tiny-gpt2 --mock-data --seq-length 32 --device h100");
  EXPECT_EQ(r.code, 0) << r.output;
}

}  // namespace
