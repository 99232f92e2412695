// GracefulStop (train/graceful_stop.h): Megatron's --exit-interval (a multiple of N, counted from iteration 0,
// so a resumed run stops at the next multiple) and --exit-duration-in-mins (any rank's clock stops every rank
// after the same iteration).
#include "tidal/train/graceful_stop.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "tests/support/thread_ranks.h"
#include "tidal/dist/single_communicator.h"

namespace tidal::train {
namespace {

using Clock = GracefulStop::Clock;

TEST(GracefulStop, TheIntervalStopsAtEachMultipleButNotAtTheLastIteration) {
  dist::SingleCommunicator one;
  const GracefulStop stop(3, 0, false, Clock::now());
  std::vector<int64_t> stops;
  for (int64_t it = 1; it <= 9; ++it)
    if (stop.after(it, 9, one) == StopReason::interval) stops.push_back(it);
  EXPECT_EQ(stops, (std::vector<int64_t>{3, 6}));  // 9 is the last: the run ends there anyway
  EXPECT_EQ(stop.describe(StopReason::interval, 6, 9), "stopped after iteration 6 of 9 (--exit-interval 3)");
  const GracefulStop off(0, 0, false, Clock::now());
  for (int64_t it = 1; it <= 9; ++it) EXPECT_EQ(off.after(it, 9, one), StopReason::none) << it;
}

TEST(GracefulStop, TheDurationCountsFromTheStart) {
  dist::SingleCommunicator one;
  const GracefulStop fresh(0, 5, false, Clock::now());
  EXPECT_EQ(fresh.after(1, 100, one), StopReason::none);
  const GracefulStop late(4, 5, false, Clock::now() - std::chrono::minutes(6));
  EXPECT_EQ(late.after(1, 100, one), StopReason::duration);
  EXPECT_EQ(late.after(4, 100, one), StopReason::duration);  // both due: the duration is reported
  EXPECT_EQ(late.describe(StopReason::duration, 1, 100),
            "5 minutes have passed: stopped after iteration 1 of 100 (--exit-duration-in-mins 5)");
}

// Each rank reads its own clock (here rank 1 started 6 minutes before rank 0): the decision is all-reduced, so
// rank 0 stops after the same iteration instead of waiting in the next step's collectives for a rank that left.
TEST(GracefulStop, OneRanksClockStopsEveryRank) {
  std::atomic<int> stopped{0};
  testing::run_on_thread_ranks(2, [&](dist::Communicator& comm) {
    const Clock::time_point started = Clock::now() - std::chrono::minutes(comm.rank() == 1 ? 6 : 0);
    const GracefulStop stop(0, 5, false, started);
    if (stop.after(2, 100, comm) == StopReason::duration) ++stopped;
  });
  EXPECT_EQ(stopped.load(), 2);
}

}  // namespace
}  // namespace tidal::train
