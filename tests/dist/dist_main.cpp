// The distributed tests' main: the same binary runs as one process (ctest dist1) and under mpirun
// (dist2, dist3). Only rank 0 prints gtest's progress; every rank's failures still fail the run.
#include <gtest/gtest.h>

#include "tidal/dist/communicator.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tidal::dist::Communicator& world = tidal::dist::world();
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  tidal::dist::finalize();
  return rc;
}
