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

// One piece of the target shard, filled from the saved pieces that overlap it.
struct Target {
  ShardLayout::Fragment frag;
  std::string name;
  int64_t step = -1;                      // -1: no saved piece with moments seen yet
  std::map<std::string, Tensor> moments;  // suffix -> (length)
  std::map<std::string, int64_t> filled;  // suffix -> elements copied
  std::string with, without;              // the first saved file with moments for it, and without
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

std::map<std::string, Tensor> reshard_state(const NamedParameters& params, const SavedState& saved,
                                            const ShardLayout& to, int rank, bool whole_shapes) {
  TIDAL_ASSERT(saved.layout.offsets == to.offsets && to.offsets.size() == params.size() + 1);
  NoGradGuard no_grad;
  MemoryScope scope(MemoryCategory::temporary);
  std::vector<Target> targets;
  for (const ShardLayout::Fragment& f : to.fragments(rank)) {
    targets.emplace_back();
    targets.back().frag = f;
    targets.back().name = fragment_name(params[f.param].first, params[f.param].second.numel(), f);
  }
  int64_t steps = -1;
  for (const int s : overlapping_ranks(saved.layout, to, rank)) {
    const std::map<std::string, Tensor> state = saved.read(s);
    const std::string where = saved.source(s);
    // Every entry is a moment or step count of one of the rank's fragments, or the step count.
    std::set<std::string> known{"step"};
    const std::vector<ShardLayout::Fragment> frags = saved.layout.fragments(s);
    for (const ShardLayout::Fragment& f : frags) {
      const std::string piece = fragment_name(params[f.param].first, params[f.param].second.numel(), f);
      for (const char* suffix : {".exp_avg", ".exp_avg_sq", ".master", ".step"}) known.insert(piece + suffix);
    }
    for (const auto& [key, t] : state)
      TIDAL_CHECK(known.count(key), where, " holds ", io::shown_name(key), ", which is not the state of a piece of ",
                  "saved rank ", s, "'s shard: the file does not match the checkpoint's layout or this model");
    TIDAL_CHECK(state.count("step"), where, " lacks the optimizer's step count 'step'");
    const int64_t n = count_of(state, "step", where);
    TIDAL_CHECK(steps < 0 || n == steps, where, " says the optimizer took ", n, " steps, an earlier shard ", steps);
    steps = n;
    for (const ShardLayout::Fragment& sf : frags) {
      const std::string piece = fragment_name(params[sf.param].first, params[sf.param].second.numel(), sf);
      const bool has_state = state.count(piece + ".step") > 0;
      for (Target& t : targets) {
        if (t.frag.param != sf.param) continue;
        const int64_t a = std::max(t.frag.begin, sf.begin);
        const int64_t b = std::min(t.frag.begin + t.frag.length, sf.begin + sf.length);
        if (a >= b) continue;
        if (!has_state) {
          for (const char* m : kMoments)
            TIDAL_CHECK(!state.count(piece + m), where, ": ", io::shown_name(piece + m), " has no step count ",
                        io::shown_name(piece + ".step"));
          if (t.without.empty()) t.without = where;
          continue;
        }
        const int64_t piece_steps = count_of(state, piece + ".step", where);
        TIDAL_CHECK(t.step < 0 || t.step == piece_steps, where, ": ", io::shown_name(piece + ".step"), " is ",
                    piece_steps, " but ", t.with, " says ", t.step, " for its piece of ",
                    io::shown_name(params[sf.param].first));
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
          if (!dst.defined()) dst = zeros({t.frag.length}, src.dtype(), src.device());
          TIDAL_CHECK(dst.dtype() == src.dtype(), where, ": ", io::shown_name(piece + m), " is ", src.dtype(),
                      ", another saved piece of it ", dst.dtype());
          dst.narrow(0, a - t.frag.begin, b - a)
              .copy_(src.contiguous().view({sf.length}).narrow(0, a - sf.begin, b - a));
          t.filled[m] += b - a;
        }
      }
    }
  }
  std::map<std::string, Tensor> out;
  out["step"] = from_vector_i64({steps}, Shape{});
  for (Target& t : targets) {
    if (t.step < 0) continue;  // no saved piece had moments: the parameter was never updated
    const std::string& param = params[t.frag.param].first;
    TIDAL_CHECK(t.without.empty(), t.with, " holds optimizer moments for part of ", io::shown_name(param), " but ",
                t.without, " none for another part: the files do not belong together");
    const Tensor& p = params[t.frag.param].second;
    const bool reshape = whole_shapes && t.frag.length == p.numel();
    for (auto& [suffix, moment] : t.moments) {
      TIDAL_CHECK(t.filled[suffix] == t.frag.length, t.with, " and the other saved files hold ", suffix.substr(1),
                  " for only part of ", io::shown_name(param), ": the files do not belong together");
      out[t.name + suffix] = reshape ? moment.view(p.shape()) : moment;
    }
    out[t.name + ".step"] = from_vector_i64({t.step}, Shape{});
  }
  return out;
}

}  // namespace tidal::optim
