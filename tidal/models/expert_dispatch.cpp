#include "tidal/models/expert_dispatch.h"

#include <utility>

#include "tidal/base/error.h"
#include "tidal/ops/all_to_all.h"
#include "tidal/ops/index.h"

namespace tidal::models {

Tensor run_on_owners(dist::Communicator& group, const Tensor& rows, const std::vector<int64_t>& counts,
                     const RunLocalExperts& run) {
  const size_t ranks = size_t(group.size());
  TIDAL_ASSERT(!counts.empty() && counts.size() % ranks == 0, counts.size(), " experts over ", ranks, " ranks");
  const size_t local = counts.size() / ranks;
  // Rows to each rank (its block of experts: the rows are sorted by expert, so by owner), and the rows
  // of this rank's experts from each rank ([source][local expert]: every rank sends its counts).
  std::vector<int64_t> send(ranks, 0), from(ranks * local, 0), recv(ranks, 0);
  for (size_t e = 0; e < counts.size(); ++e) send[e / local] += counts[e];
  group.all_to_all(counts.data(), from.data(), int64_t(local * sizeof(int64_t)));
  for (size_t s = 0; s < ranks; ++s)
    for (size_t l = 0; l < local; ++l) recv[s] += from[s * local + l];
  Tensor got = all_to_all_rows(group, rows, send, recv);  // (R, C) by source
  Tensor back = got;  // no rows for this rank's experts: nothing to run, the return still exchanges
  if (got.size(0) > 0) {
    // Grouped by local expert (each expert's rows from every source, in source order), then back in the
    // order they came.
    std::vector<int64_t> order(size_t(got.size(0))), inverse(size_t(got.size(0)));
    if (!got.is_meta()) {  // the meta device reads only the indices' shapes (a dry run's MoE layer: 10^5 rows)
      std::vector<int64_t> start(ranks * local);
      int64_t at = 0;
      for (size_t i = 0; i < start.size(); ++i) start[i] = std::exchange(at, at + from[i]);
      size_t next = 0;
      for (size_t l = 0; l < local; ++l)
        for (size_t s = 0; s < ranks; ++s)
          for (int64_t i = 0; i < from[s * local + l]; ++i) order[next++] = start[s * local + l] + i;
      for (size_t i = 0; i < order.size(); ++i) inverse[size_t(order[i])] = int64_t(i);
    }
    const Shape n{got.size(0)};
    Tensor grouped = index_select(got, 0, from_vector_i64(order, n, got.device()));
    std::vector<int64_t> mine(local, 0);  // rows per local expert
    for (size_t l = 0; l < local; ++l)
      for (size_t s = 0; s < ranks; ++s) mine[l] += from[s * local + l];
    back = index_select(run(grouped, mine), 0, from_vector_i64(inverse, n, got.device()));
  }
  return all_to_all_rows(group, back, recv, send);  // (M, C') in rows' order
}

}  // namespace tidal::models
