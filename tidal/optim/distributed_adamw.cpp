#include "tidal/optim/distributed_adamw.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "tidal/autograd/grad_mode.h"
#include "tidal/dist/collectives.h"
#include "tidal/memory_scope.h"
#include "tidal/optim/grad_clip.h"

namespace tidal::optim {

DistributedAdamW::DistributedAdamW(const NamedParameters& params, dist::Communicator& comm, bool shard_parameters)
    : comm_(comm), params_(params), shard_parameters_(shard_parameters) {
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
  if (shard_parameters_) {
    MemoryScope scope(MemoryCategory::parameter);
    shard_data_ = empty({layout_.shard_size(comm.rank())}, first.dtype(), first.device());  // (shard)
  }
  int64_t at = 0;  // where the fragment starts in this rank's shard
  for (const ShardLayout::Fragment& f : layout_.fragments(comm.rank())) {
    const auto& [name, p] = params[f.param];
    Tensor piece = p.detach().view({p.numel()}).narrow(0, f.begin, f.length);  // (length)
    if (shard_parameters_) piece = shard_data_.narrow(0, at, f.length);
    const bool whole = f.begin == 0 && f.length == p.numel();
    shard_params_.emplace_back(
        whole ? name : name + "[" + std::to_string(f.begin) + ":" + std::to_string(f.begin + f.length) + "]", piece);
    shard_names_of_.push_back(name);
    at += f.length;
  }
}

namespace {

// Bytes between a parameter's elements and a shard's, without an in-place write's version bump: a
// node that saved the parameter in forward reads it again in backward after a gather.
void copy_elements(const Tensor& dst, int64_t dst_at, const Tensor& src, int64_t src_at, int64_t n) {
  if (dst.is_meta() || n == 0) return;
  const int64_t e = dst.itemsize();
  std::memcpy(static_cast<char*>(dst.raw_data()) + dst_at * e, static_cast<const char*>(src.raw_data()) + src_at * e,
              size_t(n * e));
}

}  // namespace

void DistributedAdamW::copy_shard_from_parameters(const std::function<void(const Tensor&)>& materialize) {
  if (!shard_parameters_) return;
  int64_t at = 0;
  for (const ShardLayout::Fragment& f : layout_.fragments(comm_.rank())) {
    const Tensor& p = params_[f.param].second;
    const bool released = !p.storage()->is_materialized();
    if (released) {  // one parameter's bytes at a time
      TIDAL_ASSERT(materialize != nullptr, "[distributed optimizer] parameter '", params_[f.param].first,
                   "' has no values to copy");
      materialize(p);
    }
    copy_elements(shard_data_, at, p, f.begin, f.length);
    if (released) p.storage()->release();
    at += f.length;
  }
}

void DistributedAdamW::gather_parameters(const std::vector<size_t>& subset, dist::Communicator* via) {
  start_gather(subset, via)();
}

std::function<void()> DistributedAdamW::start_gather(const std::vector<size_t>& subset, dist::Communicator* via) {
  dist::Communicator& comm = via != nullptr ? *via : comm_;
  const int me = comm.rank();
  std::vector<char> in(params_.size(), 0);
  for (size_t i : subset) {
    in[i] = 1;
    if (shard_parameters_) params_[i].second.storage()->rematerialize();
  }
  const Tensor& first = params_.front().second;
  const int64_t itemsize = first.itemsize();
  const bool meta = first.is_meta();
  std::vector<dist::Communicator::Transfer> sends, receives;
  int64_t at = 0;
  for (const ShardLayout::Fragment& f : layout_.fragments(me)) {
    const Tensor& p = params_[f.param].second;
    if (in[f.param]) {
      if (shard_parameters_) copy_elements(p, f.begin, shard_data_, at, f.length);
      for (int r = 0; r < comm.size() && !meta; ++r)
        if (r != me) sends.push_back({r, static_cast<char*>(p.raw_data()) + f.begin * itemsize, f.length * itemsize});
    }
    at += f.length;
  }
  if (comm.size() == 1 || meta) return [] {};
  for (int r = 0; r < comm.size(); ++r) {
    if (r == me) continue;
    for (const ShardLayout::Fragment& f : layout_.fragments(r))
      if (in[f.param])
        receives.push_back(
            {r, static_cast<char*>(params_[f.param].second.raw_data()) + f.begin * itemsize, f.length * itemsize});
  }
  return [&comm, sends = std::move(sends), receives = std::move(receives)] { comm.exchange(sends, receives); };
}

void DistributedAdamW::release_parameters(const std::vector<size_t>& subset) {
  TIDAL_ASSERT(shard_parameters_, "[distributed optimizer] the parameters are not sharded");
  for (size_t i : subset) params_[i].second.storage()->release();
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

void DistributedAdamW::reduce_scatter(const std::vector<size_t>& subset, dist::Communicator* via) {
  NoGradGuard no_grad;
  dist::Communicator& comm = via != nullptr ? *via : comm_;
  const int ranks = comm.size(), me = comm.rank();
  const Tensor& first = params_.front().second;
  // Gradients are summed in f32 for bf16 parameters (--bf16's main gradients), else in their dtype.
  const DType grad_dtype = first.dtype() == DType::bf16 ? DType::f32 : first.dtype();
  const int64_t itemsize = dtype_size(grad_dtype);
  const bool meta = first.is_meta();
  if (has_grad_.size() != params_.size()) has_grad_.assign(params_.size(), 0);
  // Which of them have a gradient on some rank: one without any takes no part (and, if it gets none
  // all step, keeps none, as in one process: AdamW then skips it); where another rank has one, a
  // missing gradient here counts as zeros.
  std::string have(subset.size(), '\0');
  for (size_t k = 0; k < subset.size(); ++k) have[k] = params_[subset[k]].second.grad().defined() ? 1 : 0;
  if (ranks > 1) have = dist::any_rank(comm, have);
  std::vector<Tensor> grads(params_.size());  // (numel) each; defined for this call's parameters only
  for (size_t k = 0; k < subset.size(); ++k) {
    if (!have[k]) continue;
    const size_t i = subset[k];
    has_grad_[i] = 1;
    const Tensor& p = params_[i].second;
    Tensor g = p.grad();
    if (!g.defined()) {
      MemoryScope scope(MemoryCategory::gradient);
      g = zeros(p.shape(), grad_dtype, p.device());
    }
    TIDAL_ASSERT(g.dtype() == grad_dtype, "[distributed optimizer] parameter '", params_[i].first, "' has a ",
                 g.dtype(), " gradient; its sums are ", grad_dtype);
    grads[i] = g.contiguous().view({p.numel()});
  }
  if (!shard_grad_.defined()) {
    MemoryScope scope(MemoryCategory::gradient);
    shard_grad_ = zeros({layout_.shard_size(me)}, grad_dtype, first.device());  // (shard): summed gradients
  }
  // This call's pieces of my shard, packed: runs of (offset in my shard, offset in the packing, length).
  struct Run {
    int64_t shard_at, packed_at, length;
  };
  std::vector<Run> runs;
  int64_t packed = 0, shard_at = 0;
  for (const ShardLayout::Fragment& f : layout_.fragments(me)) {
    if (grads[f.param].defined()) {
      if (!runs.empty() && runs.back().shard_at + runs.back().length == shard_at)
        runs.back().length += f.length;
      else
        runs.push_back({shard_at, packed, f.length});
      packed += f.length;
    }
    shard_at += f.length;
  }
  {
    MemoryScope scope(MemoryCategory::temporary);
    Tensor blocks = empty({ranks, packed}, grad_dtype, first.device());  // every rank's pieces, packed
    std::vector<dist::Communicator::Transfer> sends, receives;
    for (int r = 0; r < ranks; ++r) {
      int64_t at = 0;  // where the piece lands in the packing of rank r's pieces
      for (const ShardLayout::Fragment& f : layout_.fragments(r)) {
        if (!grads[f.param].defined()) continue;
        Tensor piece = grads[f.param].narrow(0, f.begin, f.length);  // (length)
        if (r == me) {
          blocks.select(0, me).narrow(0, at, f.length).copy_(piece);
          for (int q = 0; q < ranks && !meta; ++q)  // every other rank's piece of this fragment
            if (q != me)
              receives.push_back({q, static_cast<char*>(blocks.raw_data()) + (int64_t(q) * packed + at) * itemsize,
                                  f.length * itemsize});
        } else if (!meta) {
          sends.push_back({r, piece.raw_data(), f.length * itemsize});
        }
        at += f.length;
      }
    }
    if (ranks > 1) comm.exchange(sends, receives);
    for (int r = 0; r < ranks; ++r)  // in rank order, each element on its own: any grouping adds alike
      for (const Run& run : runs)
        shard_grad_.narrow(0, run.shard_at, run.length).add_(blocks.select(0, r).narrow(0, run.packed_at, run.length));
  }
  // The whole gradients are not needed any more: free them now.
  grads.clear();
  for (size_t i : subset) params_[i].second.zero_grad();
}

double DistributedAdamW::finish_reduction() {
  NoGradGuard no_grad;
  const int me = comm_.rank();
  if (has_grad_.size() != params_.size()) has_grad_.assign(params_.size(), 0);
  const bool meta = params_.front().second.is_meta();
  // The shard's pieces become the local AdamW's gradients; their chunk sums make the norm.
  const std::vector<ShardLayout::Fragment> frags = layout_.fragments(me);
  std::string mine_chunks;
  int64_t at = 0;
  for (size_t k = 0; k < frags.size(); ++k) {
    const ShardLayout::Fragment& f = frags[k];
    const int64_t here = at;
    at += f.length;
    if (!has_grad_[f.param]) {
      shard_params_[k].second.zero_grad();
      continue;
    }
    Tensor g = shard_grad_.narrow(0, here, f.length);
    shard_params_[k].second.set_grad(g);
    const std::vector<double> c = sum_of_squares_chunks(g);
    const int64_t header[2] = {int64_t(f.param), int64_t(c.size())};
    mine_chunks.append(reinterpret_cast<const char*>(header), sizeof header);
    mine_chunks.append(reinterpret_cast<const char*>(c.data()), c.size() * sizeof(double));
  }
  if (meta) return 0;
  // Every gradient's chunks, in rank order (a gradient's pieces are in rank order), as grad_norm adds them.
  std::vector<std::vector<double>> chunks(params_.size());
  for (const std::string& bytes : dist::all_gather_strings(comm_, mine_chunks)) {
    for (size_t pos = 0; pos < bytes.size();) {
      int64_t header[2];
      std::memcpy(header, bytes.data() + pos, sizeof header);
      pos += sizeof header;
      std::vector<double>& dst = chunks[size_t(header[0])];
      const size_t old = dst.size();
      dst.resize(old + size_t(header[1]));
      std::memcpy(dst.data() + old, bytes.data() + pos, size_t(header[1]) * sizeof(double));
      pos += size_t(header[1]) * sizeof(double);
    }
  }
  std::vector<std::vector<double>> per_gradient;
  for (size_t i = 0; i < params_.size(); ++i)
    if (has_grad_[i]) per_gradient.push_back(std::move(chunks[i]));
  return norm_from_chunks(per_gradient);
}

void DistributedAdamW::update(double lr, double max_norm, double norm, AdamW& local) {
  NoGradGuard no_grad;
  const double coef = clip_coefficient(norm, max_norm);
  if (coef != 1.0) shard_grad_.mul_(coef);
  local.step(lr);
  if (!shard_parameters_) {  // every rank's updated pieces into every rank's parameters
    std::vector<size_t> all(params_.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    gather_parameters(all);
  }
}

void DistributedAdamW::finish_step() {
  for (auto& [name, piece] : shard_params_) piece.zero_grad();
  shard_grad_ = Tensor();
  has_grad_.assign(params_.size(), 0);
}

}  // namespace tidal::optim
