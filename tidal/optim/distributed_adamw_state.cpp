// DistributedAdamW's checkpoint state (distributed_adamw.h): a rank's pieces of a saved state.
#include "tidal/optim/distributed_adamw.h"

namespace tidal::optim {
namespace {

const char* const kStates[] = {".exp_avg", ".exp_avg_sq", ".master"};  // .master: bf16 parameters only

}  // namespace

const ShardLayout& DistributedAdamW::layout() const {
  TIDAL_ASSERT(groups_.size() == 1, "[distributed optimizer] experts' shards have no checkpoint layout");
  return groups_[0].layout;
}

std::vector<TensorPiece> DistributedAdamW::state_pieces(const std::map<std::string, Tensor>& state,
                                                        bool with_step) const {
  std::vector<TensorPiece> out;
  size_t k = 0;  // shard parameter
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const ShardLayout::Fragment& f : fragments(g, groups_[g].comm->rank())) {
      const std::string& piece = shard_params_[k++].first;
      const auto& [name, p] = params_[f.param];
      // A slab (nn/slab.h): its rows are a piece of the whole tensor, whose first rows' holder saves the step count.
      const nn::Slab* slab = nn::slab_of(slabs_, name);
      const int64_t at = slab != nullptr ? slab->begin() : 0;
      for (const char* suffix : kStates) {
        auto it = state.find(piece + suffix);
        if (it != state.end())
          out.push_back({name + suffix, slab != nullptr ? slab->whole : p.shape(), at + f.begin, it->second});
      }
      auto step = state.find(piece + ".step");
      if (step != state.end() && at + f.begin == 0)
        out.push_back({name + ".step", step->second.shape(), 0, step->second});
    }
  if (with_step) out.push_back({"step", state.at("step").shape(), 0, state.at("step")});
  return out;
}

std::vector<StateTarget> DistributedAdamW::state_targets() const {
  std::vector<StateTarget> out;
  size_t k = 0;  // shard parameter
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const ShardLayout::Fragment& f : fragments(g, groups_[g].comm->rank())) {
      const nn::Slab* slab = nn::slab_of(slabs_, params_[f.param].first);  // rows of a whole tensor
      const int64_t at = slab != nullptr ? slab->begin() : 0;
      out.push_back({params_[f.param].first, at + f.begin, f.length, shard_params_[k++].first, Shape{f.length}});
    }
  return out;
}

}  // namespace tidal::optim
