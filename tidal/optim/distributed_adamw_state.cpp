// DistributedAdamW's checkpoint state (distributed_adamw.h): a rank's pieces of a saved state.
#include "tidal/optim/distributed_adamw.h"

namespace tidal::optim {
namespace {

const char* const kStates[] = {".exp_avg", ".exp_avg_sq", ".master"};  // .master: bf16 parameters only

// The parameter a state entry belongs to: "<name>" of "<name>.exp_avg"; "" for the step count "step".
std::string owner_of(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? std::string() : key.substr(0, dot);
}

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
      for (const char* suffix : kStates) {
        auto it = state.find(piece + suffix);
        if (it != state.end()) out.push_back({name + suffix, p.shape(), f.begin, it->second});
      }
      auto step = state.find(piece + ".step");
      if (step != state.end() && f.begin == 0) out.push_back({name + ".step", step->second.shape(), 0, step->second});
    }
  if (with_step) out.push_back({"step", state.at("step").shape(), 0, state.at("step")});
  return out;
}

void DistributedAdamW::load_state(AdamW& local, const SavedState& saved) const {
  if (groups_.size() == 1) {
    local.load_state_dict(reshard_state(params_, saved, layout(), comm_.rank(), /*whole_shapes=*/false));
    return;
  }
  // Expert parallel: one process's state (what this rank holds of it), read once; each group's pieces
  // out of the entries of its parameters (an entry of no parameter goes to the dense group, which
  // refuses it).
  TIDAL_ASSERT(saved.layout.ranks() == 1, "[distributed optimizer] experts' shards load one process's state only");
  const std::map<std::string, Tensor> whole = saved.read(0);
  std::map<std::string, size_t> group_of_name;
  for (size_t i = 0; i < params_.size(); ++i) group_of_name[params_[i].first] = group_of_[i];
  std::map<std::string, Tensor> state;
  for (size_t g = 0; g < groups_.size(); ++g) {
    NamedParameters params;
    std::vector<int64_t> numels;
    for (size_t i : groups_[g].params) {
      params.push_back(params_[i]);
      numels.push_back(params_[i].second.numel());
    }
    SavedState part;
    part.layout = make_shard_layout(numels, 1, 1);
    part.source = saved.source;
    part.read = [&](int) {
      std::map<std::string, Tensor> mine;
      for (const auto& [key, t] : whole) {
        auto it = group_of_name.find(owner_of(key));
        if (key == "step" || (it != group_of_name.end() ? it->second == g : g == 0)) mine.emplace(key, t);
      }
      return mine;
    };
    for (auto& [key, t] : reshard_state(params, part, groups_[g].layout, groups_[g].comm->rank(), false))
      state[key] = t;
  }
  local.load_state_dict(state);
}

}  // namespace tidal::optim
