#include "tidal/dist/communicator.h"

#include <atomic>

#include "tidal/base/error.h"

namespace tidal::dist {
namespace {
std::atomic<double> timeout_seconds{0.0};
}  // namespace

void set_collective_timeout(double seconds) { timeout_seconds = seconds > 0 ? seconds : 0.0; }
double collective_timeout() { return timeout_seconds; }

int check_subgroup(const std::vector<int>& members, int rank, int size) {
  TIDAL_CHECK(!members.empty(), "[dist] a group of no ranks");
  int index = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    const int m = members[i];
    TIDAL_CHECK(m >= 0 && m < size, "[dist] a group names rank ", m, " of a communicator of ", size, " ranks");
    TIDAL_CHECK(i == 0 || members[i - 1] < m, "[dist] a group's ranks must ascend without repeats, got ", m, " after ",
                i == 0 ? 0 : members[i - 1]);
    if (m == rank) index = int(i);
  }
  TIDAL_CHECK(index >= 0, "[dist] rank ", rank, " calls for a group it is not in (from rank ", members.front(), ", ",
              members.size(), " ranks)");
  return index;
}

}  // namespace tidal::dist
