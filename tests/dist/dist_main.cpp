// The distributed tests' main: the same binary runs as one process (ctest dist1) and under mpirun
// (dist2, dist3). Only rank 0 prints gtest's progress; the other ranks print their failures alone, each line
// naming the rank, and every rank's failures fail the run.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "tidal/dist/communicator.h"

namespace {

// A rank's failed assertions, with the test and the rank named (gtest's printer is off there).
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  // The test's name, kept here: UnitTest::current_test_info() would wait on the lock gtest holds while it reports.
  void OnTestStart(const ::testing::TestInfo& t) override { test_ = std::string(t.test_suite_name()) + "." + t.name(); }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s failed at %s:%d\n%s\n", rank_, test_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tidal::dist::Communicator& world = tidal::dist::world();
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(world.rank()));
  }
  const int rc = RUN_ALL_TESTS();
  tidal::dist::finalize();
  return rc;
}
