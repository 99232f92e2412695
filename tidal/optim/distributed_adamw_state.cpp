// DistributedAdamW's checkpoint state (distributed_adamw.h): a rank's pieces of a saved state.
#include "tidal/optim/distributed_adamw.h"

namespace tidal::optim {

const ShardLayout& DistributedAdamW::layout() const {
  TIDAL_ASSERT(groups_.size() == 1, "[distributed optimizer] experts' shards have no checkpoint layout");
  return groups_[0].layout;
}

void DistributedAdamW::load_state(AdamW& local, const SavedState& saved) const {
  local.load_state_dict(reshard_state(params_, saved, layout(), comm_.rank(), /*whole_shapes=*/false));
}

}  // namespace tidal::optim
