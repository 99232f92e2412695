// `tidal plan --calibrate` under mpirun: every rank calls calibrate(); the all-reduce is measured
// across the ranks (structure only, never the figures); on one rank it stays 0, not measured.
#include <gtest/gtest.h>

#include "tidal/dist/communicator.h"
#include "tidal/plan/calibrate.h"

namespace tidal::train {
namespace {

TEST(DistCalibrate, TheAllReduceIsMeasuredAcrossRanks) {
  const int ranks = dist::world().size();
  plan::CalibrateOptions o;
  o.quick = true;
  const plan::DeviceProfile p = plan::calibrate(o);
  plan::check_device_profile(p, "calibrated");
  if (ranks == 1) {
    EXPECT_EQ(p.collective_bandwidth, 0);
    EXPECT_EQ(p.collective_latency_s, 0);
    EXPECT_EQ(p.name.find(" ranks"), std::string::npos) << p.name;
  } else {
    EXPECT_GT(p.collective_bandwidth, 0);
    EXPECT_GT(p.collective_latency_s, 0);
    EXPECT_NE(p.name.find(", " + std::to_string(ranks) + " ranks"), std::string::npos) << p.name;
  }
}

}  // namespace
}  // namespace tidal::train
