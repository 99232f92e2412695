#pragma once
// How a step's gradients become the global batch's (docs/distributed.md, "Gradient reduction"):
// summed over the data-parallel ranks — all-reduced in place (no_shard) or reduce-scattered into
// the distributed optimizer's shard (optim, optim_grads) — after the step's last backward, or after
// every micro-batch's backward under optim_grads (ZeRO-2: only the shard's sums are kept between
// micro-batches). With --overlap-grad-reduce the parameters are grouped into buckets, in reverse
// order (the order backward finishes them), and a bucket is reduced on the "comm" stream as soon as
// backward has accumulated every gradient in it (post-accumulate-grad hooks), while backward goes on.
// ZeRO-2/3 with accumulation reduce by bucket without it too, synchronously on the compute thread, so
// that only a bucket or so of whole gradients lives beside the shard's sums (DeepSpeed's ZeRO-2; a model
// without experts: Note [Synchronous buckets] in grad_sync.cpp).
// Buckets start in bucket order on every rank (a collective must be called in the same order
// everywhere); a bucket whose gradients some rank lacks (an expert none of its tokens chose) starts
// when backward ends. Expert parallel: a bucket's experts are summed over their expert-data-parallel
// group after its dense parameters over every rank. Each element's sum is added in rank order either way, so
// bucketing changes no bit of the result.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/optim/distributed_adamw.h"
#include "tidal/parallel/groups.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal::parallel {

// Time the gradient reduction took and how much of it the compute thread waited for.
struct GradSyncStats {
  int64_t buckets = 0;     // per reducing backward
  int64_t reductions = 0;  // buckets reduced so far
  int64_t busy_ns = 0;     // reducing (on the comm stream with overlap)
  int64_t exposed_ns = 0;  // the compute thread blocked on it
  double hidden_fraction() const {
    return busy_ns > 0 ? std::max(0.0, 1.0 - double(exposed_ns) / double(busy_ns)) : 0.0;
  }
};

class GradSync {
 public:
  // Sums over the world of `groups` (`groups` must outlive this); expert parallel: the experts'
  // parameters over their expert-data group (the distributed optimizer's expert shards are over it
  // too). `sharded`: the distributed optimizer whose shard receives the sums (null: all-reduce in place).
  GradSync(const std::vector<std::pair<std::string, Tensor>>& params, const ParallelGroups& groups,
           optim::DistributedAdamW* sharded);
  ~GradSync();  // removes the hooks (after the last reduction finished)
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Around micro-batch m's backward (of `count` per rank and step). end_micro_batch must run on
  // every rank for every micro-batch, also one whose backward was skipped (a non-finite loss): the
  // reductions are collectives. It returns when this micro-batch's reductions are done.
  void begin_micro_batch(int64_t m, int64_t count);
  void end_micro_batch();
  // Between the two: whether this backward's buckets are reduced while it runs (on the comm stream with
  // --overlap-grad-reduce, or synchronously), so that --bf16's f32 sums must be gradients as they complete.
  bool overlapping() const { return reducing_ && (stream_ != nullptr || inline_); }
  // Between the two: whether this micro-batch's backward is reduced at its end (the step's last, or
  // every one under ZeRO-2/3, which keep only the shard's sums between micro-batches).
  bool reducing() const { return reducing_; }

  const GradSyncStats& stats() const { return stats_; }

 private:
  void on_gradient(size_t param);
  void launch_ready();
  void launch(size_t bucket);  // on the comm stream, or now (synchronous buckets)
  void reduce(const std::vector<size_t>& idx);

  std::vector<std::pair<std::string, Tensor>> params_;
  dist::Communicator& comm_;
  optim::DistributedAdamW* sharded_;
  ParallelLayout config_;
  dist::Communicator* expert_data_;
  std::unique_ptr<Stream> stream_;                          // "comm", with --overlap-grad-reduce
  std::unique_ptr<dist::Communicator> stream_comm_;         // the stream's own duplicate of comm_
  std::unique_ptr<dist::Communicator> stream_expert_comm_;  // and of expert_data_ (expert parallel)
  std::vector<std::vector<size_t>> buckets_;                // parameter indexes, reverse order
  std::vector<size_t> all_;                                 // every parameter: a reduction after backward
  std::vector<size_t> bucket_of_;                           // per parameter
  std::vector<size_t> ready_in_;                            // per bucket: gradients accumulated this backward
  std::vector<char> seen_;                                  // per parameter, this backward
  std::vector<uint64_t> hooks_;                             // the keys of the hooks, per parameter
  size_t launched_ = 0;                                     // buckets started this backward
  bool reducing_ = false;                                   // whether this micro-batch's backward reduces
  bool experts_ = false;                                    // the model has experts' parameters
  bool inline_ = false;  // this backward reduces its buckets synchronously, as backward completes them
  GradSyncStats stats_;
};

}  // namespace tidal::parallel
