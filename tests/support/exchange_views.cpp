#include "tests/support/exchange_views.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/support/thread_ranks.h"
#include "tidal/dist/collectives.h"
#include "tidal/tensor.h"

namespace tidal::testing {

void expect_exchange_moves_views(Device device) {
  std::vector<std::vector<double>> got(3);
  run_on_thread_ranks(3, [&](dist::Communicator& comm) {
    const int me = comm.rank();
    std::vector<double> v(10);
    for (size_t i = 0; i < v.size(); ++i) v[i] = 100.0 * me + double(i);
    const Tensor mine = from_vector(v, {10}, DType::f32, device);
    const Tensor piece = mine.narrow(0, 2, 5);  // one view for both peers
    const Tensor in = zeros({3, 6}, DType::f32, device);
    std::vector<dist::TensorTransfer> sends, receives;
    for (int r = 0; r < 3; ++r) {
      if (r == me) continue;
      sends.push_back({r, piece});
      sends.push_back({r, mine.narrow(0, 9, 1)});  // a second message to the same rank, matched after
      receives.push_back({r, in.select(0, r).narrow(0, 0, 5)});
      receives.push_back({r, in.select(0, r).narrow(0, 5, 1)});
    }
    dist::exchange(comm, sends, receives);
    got[size_t(me)] = in.to_vector<double>();
  });
  for (int me = 0; me < 3; ++me)
    for (int r = 0; r < 3; ++r) {
      std::vector<double> want(6, 0.0);
      if (r != me) want = {100.0 * r + 2, 100.0 * r + 3, 100.0 * r + 4, 100.0 * r + 5, 100.0 * r + 6, 100.0 * r + 9};
      const std::vector<double> row(got[size_t(me)].begin() + 6 * r, got[size_t(me)].begin() + 6 * (r + 1));
      EXPECT_EQ(row, want) << "rank " << me << " from rank " << r;
    }
}

}  // namespace tidal::testing
