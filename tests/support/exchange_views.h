#pragma once
// dist::exchange's view handling on three thread ranks (thread_ranks.h), on any device: a view sent to
// two ranks, two messages to one rank matched in order, receives into rows of one tensor. Shared by
// the CPU test and the GPU one (staged through the host there).
#include "tidal/device.h"

namespace tidal::testing {

void expect_exchange_moves_views(Device device);

}  // namespace tidal::testing
