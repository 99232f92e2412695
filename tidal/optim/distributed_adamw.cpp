#include "tidal/optim/distributed_adamw.h"

// Note [Reduce-scatter in place]
// Megatron's distributed optimizer reduce-scatters in its gradient buffer: each rank's shard of the sums
// is its own part of the whole gradients, so sharding never holds more gradient bytes than no_shard
// does (4 P, f32). tidal does the same when a step reduces each gradient once (set_in_place: ZeRO-1, whose
// one reduction follows the last micro-batch, and ZeRO-2/3 with one micro-batch per rank): the sums are
// written into this rank's pieces of the whole gradients, the shard parameters' gradients are views of
// them, and no shard-sized gradient is made; the whole gradients (every other rank's pieces of them now
// stale) are kept until finish_step. Each element is still zeros + rank 0's part + rank 1's + ... in rank
// order, bit for bit a shard's sum: my own part, which the sum overwrites, is first copied into the round's
// temporary beside the other ranks' (blocks[me]), whose size is unchanged. Where sums outlive a
// micro-batch's gradients (ZeRO-2/3 with accumulation: a later backward makes new whole gradients) or where
// each bucket's whole gradients are freed during backward (--overlap-grad-reduce, every strategy; ZeRO-2/3's
// synchronous buckets with accumulation, Note [Synchronous buckets] in parallel/grad_sync.cpp), the sums stay in
// a shard-sized gradient of their own (4 S_r more bytes, beside a bucket or so of whole gradients).

#include "tidal/range_recorder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "tidal/autograd/grad_mode.h"
#include "tidal/dist/collectives.h"
#include "tidal/memory_scope.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/range_recorder.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal::optim {

DistributedAdamW::DistributedAdamW(const NamedParameters& params, dist::Communicator& comm, bool shard_parameters,
                                   const ExpertShards* experts)
    : comm_(comm), params_(params), shard_parameters_(shard_parameters) {
  TIDAL_CHECK(!params.empty(), "[distributed optimizer] no parameters");
  const Tensor& first = params.front().second;
  for (const auto& [name, p] : params)
    TIDAL_CHECK(p.dtype() == first.dtype() && p.device() == first.device() && p.is_contiguous(),
                "[distributed optimizer] parameter '", name, "' is ", p.dtype(), " on ", p.device(),
                ": every parameter must be contiguous and share one dtype and device");
  groups_.resize(experts != nullptr ? 2 : 1);
  groups_[0].comm = &comm;
  if (experts != nullptr) {
    TIDAL_ASSERT(experts->is_expert.size() == params.size() && experts->data && experts->experts,
                 "[distributed optimizer] expert shards without their groups");
    groups_[1].comm = experts->data;
    expert_parallel_ = experts->experts;
    slabs_ = experts->slabs;
  }
  group_of_.assign(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i) {
    group_of_[i] = experts != nullptr && experts->is_expert[i] ? 1 : 0;
    groups_[group_of_[i]].params.push_back(i);
  }
  int64_t shard = 0;  // this rank's elements over the groups
  for (Group& g : groups_) {
    std::vector<int64_t> numels;
    for (size_t i : g.params) numels.push_back(params[i].second.numel());
    g.layout = make_shard_layout(numels, g.comm->size(), kGradNormChunk);
    g.at = shard;
    shard += g.layout.shard_size(g.comm->rank());
  }
  if (shard_parameters_) {
    MemoryScope scope(MemoryCategory::parameter);
    shard_data_ = empty({shard}, first.dtype(), first.device());  // (shard)
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    int64_t at = groups_[g].at;  // where the fragment starts in this rank's shard
    for (const ShardLayout::Fragment& f : fragments(g, groups_[g].comm->rank())) {
      const auto& [name, p] = params[f.param];
      Tensor piece = p.detach().view({p.numel()}).narrow(0, f.begin, f.length);  // (length)
      if (shard_parameters_) piece = shard_data_.narrow(0, at, f.length);
      const bool whole = f.begin == 0 && f.length == p.numel();
      shard_params_.emplace_back(
          whole ? name : name + "[" + std::to_string(f.begin) + ":" + std::to_string(f.begin + f.length) + "]", piece);
      shard_whole_of_.push_back(f.param);
      at += f.length;
    }
  }
  whole_.resize(params.size());
}

std::vector<ShardLayout::Fragment> DistributedAdamW::fragments(size_t g, int rank) const {
  std::vector<ShardLayout::Fragment> out = groups_[g].layout.fragments(rank);
  for (ShardLayout::Fragment& f : out) f.param = groups_[g].params[f.param];
  return out;
}

dist::Communicator& DistributedAdamW::comm_of(size_t g, ShardComms via) const {
  dist::Communicator* c = g == 0 ? via.dense : via.experts;
  return c != nullptr ? *c : *groups_[g].comm;
}

namespace {

// Bytes between a parameter's elements and a shard's, without an in-place write's version bump: a
// node that saved the parameter in forward reads it again in backward after a gather.
void copy_elements(const Tensor& dst, int64_t dst_at, const Tensor& src, int64_t src_at, int64_t n) {
  if (dst.is_meta() || n == 0) return;
  if (!dst.device().is_cpu()) {  // device memory: the device's copy kernel (no autograd, no version bump)
    const Tensor d = dst.detach().view({dst.numel()}).narrow(0, dst_at, n);
    device_kernels(dst.device())
        .copy(current_stream(dst.device()), d, src.detach().view({src.numel()}).narrow(0, src_at, n));
    return;
  }
  const int64_t e = dst.itemsize();
  std::memcpy(static_cast<char*>(dst.raw_data()) + dst_at * e, static_cast<const char*>(src.raw_data()) + src_at * e,
              size_t(n * e));
}

// Gradients are summed in f32 for bf16 parameters (--bf16's main gradients), else in their dtype.
DType sum_dtype(const Tensor& param) { return param.dtype() == DType::bf16 ? DType::f32 : param.dtype(); }

// Elements [begin, begin + length) of `t` (contiguous), flat: a message of an exchange.
Tensor flat_piece(const Tensor& t, int64_t begin, int64_t length) {
  return t.detach().view({t.numel()}).narrow(0, begin, length);  // (length)
}

}  // namespace

void DistributedAdamW::copy_shard_from_parameters(const std::function<void(const Tensor&)>& materialize) {
  if (!shard_parameters_) return;
  for (size_t g = 0; g < groups_.size(); ++g) {
    int64_t at = groups_[g].at;
    for (const ShardLayout::Fragment& f : fragments(g, groups_[g].comm->rank())) {
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
}

void DistributedAdamW::gather_parameters(const std::vector<size_t>& subset, ShardComms via) {
  start_gather(subset, via)();
}

std::function<void()> DistributedAdamW::start_gather(const std::vector<size_t>& subset, ShardComms via) {
  std::vector<char> in(params_.size(), 0), touched(groups_.size(), 0);  // per parameter, per group
  for (size_t i : subset) {
    in[i] = 1;
    touched[group_of_[i]] = 1;
    if (shard_parameters_) params_[i].second.storage()->rematerialize();
  }
  const bool meta = params_.front().second.is_meta();
  // The messages are views of the parameters: dist::exchange hands them to NCCL as they are, or
  // stages device memory through the host for MPI.
  struct Exchange {
    dist::Communicator* comm;
    std::vector<dist::TensorTransfer> sends, receives;
  };
  std::vector<Exchange> exchanges;  // one per group, in group order (the same on every rank)
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (!touched[g]) continue;  // alike on every rank: the subsets list the same positions
    dist::Communicator& comm = comm_of(g, via);
    const int me = comm.rank();
    Exchange x{&comm, {}, {}};
    int64_t at = groups_[g].at;
    for (const ShardLayout::Fragment& f : fragments(g, me)) {
      const Tensor& p = params_[f.param].second;
      if (in[f.param]) {
        if (shard_parameters_) copy_elements(p, f.begin, shard_data_, at, f.length);
        for (int r = 0; r < comm.size() && !meta; ++r)
          if (r != me) x.sends.push_back({r, flat_piece(p, f.begin, f.length)});
      }
      at += f.length;
    }
    if (comm.size() == 1 || meta) continue;
    for (int r = 0; r < comm.size(); ++r) {
      if (r == me) continue;
      for (const ShardLayout::Fragment& f : fragments(g, r))
        if (in[f.param]) x.receives.push_back({r, flat_piece(params_[f.param].second, f.begin, f.length)});
    }
    exchanges.push_back(std::move(x));
  }
  if (exchanges.empty()) return [] {};
  return [exchanges = std::move(exchanges)]() mutable {
    for (const Exchange& x : exchanges) dist::exchange(*x.comm, x.sends, x.receives);
    exchanges.clear();  // the views of the parameters go with it
  };
}

void DistributedAdamW::release_parameters(const std::vector<size_t>& subset) {
  TIDAL_ASSERT(shard_parameters_, "[distributed optimizer] the parameters are not sharded");
  for (size_t i : subset) params_[i].second.storage()->release();
}

DecayRule DistributedAdamW::decay_rule() const {
  std::map<std::string, bool> decays;
  for (size_t i = 0; i < shard_params_.size(); ++i) {
    const auto& [name, p] = params_[shard_whole_of_[i]];
    decays[shard_params_[i].first] = default_weight_decay(name, p);
  }
  return [decays](const std::string& name, const Tensor&) { return decays.at(name); };
}

void DistributedAdamW::set_in_place(bool in_place) {
  const bool summing =
      shard_grad_.defined() || std::any_of(whole_.begin(), whole_.end(), [](const Tensor& t) { return t.defined(); });
  TIDAL_ASSERT(in_place == in_place_ || !summing,
               "[distributed optimizer] the reduce-scatter changed its mode in the middle of a step");
  in_place_ = in_place;
}

void DistributedAdamW::reduce_scatter(const std::vector<size_t>& subset, ShardComms via) {
  NoGradGuard no_grad;
  const Tensor& first = params_.front().second;
  const DType grad_dtype = sum_dtype(first);
  if (has_grad_.size() != params_.size()) has_grad_.assign(params_.size(), 0);
  std::vector<Tensor> grads(params_.size());  // (numel) each; defined for this call's parameters only
  const std::vector<char> any = whole_gradients(subset, via, grad_dtype, grads);
  if (!in_place_ && !shard_grad_.defined()) {
    int64_t shard = 0;
    for (const Group& g : groups_) shard += g.layout.shard_size(g.comm->rank());
    MemoryScope scope(MemoryCategory::gradient);
    shard_grad_ = zeros({shard}, grad_dtype, first.device());  // (shard): summed gradients
  }
  for (size_t i : subset)
    TIDAL_ASSERT(!in_place_ || !whole_[i].defined(), "[distributed optimizer] parameter '", params_[i].first,
                 "' reduced twice in a step that reduces in place");
  for (size_t g = 0; g < groups_.size(); ++g)
    if (any[g]) reduce_group(g, comm_of(g, via), grads);
  // In place, the whole gradients hold the shard's sums: kept (this rank's pieces are the shard
  // parameters' gradients) until finish_step. Else they are not needed any more: freed now. Either way
  // the parameters give theirs up: only this rank's pieces of them are sums.
  if (in_place_)
    for (size_t i : subset) whole_[i] = std::move(grads[i]);
  grads.clear();
  for (size_t i : subset) params_[i].second.zero_grad();
}

std::vector<char> DistributedAdamW::whole_gradients(const std::vector<size_t>& subset, ShardComms via, DType grad_dtype,
                                                    std::vector<Tensor>& grads) {
  std::vector<char> any(groups_.size(), 0);
  for (size_t g = 0; g < groups_.size(); ++g) {
    // Which of this group's parameters have a gradient on some rank of the group: one without any
    // takes no part (and, if it gets none all step, keeps none, as in one process: AdamW then skips
    // it); where another rank has one, a missing gradient here counts as zeros.
    std::vector<size_t> mine;
    for (size_t i : subset)
      if (group_of_[i] == g) mine.push_back(i);
    if (mine.empty()) continue;
    dist::Communicator& comm = comm_of(g, via);
    std::string have(mine.size(), '\0');
    for (size_t k = 0; k < mine.size(); ++k) have[k] = params_[mine[k]].second.grad().defined() ? 1 : 0;
    if (comm.size() > 1) have = dist::any_rank(comm, have);
    for (size_t k = 0; k < mine.size(); ++k) {
      if (!have[k]) continue;
      const size_t i = mine[k];
      has_grad_[i] = 1;
      any[g] = 1;
      const Tensor& p = params_[i].second;
      Tensor grad = p.grad();
      if (!grad.defined()) {
        MemoryScope scope(MemoryCategory::gradient);
        grad = zeros(p.shape(), grad_dtype, p.device());
      }
      TIDAL_ASSERT(grad.dtype() == grad_dtype, "[distributed optimizer] parameter '", params_[i].first, "' has a ",
                   grad.dtype(), " gradient; its sums are ", grad_dtype);
      grads[i] = grad.contiguous().view({p.numel()});
    }
  }
  return any;
}

int64_t reduce_round(int64_t bucket, int64_t shard, int ranks) {
  const int64_t total = std::min({bucket, kReduceRoundElements, std::max<int64_t>(int64_t(1) << 16, shard)});
  return std::max<int64_t>(1, total / ranks);
}

void DistributedAdamW::reduce_group(size_t g, dist::Communicator& comm, const std::vector<Tensor>& grads) {
  const Tensor& param = params_.front().second;
  const DType grad_dtype = sum_dtype(param);
  const bool meta = param.is_meta();
  const int ranks = comm.size(), me = comm.rank();
  // Each rank's pieces of this call, packed in its shard's order: (parameter, begin, length, where in the
  // packing) — alike on every rank (which parameters reduce is agreed: whole_gradients).
  struct Piece {
    size_t param;
    int64_t begin, length, packed_at;
  };
  std::vector<std::vector<Piece>> pieces(static_cast<size_t>(ranks));
  std::vector<int64_t> packed(static_cast<size_t>(ranks), 0);
  std::vector<int64_t> shard_at;  // mine: where each of my pieces sits in shard_grad_
  for (int r = 0; r < ranks; ++r) {
    int64_t at = groups_[g].at;
    for (const ShardLayout::Fragment& f : fragments(g, r)) {
      if (grads[f.param].defined()) {
        if (r == me || !meta)  // the meta device exchanges nothing: the others' packed lengths are enough
          pieces[size_t(r)].push_back({f.param, f.begin, f.length, packed[size_t(r)]});
        packed[size_t(r)] += f.length;
        if (r == me) shard_at.push_back(at);
      }
      at += f.length;
    }
  }
  // Note [Reduce-scatter in rounds]: the exchange goes in rounds of at most `chunk` elements of every rank's
  // packing, so its temporary (every rank's pieces of my round) is ranks x chunk elements: at most
  // kReduceRoundElements (16 MiB of f32), a bucket (--ddp-bucket-size) or a shard, whichever is least (but
  // 2^16 elements at least), never a whole model. Each element is still summed in rank order: bit for bit
  // the single exchange's sums.
  const int64_t most = *std::max_element(packed.begin(), packed.end());
  const int64_t chunk = reduce_round(reduce_bucket_, most, ranks);
  const int64_t rounds = (most + chunk - 1) / chunk;
  profile::Range range(dist::kReductionRange);  // the packing and the sums: the reduce-scatter's own work
  // A packing's pieces are in packed order, end to end: a round's are a run of them, from the first that ends
  // past the round's start (`first`, per rank, moving forward round by round) to the first that starts at
  // or past its end. (Scanning every piece every round made a 30B MoE model's planning quadratic.)
  std::vector<size_t> first(static_cast<size_t>(ranks), 0);
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t lo = round * chunk, hi = lo + chunk;
    for (int r = 0; r < ranks; ++r) {
      const std::vector<Piece>& ps = pieces[size_t(r)];
      size_t& f = first[size_t(r)];
      while (f < ps.size() && ps[f].packed_at + ps[f].length <= lo) ++f;
    }
    // The pieces of rank r's packing inside the round, in order: [first[r], end).
    const auto in_round = [&](int r) {
      const std::vector<Piece>& ps = pieces[size_t(r)];
      size_t end = first[size_t(r)];
      while (end < ps.size() && ps[end].packed_at < hi) ++end;
      return std::pair<size_t, size_t>{first[size_t(r)], end};
    };
    // The part of piece p of a packing inside [lo, hi): (offset into the piece, length); length 0 if none.
    const auto overlap = [&](const Piece& p) {
      const int64_t from = std::max(lo, p.packed_at), to = std::min(hi, p.packed_at + p.length);
      return std::pair<int64_t, int64_t>{from - p.packed_at, std::max<int64_t>(0, to - from)};
    };
    const int64_t mine = std::max<int64_t>(0, std::min(hi, packed[size_t(me)]) - lo);
    MemoryScope scope(MemoryCategory::temporary);
    Tensor blocks = empty({ranks, mine}, grad_dtype, param.device());  // every rank's pieces of my round
    // Views of the gradients and of `blocks`: dist::exchange stages device memory through the host for MPI.
    std::vector<dist::TensorTransfer> sends, receives;
    for (int r = 0; r < ranks; ++r) {
      const auto [from, to] = in_round(r);
      for (size_t k = from; k < to; ++k) {
        const Piece& p = pieces[size_t(r)][k];
        const auto [offset, length] = overlap(p);
        if (length == 0) continue;
        if (r != me && meta) continue;  // nothing crosses on the meta device: no view of it either
        Tensor part = grads[p.param].narrow(0, p.begin + offset, length);  // (length)
        if (r == me) {
          const int64_t at = p.packed_at + offset - lo;  // in my round's blocks
          blocks.select(0, me).narrow(0, at, length).copy_(part);
          for (int q = 0; q < ranks && !meta; ++q)  // every other rank's part of this piece
            if (q != me) receives.push_back({q, blocks.select(0, q).narrow(0, at, length)});
        } else {
          sends.push_back({r, part});
        }
      }
    }
    if (ranks > 1) dist::exchange(comm, sends, receives);
    const auto [mine_from, mine_to] = in_round(me);
    // Where piece k's part of this round is summed: the shard's sums, or in place my own part of the whole
    // gradient, already copied into blocks[me] (Note [Reduce-scatter in place]).
    const auto sums = [&](size_t k, int64_t offset, int64_t length) {
      const Piece& p = pieces[size_t(me)][k];
      return in_place_ ? grads[p.param].narrow(0, p.begin + offset, length)
                       : shard_grad_.narrow(0, shard_at[k] + offset, length);  // (length)
    };
    for (size_t k = mine_from; k < mine_to && in_place_; ++k) {  // the sums start from zeros, as a shard's
      const auto [offset, length] = overlap(pieces[size_t(me)][k]);
      if (length > 0) sums(k, offset, length).zero_();
    }
    // Where each run of my round's blocks is summed: a piece's sums, or in the shard's sums a run of pieces end to
    // end there (all of them, unless a parameter without a gradient this call sits between): one add per rank and
    // run, element by element the same sums.
    struct Run {
      int64_t block_at, length, shard_at;
      Tensor into;  // (length)
    };
    std::vector<Run> runs;
    for (size_t k = mine_from; k < mine_to; ++k) {
      const Piece& p = pieces[size_t(me)][k];
      const auto [offset, length] = overlap(p);
      if (length == 0) continue;
      const int64_t block_at = p.packed_at + offset - lo;
      if (in_place_) {
        runs.push_back({block_at, length, 0, sums(k, offset, length)});
        continue;
      }
      const int64_t at = shard_at[k] + offset;
      Run* last = runs.empty() ? nullptr : &runs.back();
      if (last != nullptr && last->shard_at + last->length == at && last->block_at + last->length == block_at) {
        last->length += length;
      } else {
        runs.push_back({block_at, length, at, Tensor()});
      }
    }
    for (Run& run : runs)
      if (!run.into.defined()) run.into = shard_grad_.narrow(0, run.shard_at, run.length);
    // In rank order, each element on its own (any grouping adds alike): one call per run for all the ranks' parts.
    if (Kernels* kern = kernels_for(param.device())) {
      std::vector<Tensor> parts(static_cast<size_t>(ranks));
      std::vector<const Tensor*> rows(static_cast<size_t>(ranks));
      for (Run& run : runs) {
        for (int r = 0; r < ranks; ++r) {
          parts[size_t(r)] = blocks.select(0, r).narrow(0, run.block_at, run.length);  // (length)
          rows[size_t(r)] = &parts[size_t(r)];
        }
        kern->add_rows_inplace(current_stream(param.device()), run.into, rows);
      }
    }
  }
}

double DistributedAdamW::finish_reduction() {
  NoGradGuard no_grad;
  if (has_grad_.size() != params_.size()) has_grad_.assign(params_.size(), 0);
  const bool meta = params_.front().second.is_meta();
  // The shard's pieces become the local AdamW's gradients; their chunk sums make the norm.
  std::vector<double> squares;  // per group
  size_t k = 0;                 // shard parameter
  for (size_t g = 0; g < groups_.size(); ++g) {
    dist::Communicator& comm = *groups_[g].comm;
    std::string mine_chunks;
    int64_t at = groups_[g].at;
    for (const ShardLayout::Fragment& f : fragments(g, comm.rank())) {
      const int64_t here = at;
      at += f.length;
      Tensor& piece = shard_params_[k++].second;
      if (!has_grad_[f.param]) {
        piece.zero_grad();
        continue;
      }
      TIDAL_ASSERT(!in_place_ || whole_[f.param].defined(), "[distributed optimizer] parameter '",
                   params_[f.param].first, "' was not reduced this step");
      Tensor grad = in_place_ ? whole_[f.param].narrow(0, f.begin, f.length)  // (length): a view of the sums
                              : shard_grad_.narrow(0, here, f.length);
      piece.set_grad(grad);
      const std::vector<double> c = sum_of_squares_chunks(grad);
      const int64_t header[2] = {int64_t(f.param), int64_t(c.size())};
      mine_chunks.append(reinterpret_cast<const char*>(header), sizeof header);
      mine_chunks.append(reinterpret_cast<const char*>(c.data()), c.size() * sizeof(double));
    }
    if (meta) continue;
    // Every gradient's chunks, in rank order (a gradient's pieces are in rank order), as grad_norm adds them.
    std::vector<std::vector<double>> chunks(params_.size());
    for (const std::string& bytes : dist::all_gather_strings(comm, mine_chunks)) {
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
    for (size_t i : groups_[g].params)
      if (has_grad_[i]) per_gradient.push_back(std::move(chunks[i]));
    squares.push_back(sum_of_squares_from_chunks(per_gradient));
  }
  if (meta) return 0;
  // The dense gradients are the same on every rank; the experts' squares of every rank of the
  // expert-parallel group are added, each expert once (parallel/expert.h's norm).
  if (groups_.size() == 1) return std::sqrt(squares[0]);
  return std::sqrt(squares[0] + dist::all_reduce_sum(*expert_parallel_, squares[1]));
}

void DistributedAdamW::update(double lr, double max_norm, double norm, AdamW& local) {
  NoGradGuard no_grad;
  const double coef = clip_coefficient(norm, max_norm);
  if (coef != 1.0)  // the shard's sums, wherever they are: elementwise, alike in one piece or many
    for (auto& [name, piece] : shard_params_)
      if (piece.grad().defined()) piece.grad().mul_(coef);
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
  whole_.assign(params_.size(), Tensor());
  in_place_ = false;
  has_grad_.assign(params_.size(), 0);
}

}  // namespace tidal::optim
