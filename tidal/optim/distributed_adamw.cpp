#include "tidal/optim/distributed_adamw.h"

#include <cmath>
#include <cstring>
#include <map>

#include "tidal/autograd/grad_mode.h"
#include "tidal/memory_scope.h"
#include "tidal/optim/grad_clip.h"

namespace tidal::optim {

DistributedAdamW::DistributedAdamW(const NamedParameters& params, dist::Communicator& comm)
    : comm_(comm), params_(params) {
  TIDAL_CHECK(!params.empty(), "[distributed optimizer] no parameters");
  const Tensor& first = params.front().second;
  std::vector<int64_t> numels;
  for (const auto& [name, p] : params) {
    TIDAL_CHECK(p.dtype() == first.dtype() && p.device() == first.device() && p.is_contiguous(),
                "[distributed optimizer] parameter '", name, "' is ", p.dtype(), " on ", p.device(),
                ": every parameter must be contiguous and share one dtype and device");
    numels.push_back(p.numel());
  }
  layout_ = make_shard_layout(numels, comm.size(), kGradNormChunk);
  {
    MemoryScope scope(MemoryCategory::gradient);
    grad_buffer_ = zeros({layout_.total()}, first.dtype(), first.device());
  }
  for (int r = 0; r < comm.size(); ++r) {
    pieces_.emplace_back();
    for (const ShardLayout::Fragment& f : layout_.fragments(r)) {
      const auto& [name, p] = params[f.param];
      Tensor piece = p.detach().view({p.numel()}).narrow(0, f.begin, f.length);  // (length)
      if (!p.is_meta()) pieces_.back().emplace_back(piece.raw_data(), f.length * p.itemsize());
      if (r != comm.rank()) continue;
      const bool whole = f.begin == 0 && f.length == p.numel();
      shard_params_.emplace_back(
          whole ? name : name + "[" + std::to_string(f.begin) + ":" + std::to_string(f.begin + f.length) + "]", piece);
      shard_names_of_.push_back(name);
    }
  }
}

DecayRule DistributedAdamW::decay_rule() const {
  std::map<std::string, bool> decays;
  for (size_t i = 0; i < shard_params_.size(); ++i) {
    const std::string& whole = shard_names_of_[i];
    for (const auto& [name, p] : params_)
      if (name == whole) decays[shard_params_[i].first] = default_weight_decay(name, p);
  }
  return [decays](const std::string& name, const Tensor&) { return decays.at(name); };
}

void DistributedAdamW::begin_step() {
  NoGradGuard no_grad;
  grad_buffer_.zero_();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    p.set_grad(grad_buffer_.narrow(0, layout_.offsets[i], p.numel()).view(p.shape()));
  }
  const std::vector<ShardLayout::Fragment> frags = layout_.fragments(comm_.rank());
  for (size_t i = 0; i < frags.size(); ++i)
    shard_params_[i].second.set_grad(
        grad_buffer_.narrow(0, layout_.offsets[frags[i].param] + frags[i].begin, frags[i].length));
}

double DistributedAdamW::reduce_gradients() {
  NoGradGuard no_grad;
  const int ranks = comm_.size(), me = comm_.rank();
  const int64_t mine = layout_.shard_size(me), itemsize = grad_buffer_.itemsize();
  Tensor shard = grad_buffer_.narrow(0, layout_.shard_begin(me), mine);
  if (ranks > 1) {
    MemoryScope scope(MemoryCategory::temporary);
    Tensor blocks = empty({ranks, mine}, grad_buffer_.dtype(), grad_buffer_.device());  // every rank's piece of mine
    blocks.select(0, me).copy_(shard);
    if (!blocks.is_meta()) {  // every rank's piece of my shard, and my piece of theirs
      std::vector<dist::Communicator::Transfer> sends, receives;
      auto* grads = static_cast<char*>(grad_buffer_.raw_data());
      auto* into = static_cast<char*>(blocks.raw_data());
      for (int r = 0; r < ranks; ++r) {
        if (r == me) continue;
        receives.push_back({r, into + int64_t(r) * mine * itemsize, mine * itemsize});
        sends.push_back({r, grads + layout_.shard_begin(r) * itemsize, layout_.shard_size(r) * itemsize});
      }
      comm_.exchange(sends, receives);
    }
    shard.copy_(blocks.select(0, 0));
    for (int r = 1; r < ranks; ++r) shard.add_(blocks.select(0, r));
  }
  // Chunk sums of this shard's pieces; every rank's, in rank order, rebuild each gradient's chunks.
  std::string mine_chunks;
  for (const ShardLayout::Fragment& f : layout_.fragments(me)) {
    const std::vector<double> c =
        sum_of_squares_chunks(grad_buffer_.narrow(0, layout_.offsets[f.param] + f.begin, f.length));
    const int64_t header[2] = {int64_t(f.param), int64_t(c.size())};
    mine_chunks.append(reinterpret_cast<const char*>(header), sizeof header);
    mine_chunks.append(reinterpret_cast<const char*>(c.data()), c.size() * sizeof(double));
  }
  if (grad_buffer_.is_meta()) return 0;
  std::vector<std::vector<double>> per_gradient(params_.size());
  for (const std::string& bytes : dist::all_gather_strings(comm_, mine_chunks)) {
    for (size_t at = 0; at < bytes.size();) {
      int64_t header[2];
      std::memcpy(header, bytes.data() + at, sizeof header);
      at += sizeof header;
      std::vector<double>& dst = per_gradient[size_t(header[0])];
      const size_t old = dst.size();
      dst.resize(old + size_t(header[1]));
      std::memcpy(dst.data() + old, bytes.data() + at, size_t(header[1]) * sizeof(double));
      at += size_t(header[1]) * sizeof(double);
    }
  }
  return norm_from_chunks(per_gradient);
}

void DistributedAdamW::all_gather_parameters() {
  if (comm_.size() == 1 || grad_buffer_.is_meta()) return;
  std::vector<dist::Communicator::Transfer> sends, receives;
  const int me = comm_.rank();
  for (int r = 0; r < comm_.size(); ++r) {
    if (r == me) continue;
    for (const auto& [data, bytes] : pieces_[size_t(me)]) sends.push_back({r, data, bytes});
    for (const auto& [data, bytes] : pieces_[size_t(r)]) receives.push_back({r, data, bytes});
  }
  comm_.exchange(sends, receives);
}

namespace {

const char* const kMoments[] = {".exp_avg", ".exp_avg_sq", ".master"};

}  // namespace

std::map<std::string, Tensor> DistributedAdamW::gather_state_dict(const AdamW& local) {
  const std::map<std::string, Tensor> mine = local.state_dict();
  // Every shard parameter's update count, so rank 0 knows which pieces carry moments.
  std::vector<int64_t> counts;
  for (const auto& [name, piece] : shard_params_) counts.push_back(local.param_steps(name));
  const std::string bytes(reinterpret_cast<const char*>(counts.data()), counts.size() * sizeof(int64_t));
  const std::vector<std::string> all_counts = dist::all_gather_strings(comm_, bytes);
  const int me = comm_.rank();
  std::map<std::string, Tensor> whole;
  std::vector<dist::Communicator::Transfer> sends, receives;
  MemoryScope scope(MemoryCategory::temporary);
  for (int r = 0; r < comm_.size(); ++r) {
    const std::vector<ShardLayout::Fragment> frags = layout_.fragments(r);
    for (size_t k = 0; k < frags.size(); ++k) {
      int64_t steps = 0;
      std::memcpy(&steps, all_counts[size_t(r)].data() + k * sizeof(int64_t), sizeof steps);
      if (steps == 0) continue;
      const auto& [name, p] = params_[frags[k].param];
      const std::string& piece_name = r == me ? shard_params_[k].first : std::string();
      for (const char* moment : kMoments) {
        if (moment == kMoments[2] && p.dtype() != DType::bf16) continue;  // master copies: bf16 only
        if (me == 0) {
          auto [it, fresh] = whole.try_emplace(name + moment);
          if (fresh) it->second = zeros(p.shape(), p.dtype() == DType::f64 ? DType::f64 : DType::f32, p.device());
          Tensor dst = it->second.view({p.numel()}).narrow(0, frags[k].begin, frags[k].length);
          if (r == 0)
            dst.copy_(mine.at(piece_name + moment));
          else if (!dst.is_meta())
            receives.push_back({r, dst.raw_data(), dst.nbytes()});
          whole[name + ".step"] = from_vector_i64({steps}, Shape{});
        } else if (r == me && !p.is_meta()) {
          const Tensor& src = mine.at(piece_name + moment);
          sends.push_back({0, src.raw_data(), src.nbytes()});
        }
      }
    }
  }
  if (comm_.size() > 1) comm_.exchange(sends, receives);
  if (me == 0) whole["step"] = from_vector_i64({local.steps()}, Shape{});
  return whole;
}

void DistributedAdamW::load_whole_state_dict(AdamW& local, const std::map<std::string, Tensor>& whole) const {
  std::map<std::string, Tensor> mine;
  const std::vector<ShardLayout::Fragment> frags = layout_.fragments(comm_.rank());
  for (size_t k = 0; k < frags.size(); ++k) {
    const std::string& name = params_[frags[k].param].first;
    const std::string& piece = shard_params_[k].first;
    for (const char* suffix : {".exp_avg", ".exp_avg_sq", ".master"}) {
      auto it = whole.find(name + suffix);
      if (it == whole.end()) continue;
      TIDAL_CHECK(it->second.numel() == params_[frags[k].param].second.numel(), "[distributed optimizer] '",
                  name + suffix, "' has ", it->second.numel(), " elements, the parameter ",
                  params_[frags[k].param].second.numel());
      mine[piece + suffix] =
          it->second.contiguous().view({it->second.numel()}).narrow(0, frags[k].begin, frags[k].length);
    }
    if (auto it = whole.find(name + ".step"); it != whole.end()) mine[piece + ".step"] = it->second;
  }
  if (auto it = whole.find("step"); it != whole.end()) mine["step"] = it->second;
  local.load_state_dict(mine);
}

void DistributedAdamW::update(double lr, double max_norm, double norm, AdamW& local) {
  NoGradGuard no_grad;
  const double coef = clip_coefficient(norm, max_norm);
  if (coef != 1.0) grad_buffer_.narrow(0, layout_.shard_begin(comm_.rank()), shard_elements()).mul_(coef);
  local.step(lr);
  all_gather_parameters();
}

}  // namespace tidal::optim
