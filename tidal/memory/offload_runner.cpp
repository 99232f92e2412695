#include "tidal/memory/offload_runner.h"

namespace tidal::memory {

std::vector<int64_t> offload_blocks(const std::vector<LayerRecompute>& plan, int64_t layers) {
  TIDAL_CHECK(plan.empty() || int64_t(plan.size()) == layers, "[offload] recompute plan has ", plan.size(),
              " layers, the model ", layers);
  std::vector<int64_t> block_of(static_cast<size_t>(layers));
  int64_t blocks = 0;
  for (size_t l = 0; l < block_of.size(); ++l) {
    const bool starts = plan.empty() || !plan[l].full || plan[l].group_start;
    block_of[l] = starts ? blocks++ : block_of[l - 1];
  }
  return block_of;
}

models::LayerRunner offload_layer_runner(Offloader& offloader, const std::vector<LayerRecompute>& plan, int64_t layers,
                                         const OffloadPolicy& policy, models::LayerRunner inner) {
  std::vector<int64_t> block_of = offload_blocks(plan, layers);
  const int64_t blocks = block_of.empty() ? 0 : block_of.back() + 1;
  return [&offloader, block_of = std::move(block_of), blocks, policy, inner = std::move(inner)](
             int64_t index, const models::LayerFn& fn, const std::vector<Tensor>& in) {
    AsyncOffload guard(offloader, {block_of[size_t(index)], blocks, offload_check(policy, in[0])});
    return inner ? inner(index, fn, in) : fn(in);
  };
}

}  // namespace tidal::memory
