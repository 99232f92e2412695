#include "tidal/checkpoint/rank_state.h"

#include <map>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/io/shown_name.h"
#include "tidal/models/moe.h"
#include "tidal/models/peft_adapter.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/shard_layout.h"

namespace tidal::checkpoint {
namespace {

// This rank's pieces of `all` (the model's tensors, or one process's AdamW state_dict), those `mine` says it saves:
// whole tensors, or a slab's rows (expert parallelism's stacked experts, nn/slab.h) as a piece of the whole tensor,
// whose step count the slab at row 0 saves.
std::vector<optim::TensorPiece> pieces_of(const std::map<std::string, Tensor>& all,
                                          const std::function<bool(const std::string&)>& mine,
                                          const std::map<std::string, nn::Slab>& slabs) {
  std::vector<optim::TensorPiece> out;
  for (const auto& [name, t] : all) {
    if (!mine(name)) continue;
    const nn::Slab* slab = nn::slab_of(slabs, name);
    if (slab == nullptr || name.ends_with(".step")) {
      if (slab == nullptr || slab->row == 0) out.push_back({name, t.shape(), 0, t});
    } else {
      out.push_back({name, slab->whole, slab->begin(), t});
    }
  }
  return out;
}

// A sharded checkpoint's record of the parameters against this rank's (in order; under expert
// parallelism this rank's are the dense ones and its experts, among the record's).
void check_saved_parameters(const Checkpoint& ck, const optim::NamedParameters& params,
                            const std::map<std::string, nn::Slab>& slabs) {
  const std::string where = "[checkpoint] " + ck.path + "/state.json field 'optimizer_shards.parameters'";
  const auto& saved = ck.shards.parameters;
  auto numel = [&](const std::string& name, const Tensor& p) {  // a slab's: its whole tensor's
    const nn::Slab* slab = nn::slab_of(slabs, name);
    return slab != nullptr ? slab->whole.numel() : p.numel();
  };
  TIDAL_CHECK(saved.size() >= params.size(), where, " lists ", saved.size(), " parameters, this model has ",
              params.size(), ": use the same model flags as the run that saved it");
  if (saved.size() == params.size()) {
    for (size_t i = 0; i < saved.size(); ++i)
      TIDAL_CHECK(saved[i].first == params[i].first && saved[i].second == numel(params[i].first, params[i].second),
                  where, " names ", io::shown_name(saved[i].first), " of ", saved[i].second, " elements as parameter ",
                  i, ", this model has '", params[i].first, "' of ", numel(params[i].first, params[i].second),
                  ": use the same model flags as the run that saved it");
    return;
  }
  std::map<std::string, int64_t> numels;
  for (const auto& [name, n] : saved) numels.emplace(name, n);
  for (const auto& [name, p] : params) {
    auto it = numels.find(name);
    TIDAL_CHECK(it != numels.end() && it->second == numel(name, p), where, " has no parameter '", name, "' of ",
                numel(name, p), " elements (this model's): use the same model flags as the run that saved it");
  }
}

}  // namespace

RankState::RankState(models::CausalLM& model, optim::AdamW& optimizer, const optim::DistributedAdamW* sharded,
                     const parallel::ParallelGroups& groups, nlohmann::json adapter_config)
    : model_(model),
      optimizer_(optimizer),
      sharded_(sharded),
      groups_(groups),
      adapter_config_(std::move(adapter_config)) {}

bool RankState::saves(const std::string& name) const {
  const int rank = groups_.world().rank();
  if (groups_.experts() && models::is_expert_parameter(name)) return rank < groups_.layout().expert;
  return rank == 0;
}

CheckpointFiles RankState::files() const {
  const auto mine = [this](const std::string& name) { return saves(name); };
  // A LoRA run: the base model's file as a Hugging Face directory has it, the adapters in PEFT's.
  std::map<std::string, Tensor> base, adapters;
  for (auto& [name, t] : model_.state_dict()) {
    if (nn::is_lora_parameter(name))
      adapters.emplace(models::peft_name(name), t);
    else
      base.emplace(name, t);
  }
  TIDAL_ASSERT(adapters.empty() == adapter_config_.is_null(), "adapters without their config, or the reverse");
  const std::map<std::string, nn::Slab> slabs = model_.named_slabs();
  std::vector<optim::TensorPiece> model = pieces_of(base, mine, slabs);
  const int rank = groups_.world().rank();
  CheckpointFiles c;
  if (sharded_ == nullptr) {
    c = one_process_files(std::move(model), pieces_of(optimizer_.state_dict(), mine, slabs));
  } else if (groups_.experts()) {  // two shard layouts: one process's file, assembled from every rank's pieces
    c = one_process_files(std::move(model), sharded_->state_pieces(optimizer_.state_dict(), rank == 0));
  } else {
    OptimizerShards shards{groups_.world().size(), optim::kGradNormChunk, {}};
    for (const auto& [name, p] : sharded_->parameters()) shards.parameters.emplace_back(name, p.numel());
    TIDAL_ASSERT(shards.layout().bounds == sharded_->layout().bounds, "the checkpoint's layout is not the optimizer's");
    c = sharded_files(std::move(model), optimizer_.state_dict(), shards, rank);
  }
  if (!adapters.empty()) {
    const auto mine_peft = [&](const std::string& peft) { return saves(models::name_from_peft(peft)); };
    c.files.insert(c.files.begin() + 1,
                   FilePieces{models::kAdapterWeightsFile, 0, {{"format", "pt"}}, pieces_of(adapters, mine_peft, {})});
    c.texts[models::kAdapterConfigFile] = adapter_config_.dump(2) + "\n";
  }
  return c;
}

std::function<bool(const std::string&)> RankState::holds() const {
  if (!groups_.experts()) return nullptr;
  std::vector<std::string> names;
  for (const auto& [name, p] : model_.named_parameters()) names.push_back(name);
  return models::held_here(names);
}

io::SelectRows RankState::rows() const { return nn::slab_rows(model_); }

void RankState::load(const Checkpoint& ck) const {
  // A ZeRO-3 model built without its values (nn/deferred_init.h) gets its bytes to load into.
  for (const auto& [name, p] : model_.named_parameters()) p.storage()->rematerialize();
  const bool lora = !adapter_config_.is_null();
  TIDAL_CHECK(lora || !ck.lora, "[checkpoint] ", ck.path,
              " is a LoRA run's (it holds adapter_model.safetensors): resume it with the same --lora-* flags, or ",
              "fold the adapters in with tidal export --merge-lora and train that");
  TIDAL_CHECK(!lora || ck.lora, "[checkpoint] ", ck.path,
              " was saved without LoRA: to fine-tune it with LoRA, start from it with --pretrained ", ck.path,
              " (a checkpoint directory is a Hugging Face model directory) instead of --load");
  const models::ModelConfig& c = model_.config();
  const int64_t depths = mtp_depths_held(ck.model, c.num_hidden_layers);
  TIDAL_CHECK(depths == c.mtp_num_layers || !c.is_deepseek_v3(), "[checkpoint] ", ck.path, " holds ", depths,
              " multi-token-prediction depths and this run builds ", c.mtp_num_layers,
              ": resume it with --mtp-num-layers ", depths,
              depths > 0 ? " (or start a run without them from it with --pretrained, which skips them)" : "");
  model_.load_state_dict(ck.model);
  // The optimizer's: the trained parameters (with LoRA, the adapters).
  const optim::NamedParameters params = model_.named_trainable_parameters();
  // Expert parallel's slabs: one process's file was read at this rank's rows (rows()), so its entries are this rank's
  // parameters' as they are; the distributed optimizer's shard files hold flat pieces of the whole tensors.
  const std::map<std::string, nn::Slab> slabs = model_.named_slabs();
  const bool one_process = ck.shards.ranks == 0;
  optim::SavedState saved;
  if (one_process) {  // one process's file: its entries are this rank's parameters' (holds(), rows())
    std::vector<int64_t> numels;
    for (const auto& [name, p] : params) {
      numels.push_back(p.numel());
      saved.parameters.emplace_back(name, numels.back());
    }
    saved.layout = optim::make_shard_layout(numels, 1, 1);
    saved.read = [&](int) { return ck.optimizer; };
    saved.source = [&](int) { return "[checkpoint] " + ck.path + "/optimizer.safetensors"; };
  } else {
    check_saved_parameters(ck, params, slabs);
    saved.parameters = ck.shards.parameters;
    saved.layout = ck.shards.layout();
    saved.read = [&](int r) { return load_optimizer_shard(ck, r); };
    saved.source = [&](int r) { return "[checkpoint] " + ck.path + "/" + optimizer_shard_file(r, ck.shards.ranks); };
  }
  // The targets in the saved tensors' coordinates: a slab's at its first element in the whole tensor, or within
  // the rows read.
  std::vector<optim::StateTarget> targets;
  if (sharded_ != nullptr) {
    targets = sharded_->state_targets();
    if (one_process)
      for (optim::StateTarget& t : targets)
        if (const nn::Slab* slab = nn::slab_of(slabs, t.param)) t.begin -= slab->begin();
  } else {
    for (const auto& [name, p] : params) {
      const nn::Slab* slab = nn::slab_of(slabs, name);
      targets.push_back({name, slab != nullptr && !one_process ? slab->begin() : 0, p.numel(), name, p.shape()});
    }
  }
  // One process's file into one process's optimizer: the saved tensors as they are (no copy).
  optimizer_.load_state_dict(optim::assemble_state(saved, targets, one_process && sharded_ == nullptr));
}

}  // namespace tidal::checkpoint
