// A rank that fails ends the whole run: every rank exits non-zero, the message names the rank and the
// cause, and nobody waits forever in a collective. These tests launch mpirun themselves, so they run
// in the one-process ctest (dist1) only.
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/run_command.h"
#include "tidal/checkpoint/format.h"
#include "tidal/dist/communicator.h"

namespace tidal {
namespace {

using testing::run_command;

const std::string kMpirun =
    "timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 ";
const std::string kTidal = std::string(TIDAL_BINARY_DIR) + "/tidal";
const std::string kCommon = kTidal +
                            " train --model tiny-gpt2 --seq-length 16 --micro-batch-size 2 --global-batch-size 4 "
                            "--eval-interval 0 --log-interval 1000";
const std::string kTrain = kCommon + " --mock-data";

// Not when this test itself runs under mpirun (a launcher inside a launcher is not supported).
bool single_process() { return !dist::launched_by_mpi_launcher(); }

TEST(DistFaults, ABadInputOnOneRankEndsEveryRankWithItsMessage) {
  if (!single_process()) GTEST_SKIP() << "launches mpirun itself";
  // Rank 1 reads a dataset that does not exist (its node lacks the files: the paths are the only flags that
  // differ); rank 0 has one and would wait for rank 1 in the first gradient all-reduce.
  const std::string dir = ::testing::TempDir() + "tidal_faults_data";
  ASSERT_EQ(run_command("rm -rf " + dir + " && mkdir -p " + dir +
                        " && printf 'the quick brown fox jumps over the "
                        "lazy dog. ' > " +
                        dir + "/t.txt && for i in $(seq 200); do cat " + dir + "/t.txt; done > " + dir + "/text.txt")
                .code,
            0);
  ASSERT_EQ(run_command(kTidal + " tokenizer train --input " + dir + "/text.txt --vocab-size 300 --min-frequency 1 " +
                        "--output " + dir + "/tok.json && " + kTidal + " prepare --input " + dir + "/text.txt " +
                        "--tokenizer " + dir + "/tok.json --output-prefix " + dir + "/corpus --split-on-blank-lines")
                .code,
            0);
  const auto r = run_command(kMpirun + "-np 1 " + kCommon + " --train-iters 50 --data-path " + dir + "/corpus " +
                             "--tokenizer " + dir + "/tok.json : -np 1 " + kCommon +
                             " --train-iters 50 --data-path /nonexistent/corpus --tokenizer /nonexistent/t.json");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 124) << "timed out (a rank hung): " << r.output;
  EXPECT_NE(r.output.find("tidal train: [rank 1 of 2] error:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/t.json"), std::string::npos) << r.output;
}

// Ranks started with other settings are compared before anything collective: another layer count (which
// would deadlock in the first all-reduce), another seed (diverging replicas) or another iteration count
// each end every rank at once naming the setting and both values (issue 33).
TEST(DistFaults, RanksWithOtherSettingsStopNamingTheSetting) {
  if (!single_process()) GTEST_SKIP() << "launches mpirun itself";
  const std::pair<std::string, std::string> cases[] = {
      {" --train-iters 5 --num-layers 3", "model/n_layer is 3 on rank 1 and 2 on rank 0"},
      {" --train-iters 5 --seed 7", "seed is 7 on rank 1 and 1234 on rank 0"},
      {" --train-iters 9", "train_iters is 9 on rank 1 and 5 on rank 0"},
      // one rank would stop after iteration 2 and leave the other waiting in the next step's all-reduce
      {" --train-iters 5 --exit-interval 2", "exit_interval is 2 on rank 1 and 0 on rank 0"},
  };
  for (const auto& [flag, said] : cases) {
    const auto r = run_command(kMpirun + "-np 1 " + kTrain + " --train-iters 5 : -np 1 " + kTrain + flag);
    EXPECT_NE(r.code, 0) << flag << ": " << r.output;
    EXPECT_NE(r.code, 124) << flag << ": timed out (a rank hung): " << r.output;
    EXPECT_NE(r.output.find("rank 1 was started with other settings than rank 0: "), std::string::npos)
        << flag << ": " << r.output;
    EXPECT_NE(r.output.find(said), std::string::npos) << flag << ": " << r.output;
  }
}

// A rank that stops (SIGSTOP: a hung node, a debugger) would keep the others waiting forever in their next
// collective: with --distributed-timeout-minutes (here 3 s) the waiting rank ends the job naming the operation
// (Note [Collective timeout]; the default is Megatron's 10 minutes).
TEST(DistFaults, AStoppedRankEndsTheRunAfterTheTimeout) {
  if (!single_process()) GTEST_SKIP() << "launches mpirun itself";
  const std::string train = kTrain + " --train-iters 100000 --distributed-timeout-minutes 0.05";
  const auto r = run_command(kMpirun + "-np 1 " + train + " : -np 1 sh -c '" + train +
                             " & p=$!; sleep 2; kill -STOP $p; wait $p'");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 124) << "timed out (a rank hung): " << r.output;
  EXPECT_NE(r.output.find("did not complete within 0.05 minutes (--distributed-timeout-minutes)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[rank 0]"), std::string::npos) << r.output;
  // The progress board (Note [Progress board]) names the rank that never arrived and what its process is doing.
  EXPECT_NE(r.output.find("where the other ranks of this host are:\n  rank 1: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("its process is STOPPED"), std::string::npos) << r.output;
}

TEST(DistFaults, AKilledRankEndsTheRun) {
  if (!single_process()) GTEST_SKIP() << "launches mpirun itself";
  // Rank 1 is killed (SIGKILL) two seconds in, in the middle of a long run.
  const auto r = run_command(kMpirun + "-np 1 " + kTrain + " --train-iters 100000 : -np 1 timeout -s KILL 2 " + kTrain +
                             " --train-iters 100000");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 124) << "timed out (a rank hung): " << r.output;
}

TEST(DistFaults, GlobalBatchMustDivideOverTheRanks) {
  if (!single_process()) GTEST_SKIP() << "launches mpirun itself";
  const auto r = run_command(kMpirun + "-np 2 " + kTidal +
                             " train --model tiny-gpt2 --mock-data --seq-length 16 --micro-batch-size 2 "
                             "--global-batch-size 6 --train-iters 2");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--global-batch-size 6 is not a multiple of --micro-batch-size 2 x 2 data-parallel ranks"),
            std::string::npos)
      << r.output;
}

// Without --global-batch-size, the global batch under mpirun is Megatron's default, micro-batch x data-parallel
// ranks (here 2 x 2), instead of one process's micro-batch failing on a flag nobody gave (issue 33).
TEST(DistFaults, TheDefaultGlobalBatchIsMicroBatchTimesTheRanks) {
  if (!single_process()) GTEST_SKIP() << "launches mpirun itself";
  const auto r = run_command(kMpirun + "-np 2 " + kTidal +
                             " train --model tiny-gpt2 --mock-data --seq-length 16 --micro-batch-size 2 "
                             "--train-iters 2 --log-interval 1 --eval-interval 0");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("global batch size:     4"), std::string::npos) << r.output;
}

// --exit-duration-in-mins (Megatron's): the decision is all-reduced, so every rank saves and stops after the
// same iteration with exit 0 (here 0.0001 minutes: the first), and the checkpoint is complete.
TEST(DistFaults, TheExitDurationStopsEveryRankAfterTheSameIteration) {
  if (!single_process()) GTEST_SKIP() << "launches mpirun itself";
  const std::string save = ::testing::TempDir() + "tidal_faults_exit_duration";
  ASSERT_EQ(run_command("rm -rf " + save).code, 0);
  const auto r =
      run_command(kMpirun + "-np 2 " + kTrain +
                  " --train-iters 100000 --exit-duration-in-mins 0.0001 --use-distributed-optimizer --save " + save);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("stopped after iteration 1 of 100000 (--exit-duration-in-mins 0.0001)"), std::string::npos)
      << r.output;
  EXPECT_EQ(checkpoint::latest_iteration(save), 1) << r.output;
}

}  // namespace
}  // namespace tidal
