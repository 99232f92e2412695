#include "tidal/parallel/data.h"

#include "tidal/base/error.h"
#include "tidal/dist/collectives.h"
#include "tidal/memory_scope.h"

namespace tidal::parallel {

int64_t micro_batches_per_rank(int64_t global_batch, int64_t micro_batch, int ranks) {
  TIDAL_CHECK(global_batch % (micro_batch * ranks) == 0, "tidal train: --global-batch-size ", global_batch,
              " is not a multiple of --micro-batch-size ", micro_batch, " x ", ranks,
              " data-parallel ranks: the global batch is micro-batch x accumulation steps x ranks");
  return global_batch / (micro_batch * ranks);
}

data::Batch next_rank_batch(data::DataLoader& loader, int64_t micro_batch, int rank, int ranks) {
  const int64_t start = loader.position();
  loader.set_position(start + int64_t(rank) * micro_batch);
  data::Batch b = loader.next(micro_batch);
  loader.set_position(start + int64_t(ranks) * micro_batch);
  return b;
}

void all_reduce_gradients(dist::Communicator& comm, const std::vector<std::pair<std::string, Tensor>>& params) {
  if (comm.size() == 1) return;
  // A parameter takes part when any rank has a gradient for it.
  std::string have(params.size(), '\0');
  for (size_t i = 0; i < params.size(); ++i) have[i] = params[i].second.grad().defined() ? 1 : 0;
  have = dist::any_rank(comm, have);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!have[i]) continue;
    const Tensor& p = params[i].second;
    if (!p.grad().defined()) {
      MemoryScope scope(MemoryCategory::gradient);
      p.set_grad(zeros_like(p));
    }
    dist::all_reduce_sum(comm, p.grad());
  }
}

}  // namespace tidal::parallel
