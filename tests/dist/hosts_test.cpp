// tidal across hosts (issue 32): two "hosts" made as network namespaces on this machine
// (scripts/netns_hosts.sh: a switch, a cable each, an address each), MPI's traffic between them over Open MPI's
// TCP transport only (no shared memory), and mpirun starting its daemon on the other host through a launcher
// agent that enters that host's namespace where a cluster would ssh (scripts/netns_agent.sh). Needs root and
// `ip netns`; where the machine allows neither the tests say so and skip. They launch mpirun themselves, so
// they run in the one-process ctest (dist1) only.
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "tests/integration/run_command.h"
#include "tests/integration/train_helpers.h"
#include "tidal/dist/communicator.h"
#include "tidal/io/atomic_file.h"

namespace tidal {
namespace {

using testing::run_command;
using train::fresh_dir;

const std::string kScripts = std::string(TIDAL_SOURCE_DIR) + "/scripts/";
const std::string kTidal = std::string(TIDAL_BINARY_DIR) + "/tidal";

class AcrossHosts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (dist::launched_by_mpi_launcher()) return;
    if (geteuid() != 0) {
      skip_reason_ = "making hosts as network namespaces needs root";
      return;
    }
    const auto made = run_command(kScripts + "netns_hosts.sh up 2 " + name_ + " > " + hostfile_);
    if (made.code != 0) {
      skip_reason_ = "this machine does not allow network namespaces (ip netns): " + made.output;
      run_command(kScripts + "netns_hosts.sh down " + name_);
    }
  }
  static void TearDownTestSuite() {
    if (skip_reason_.empty() && !dist::launched_by_mpi_launcher())
      run_command(kScripts + "netns_hosts.sh down " + name_);
  }
  void SetUp() override {
    if (dist::launched_by_mpi_launcher()) GTEST_SKIP() << "launches mpirun itself";
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
  }

  // mpirun in host 0, one rank a host, TCP between them: what a user writes on a cluster, with the agent in ssh's
  // place.
  static std::string mpirun() {
    return "TIDAL_NETNS=" + name_ + " timeout 120 ip netns exec " + name_ +
           "-0 mpirun --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=1 -x TIDAL_NUM_THREADS=1 --hostfile " +
           hostfile_ + " -np 2 --mca plm_rsh_agent " + kScripts +
           "netns_agent.sh --mca btl tcp,self --mca btl_tcp_if_include 10.231.0.0/24 "
           "--mca oob_tcp_if_include 10.231.0.0/24 ";
  }

  static inline const std::string name_ = "tidalt" + std::to_string(getpid());
  static inline const std::string hostfile_ = ::testing::TempDir() + "tidal_hosts_" + std::to_string(getpid());
  static inline std::string skip_reason_;
};

const std::string kTrain = kTidal +
                           " train --model tiny-gpt2 --mock-data --seq-length 16 --micro-batch-size 2 "
                           "--global-batch-size 4 --attention-dropout 0 --hidden-dropout 0 --eval-interval 0 "
                           "--no-progress ";

// ZeRO-3 on two hosts ends bit for bit where one process ends that accumulates the same two micro-batches a
// step: every parameter gather, gradient reduce-scatter and start-up comparison crossed the cable.
TEST_F(AcrossHosts, ZeRO3OnTwoHostsEqualsOneProcess) {
  const std::string dir = fresh_dir("across_hosts");
  const std::string run = kTrain + "--train-iters 4 --log-interval 1 --save-interval 4 --save ";
  const auto two = run_command(mpirun() + run + dir + "/two --data-parallel-sharding-strategy optim_grads_params");
  ASSERT_EQ(two.code, 0) << two.output;
  EXPECT_NE(two.output.find("2 data-parallel ranks"), std::string::npos) << two.output;
  const auto one = run_command("OMP_NUM_THREADS=1 TIDAL_NUM_THREADS=1 " + run + dir + "/one");
  ASSERT_EQ(one.code, 0) << one.output;
  const std::string weights = "/iter_0000004/model.safetensors";
  EXPECT_TRUE(io::read_file(dir + "/two" + weights) == io::read_file(dir + "/one" + weights)) << "the weights differ:\n"
                                                                                              << two.output;
}

// A host whose cable is pulled mid-run: the rank left waiting ends the job after --distributed-timeout-minutes
// (here 3 s) with the message saying what did not complete, and nothing of the job keeps running on either host.
// Open MPI's mpirun then waits for the lost host's daemon until TCP gives up on it; the hosts here give up
// after 4 retransmissions (net.ipv4.tcp_retries2; Linux's default, 15, takes about 15 minutes: docs/distributed.md).
TEST_F(AcrossHosts, AHostWhoseLinkDropsEndsTheJobWithAClearError) {
  for (const char* host : {"-0", "-1"})
    ASSERT_EQ(run_command("ip netns exec " + name_ + host + " sysctl -qw net.ipv4.tcp_retries2=4").code, 0);
  const std::string log = fresh_dir("across_hosts_link") + "/log";
  // The cable is pulled once both ranks train (iteration 2 logged), or after 60 s.
  const auto r = run_command(
      "(" + mpirun() + kTrain + "--train-iters 1000000 --log-interval 1 --distributed-timeout-minutes 0.05 > " + log +
      " 2>&1; echo \"exit $?\" >> " + log + ") & for i in $(seq 600); do grep -q 'iteration  *2/' " + log +
      " 2>/dev/null && { echo 'both ranks train'; break; }; sleep 0.1; done; " + kScripts +
      "netns_hosts.sh link 1 down " + name_ + "; wait; cat " + log);
  run_command(kScripts + "netns_hosts.sh link 1 up " + name_);
  EXPECT_NE(r.output.find("both ranks train"), std::string::npos) << "the run never trained:\n" << r.output;
  EXPECT_NE(r.output.find("did not complete within 0.05 minutes (--distributed-timeout-minutes): another rank is "
                          "stuck, stopped or gone"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("exit 0"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("exit 124"), std::string::npos) << "the job hung:\n" << r.output;
  EXPECT_NE(r.output.find("exit "), std::string::npos) << r.output;
  // No rank outlives the job; the cut-off host's Open MPI daemon ends too, once TCP gives up on mpirun.
  const std::string pids = "$(ip netns pids " + name_ + "-0) $(ip netns pids " + name_ + "-1)";
  EXPECT_EQ(run_command("for p in " + pids + "; do cat /proc/$p/cmdline; done | tr '\\0' ' ' | grep tidal").output, "");
  EXPECT_EQ(
      run_command("for i in $(seq 600); do [ -z \"$(echo " + pids + ")\" ] && exit 0; sleep 0.1; done; exit 1").code, 0)
      << "still running after 60 s: " << run_command("ps -o pid,args -p \"$(echo " + pids + ")\"").output;
}

}  // namespace
}  // namespace tidal
