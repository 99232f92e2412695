// The `tidal` command line as a user runs it: exit codes and messages.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/integration/run_command.h"

namespace {

using Result = tidal::testing::CommandResult;
Result run(const std::string& cmd) { return tidal::testing::run_command(cmd); }

const std::string kTidal = TIDAL_BINARY_DIR "/tidal";
const std::string kSmall = " demo --steps 3 --layers 1 --dim 32 --ffn 32 --seq-length 16 --batch 2 --log-interval 1";

}  // namespace

TEST(Cli, DemoTrainsAndCheckpointingChangesNothingButMemory) {
  Result r = run(kTidal + kSmall);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step     3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gradients bitwise identical"), std::string::npos) << r.output;
}

TEST(Cli, DeviceMemoryLimitGivesOutOfMemoryWithBreakdown) {
  Result r = run("TIDAL_DEVICE_MEMORY=256KiB " + kTidal + kSmall);
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("out of memory"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("256.00 KiB limit"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("What to try"), std::string::npos) << r.output;
}

TEST(Cli, BadEnvironmentAndArgumentsAreExplained) {
  Result bad_limit = run("TIDAL_DEVICE_MEMORY=lots " + kTidal + " info");
  EXPECT_EQ(bad_limit.code, 1) << bad_limit.output;
  EXPECT_NE(bad_limit.output.find("TIDAL_DEVICE_MEMORY"), std::string::npos) << bad_limit.output;
  Result bad_cache = run("TIDAL_DEVICE_CACHE=maybe " + kTidal + " info");
  EXPECT_EQ(bad_cache.code, 1) << bad_cache.output;
  EXPECT_NE(bad_cache.output.find("TIDAL_DEVICE_CACHE: expected keep or release, split or nosplit (comma-separated), "
                                  "got 'maybe'"),
            std::string::npos)
      << bad_cache.output;
  Result twice = run("TIDAL_DEVICE_CACHE=keep,release " + kTidal + " info");
  EXPECT_EQ(twice.code, 1) << twice.output;
  EXPECT_NE(twice.output.find("'release' after another word of its kind, got 'keep,release'"), std::string::npos)
      << twice.output;

  // The OpenMP runtime crashed creating this many threads; now it is a clear error.
  Result many_threads = run("TIDAL_NUM_THREADS=100000 " + kTidal + " info");
  EXPECT_EQ(many_threads.code, 1) << many_threads.output;
  EXPECT_NE(many_threads.output.find("TIDAL_NUM_THREADS must be an integer from 1 to 1024"), std::string::npos)
      << many_threads.output;

  Result bad_number = run(kTidal + " demo --steps many");
  EXPECT_EQ(bad_number.code, 1);
  EXPECT_NE(bad_number.output.find("--steps must be an integer"), std::string::npos) << bad_number.output;

  Result unknown = run(kTidal + " demo --stepz 3");
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.output.find("unknown option '--stepz'"), std::string::npos) << unknown.output;
  EXPECT_NE(unknown.output.find("--steps"), std::string::npos) << unknown.output;

  Result heads = run(kTidal + " demo --heads 4 --kv-heads 3");
  EXPECT_EQ(heads.code, 1);
  EXPECT_NE(heads.output.find("multiple of --kv-heads"), std::string::npos) << heads.output;

  Result command = run(kTidal + " frobnicate");
  EXPECT_EQ(command.code, 2);
  EXPECT_NE(command.output.find("unknown command"), std::string::npos) << command.output;
}

TEST(Cli, InfoAndHelp) {
  Result info = run("TIDAL_DEVICE_MEMORY=8GiB " + kTidal + " info");
  EXPECT_EQ(info.code, 0) << info.output;
  EXPECT_NE(info.output.find("oneDNN"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("8.00 GiB limit"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("cache given back before the reserve grows"), std::string::npos) << info.output;
  Result keep = run("TIDAL_DEVICE_CACHE=keep " + kTidal + " info");
  EXPECT_NE(keep.output.find("cache kept"), std::string::npos) << keep.output;
  EXPECT_NE(info.output.find("large cached blocks split"), std::string::npos) << info.output;
  Result whole = run("TIDAL_DEVICE_CACHE=nosplit,release " + kTidal + " info");
  EXPECT_NE(whole.output.find("cache given back before the reserve grows"), std::string::npos) << whole.output;
  EXPECT_NE(whole.output.find("cached blocks reused whole"), std::string::npos) << whole.output;
  EXPECT_EQ(run(kTidal + " help").code, 0);
  Result help = run(kTidal + " demo --help");  // every command lists its options
  EXPECT_EQ(help.code, 0) << help.output;
  EXPECT_NE(help.output.find("--kv-heads N"), std::string::npos) << help.output;
  EXPECT_NE(help.output.find("--checkpoint"), std::string::npos) << help.output;
}

TEST(Cli, TrainSaveThenGenerate) {
  const std::string dir = ::testing::TempDir() + "tidal_cli_generate";
  std::system(("rm -rf " + dir).c_str());
  Result t = run(kTidal +
                 " train --model tiny-gpt2 --train-iters 3 --seq-length 32 --micro-batch-size 2 "
                 "--save " +
                 dir + " --no-progress --sample-tokens 0");
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_NE(t.output.find("iteration        3/       3"), std::string::npos) << t.output;
  EXPECT_NE(t.output.find("memory at the device peak"), std::string::npos) << t.output;
  Result g = run(kTidal + " generate --load " + dir + " --prompt 'The ' --max-new-tokens 5 --temperature 0");
  EXPECT_EQ(g.code, 0) << g.output;
  EXPECT_EQ(g.output.rfind("The ", 0), 0u) << g.output;  // the prompt, then what the model adds
  Result bad = run(kTidal + " generate --load " + dir + "/nothing --prompt x");
  EXPECT_EQ(bad.code, 1) << bad.output;
  Result flag = run(kTidal + " train --num-layer 2");
  EXPECT_EQ(flag.code, 1);
  EXPECT_NE(flag.output.find("did you mean --num-layers"), std::string::npos) << flag.output;
}
