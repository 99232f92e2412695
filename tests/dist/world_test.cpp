// The tests that need N ranks skip on any other number, so a launch whose processes did not join one
// world (each a world of one) would pass them all, silently. This one fails instead: under mpirun the
// world has the ranks the launcher says it started. Its name ends in OnFourRanks so that ctest dist4,
// which runs only such tests, runs it too; dist1-3 run it as well.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tidal/dist/communicator.h"

namespace tidal::dist {
namespace {

TEST(World, HasTheRanksTheLauncherStartedOnFourRanks) {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (size == nullptr) {
    EXPECT_FALSE(launched_by_mpi_launcher());
    EXPECT_EQ(world().size(), 1);
    return;
  }
  EXPECT_TRUE(launched_by_mpi_launcher());
  EXPECT_EQ(world().size(), std::stoi(size));
  if (std::stoi(size) > 1) {
    EXPECT_STREQ(world().backend(), "mpi");
  }
}

}  // namespace
}  // namespace tidal::dist
