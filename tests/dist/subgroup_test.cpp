// Communicator::subgroup on however many ranks this runs on (1, 2, 3 under mpirun): contiguous and
// strided groups (Megatron's expert-parallel and expert-data-parallel layouts) move bytes among
// their members only, and a list that is not a group is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/dist/communicator.h"
#include "tidal/dist/meta_communicator.h"

namespace tidal::dist {
namespace {

// Every member gathers every member's world rank; the result is the members, in order.
void expect_group_gathers_its_members(Communicator& group, const std::vector<int>& members) {
  const int mine = world().rank();
  std::vector<int> got(members.size(), -1);
  group.all_gather(&mine, got.data(), sizeof(int));
  EXPECT_EQ(got, members);
  EXPECT_EQ(group.size(), int(members.size()));
  EXPECT_EQ(group.rank(), int(std::find(members.begin(), members.end(), mine) - members.begin()));
}

TEST(Subgroup, ContiguousAndStridedGroupsPartitionTheRanks) {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  // Contiguous pairs (the last group shorter when n is odd): {0,1}, {2,3}, ...
  std::vector<int> pair;
  for (int m = r - r % 2; m < std::min(n, r - r % 2 + 2); ++m) pair.push_back(m);
  expect_group_gathers_its_members(*comm.subgroup(pair), pair);
  // Strided: the ranks of the same parity.
  std::vector<int> parity;
  for (int m = r % 2; m < n; m += 2) parity.push_back(m);
  expect_group_gathers_its_members(*comm.subgroup(parity), parity);
  // Every rank alone, and all of them.
  expect_group_gathers_its_members(*comm.subgroup({r}), {r});
  std::vector<int> all(size_t(n), 0);
  std::iota(all.begin(), all.end(), 0);
  expect_group_gathers_its_members(*comm.subgroup(all), all);
}

// On four ranks: {0,1} {2,3} and {0,2} {1,3} at once, as expert-parallel groups and the
// expert-data-parallel groups across them.
TEST(Subgroup, PairsAndStridesOnFourRanks) {
  Communicator& comm = world();
  if (comm.size() != 4) GTEST_SKIP() << "runs on four ranks (ctest dist4)";
  const int r = comm.rank();
  const std::vector<int> pair = {r - r % 2, r - r % 2 + 1}, stride = {r % 2, r % 2 + 2};
  std::unique_ptr<Communicator> a = comm.subgroup(pair), b = comm.subgroup(stride);
  expect_group_gathers_its_members(*a, pair);
  expect_group_gathers_its_members(*b, stride);
}

TEST(Subgroup, ExchangesStayInsideTheGroup) {
  Communicator& comm = world();
  const int n = comm.size(), r = comm.rank();
  std::vector<int> parity;
  for (int m = r % 2; m < n; m += 2) parity.push_back(m);
  std::unique_ptr<Communicator> g = comm.subgroup(parity);
  // A ring inside the group: send this world rank to the next member, receive the previous one's.
  if (g->size() < 2) return;
  int send = r, recv = -1;
  const int next = (g->rank() + 1) % g->size(), prev = (g->rank() + g->size() - 1) % g->size();
  g->exchange({{next, &send, sizeof(int)}}, {{prev, &recv, sizeof(int)}});
  EXPECT_EQ(recv, parity[size_t(prev)]);
}

TEST(Subgroup, AListThatIsNotAGroupIsRefused) {
  Communicator& comm = world();
  const int r = comm.rank(), n = comm.size();
  auto message = [&](const std::vector<int>& members) {
    try {
      comm.subgroup(members);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({}).find("a group of no ranks"), std::string::npos);
  EXPECT_NE(message({n}).find("names rank " + std::to_string(n) + " of a communicator of"), std::string::npos);
  EXPECT_NE(message({r, r}).find("must ascend without repeats"), std::string::npos);
  if (n > 1) {
    EXPECT_NE(message({(r + 1) % n}).find("calls for a group it is not in"), std::string::npos);
  }
}

TEST(Subgroup, ADryRunsRankPlaysItsIndexInTheGroup) {
  MetaCommunicator meta(5, 8);
  std::unique_ptr<Communicator> g = meta.subgroup({1, 3, 5, 7});
  EXPECT_EQ(g->rank(), 2);
  EXPECT_EQ(g->size(), 4);
  EXPECT_STREQ(g->backend(), "meta");
}

}  // namespace
}  // namespace tidal::dist
