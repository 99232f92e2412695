// --expert-model-parallel-size on the command line (docs/distributed.md, "Expert parallel"): what one
// process cannot do is refused by name; tidal plan plans it per rank.
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/run_command.h"

namespace {

using Result = tidal::testing::CommandResult;

const std::string kTidal = "OMP_WAIT_POLICY=passive " TIDAL_BINARY_DIR "/tidal";
const std::string kMoe =
    " --model tiny-qwen3-moe --mock-data --seq-length 16 --micro-batch-size 2 --global-batch-size 2";

TEST(ExpertParallelCli, RefusedWhereItCannotWork) {
  const Result one = tidal::testing::run_command(kTidal + " train" + kMoe + " --expert-model-parallel-size 2");
  EXPECT_EQ(one.code, 1) << one.output;
  EXPECT_NE(one.output.find("--expert-model-parallel-size 2 does not divide the 1 ranks"), std::string::npos)
      << one.output;
  // tidal plan plans it on ranks it divides (each rank holds num_experts / E experts).
  const Result plan =
      tidal::testing::run_command(kTidal + " plan" + kMoe + " --expert-model-parallel-size 2 --memory 1GiB");
  EXPECT_EQ(plan.code, 1) << plan.output;
  EXPECT_NE(plan.output.find("--expert-model-parallel-size 2 does not divide the 1 ranks"), std::string::npos)
      << plan.output;
  const Result two = tidal::testing::run_command(
      kTidal + " plan" + kMoe + " --expert-model-parallel-size 2 --memory 1GiB --data-parallel-size 2");
  EXPECT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("It fits"), std::string::npos) << two.output;
}

}  // namespace
