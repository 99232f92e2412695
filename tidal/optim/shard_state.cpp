#include "tidal/optim/shard_state.h"

#include <algorithm>
#include <set>

#include "tidal/autograd/grad_mode.h"
#include "tidal/base/error.h"
#include "tidal/io/shown_name.h"
#include "tidal/memory_scope.h"

namespace tidal::optim {
namespace {

const char* const kMoments[] = {".exp_avg", ".exp_avg_sq", ".master"};  // .master: bf16 parameters only

// One target, filled from the saved pieces that overlap it.
struct Target {
  StateTarget want;
  size_t param = 0;                       // its index among the saved parameters
  int64_t step = -1;                      // -1: no saved piece with moments seen yet
  std::map<std::string, Tensor> moments;  // suffix -> (length)
  std::map<std::string, int64_t> filled;  // suffix -> elements copied
  std::string with, without;              // the first saved file with moments for it, and without
  Tensor saved_step;                      // its step count as saved (`share`, a whole saved piece)
};

int64_t count_of(const std::map<std::string, Tensor>& state, const std::string& key, const std::string& where) {
  const Tensor& t = state.at(key);
  TIDAL_CHECK(t.numel() == 1 && is_integral(t.dtype()), where, ": ", io::shown_name(key),
              " must be one integer, found ", t.dtype(), " ", t.shape());
  const int64_t v = t.to(DType::i64).item<int64_t>();
  TIDAL_CHECK(v >= 0, where, ": ", io::shown_name(key), " is negative");
  return v;
}

}  // namespace

std::string fragment_name(const std::string& name, int64_t numel, const ShardLayout::Fragment& f) {
  if (f.begin == 0 && f.length == numel) return name;
  return name + "[" + std::to_string(f.begin) + ":" + std::to_string(f.begin + f.length) + "]";
}

std::vector<int> overlapping_ranks(const ShardLayout& from, const ShardLayout& to, int rank) {
  const int64_t begin = to.shard_begin(rank), end = begin + to.shard_size(rank);
  std::vector<int> out;
  for (int s = 0; s < from.ranks(); ++s)
    if (from.shard_size(s) > 0 && from.shard_begin(s) < end && begin < from.shard_begin(s) + from.shard_size(s))
      out.push_back(s);
  if (out.empty()) out.push_back(0);
  return out;
}

std::vector<StateTarget> layout_targets(const NamedParameters& params, const ShardLayout& to, int rank,
                                        bool whole_shapes) {
  TIDAL_ASSERT(to.offsets.size() == params.size() + 1);
  std::vector<StateTarget> out;
  for (const ShardLayout::Fragment& f : to.fragments(rank)) {
    const auto& [name, p] = params[f.param];
    const bool whole = whole_shapes && f.length == p.numel();
    out.push_back({name, f.begin, f.length, fragment_name(name, p.numel(), f), whole ? p.shape() : Shape{f.length}});
  }
  return out;
}

std::map<std::string, Tensor> reshard_state(const NamedParameters& params, const SavedState& saved,
                                            const ShardLayout& to, int rank, bool whole_shapes) {
  SavedState s = saved;
  if (s.parameters.empty())
    for (const auto& [name, p] : params) s.parameters.emplace_back(name, p.numel());
  TIDAL_ASSERT(s.layout.offsets == to.offsets);
  return assemble_state(s, layout_targets(params, to, rank, whole_shapes));
}

namespace {

// assemble_state's work: the targets, the saved ranks holding their pieces, and each rank's file read
// once, checked and copied from.
class Assembly {
 public:
  Assembly(const SavedState& saved, const std::vector<StateTarget>& wanted, bool share)
      : saved_(saved), params_(saved.parameters), share_(share) {
    TIDAL_ASSERT(saved.layout.offsets.size() == params_.size() + 1);
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < params_.size(); ++i) index.emplace(params_[i].first, i);
    for (const StateTarget& w : wanted) {
      auto it = index.find(w.param);
      TIDAL_CHECK(it != index.end(), saved.source(0), " and the other saved files hold no state of ",
                  io::shown_name(w.param), ": the checkpoint is of another model");
      TIDAL_ASSERT(w.begin >= 0 && w.length >= 0 && w.begin + w.length <= params_[it->second].second);
      targets_.emplace_back();
      targets_.back().want = w;
      targets_.back().param = it->second;
      const int64_t begin = saved.layout.offsets[it->second] + w.begin, end = begin + w.length;
      for (int s = 0; s < saved.layout.ranks(); ++s)
        if (saved.layout.shard_size(s) > 0 && saved.layout.shard_begin(s) < end &&
            begin < saved.layout.shard_begin(s) + saved.layout.shard_size(s))
          ranks_.insert(s);
    }
    if (ranks_.empty()) ranks_.insert(0);  // every saved rank's state holds the optimizer's step count
  }

  std::map<std::string, Tensor> run() {
    for (const int s : ranks_) read(s);
    std::map<std::string, Tensor> out;
    out["step"] = saved_steps_.defined() ? saved_steps_ : from_vector_i64({steps_}, Shape{});
    for (Target& t : targets_) {
      if (t.step < 0) continue;  // no saved piece had moments: the parameter was never updated
      const std::string& param = t.want.param;
      TIDAL_CHECK(t.without.empty(), t.with, " holds optimizer moments for part of ", io::shown_name(param), " but ",
                  t.without, " none for another part: the files do not belong together");
      for (auto& [suffix, moment] : t.moments) {
        TIDAL_CHECK(t.filled[suffix] == t.want.length, t.with, " and the other saved files hold ", suffix.substr(1),
                    " for only part of ", io::shown_name(param), ": the files do not belong together");
        out[t.want.name + suffix] = moment.view(t.want.shape);
      }
      out[t.want.name + ".step"] = t.saved_step.defined() ? t.saved_step : from_vector_i64({t.step}, Shape{});
    }
    return out;
  }

 private:
  // Saved rank s's file: every entry is a moment or step count of one of its fragments, or the step
  // count; then its fragments' pieces of the targets.
  void read(int s) {
    const std::map<std::string, Tensor> state = saved_.read(s);
    const std::string where = saved_.source(s);
    std::set<std::string> known{"step"};
    const std::vector<ShardLayout::Fragment> frags = saved_.layout.fragments(s);
    for (const ShardLayout::Fragment& f : frags) {
      const std::string piece = fragment_name(params_[f.param].first, params_[f.param].second, f);
      for (const char* suffix : {".exp_avg", ".exp_avg_sq", ".master", ".step"}) known.insert(piece + suffix);
    }
    for (const auto& [key, t] : state)
      TIDAL_CHECK(known.count(key), where, " holds ", io::shown_name(key), ", which is not the state of a piece of ",
                  "saved rank ", s, "'s shard: the file does not match the checkpoint's layout or this model");
    TIDAL_CHECK(state.count("step"), where, " lacks the optimizer's step count 'step'");
    const int64_t n = count_of(state, "step", where);
    TIDAL_CHECK(steps_ < 0 || n == steps_, where, " says the optimizer took ", n, " steps, an earlier shard ", steps_);
    steps_ = n;
    if (share_ && ranks_.size() == 1) saved_steps_ = state.at("step");
    for (const ShardLayout::Fragment& sf : frags)
      for (Target& t : targets_)
        if (t.param == sf.param) fill(t, sf, state, where);
  }

  // The overlap of saved fragment `sf` (of `state`, from `where`) with target `t`.
  void fill(Target& t, const ShardLayout::Fragment& sf, const std::map<std::string, Tensor>& state,
            const std::string& where) {
    const int64_t a = std::max(t.want.begin, sf.begin);
    const int64_t b = std::min(t.want.begin + t.want.length, sf.begin + sf.length);
    if (a >= b) return;
    const std::string piece = fragment_name(params_[sf.param].first, params_[sf.param].second, sf);
    if (state.count(piece + ".step") == 0) {
      for (const char* m : kMoments)
        TIDAL_CHECK(!state.count(piece + m), where, ": ", io::shown_name(piece + m), " has no step count ",
                    io::shown_name(piece + ".step"));
      if (t.without.empty()) t.without = where;
      return;
    }
    const int64_t piece_steps = count_of(state, piece + ".step", where);
    TIDAL_CHECK(t.step < 0 || t.step == piece_steps, where, ": ", io::shown_name(piece + ".step"), " is ", piece_steps,
                " but ", t.with, " says ", t.step, " for its piece of ", io::shown_name(params_[sf.param].first));
    t.step = piece_steps;
    if (t.with.empty()) t.with = where;
    for (const char* m : kMoments) {
      auto it = state.find(piece + m);
      if (it == state.end()) {
        TIDAL_CHECK(m == kMoments[2], where, " lacks ", io::shown_name(piece + m));
        continue;
      }
      const Tensor& src = it->second;
      TIDAL_CHECK(src.numel() == sf.length, where, ": ", io::shown_name(piece + m), " has ", src.numel(),
                  " elements, the piece ", sf.length);
      Tensor& dst = t.moments[m];
      if (share_ && !dst.defined() && sf.begin == t.want.begin && sf.length == t.want.length && src.is_contiguous()) {
        dst = src;  // the saved piece is the target whole
        t.saved_step = state.at(piece + ".step");
      } else {
        if (!dst.defined()) dst = zeros({t.want.length}, src.dtype(), src.device());
        TIDAL_CHECK(dst.dtype() == src.dtype(), where, ": ", io::shown_name(piece + m), " is ", src.dtype(),
                    ", another saved piece of it ", dst.dtype());
        dst.view({t.want.length})
            .narrow(0, a - t.want.begin, b - a)
            .copy_(src.contiguous().view({sf.length}).narrow(0, a - sf.begin, b - a));
      }
      t.filled[m] += b - a;
    }
  }

  const SavedState& saved_;
  const std::vector<std::pair<std::string, int64_t>>& params_;
  bool share_;
  std::vector<Target> targets_;
  std::set<int> ranks_;  // the saved ranks holding a piece of a target
  int64_t steps_ = -1;
  Tensor saved_steps_;  // with `share`: the optimizer's step count as saved (one saved rank)
};

}  // namespace

std::map<std::string, Tensor> assemble_state(const SavedState& saved, const std::vector<StateTarget>& wanted,
                                             bool share) {
  NoGradGuard no_grad;
  MemoryScope scope(MemoryCategory::temporary);
  return Assembly(saved, wanted, share).run();
}

}  // namespace tidal::optim
