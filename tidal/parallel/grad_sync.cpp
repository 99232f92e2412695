#include "tidal/parallel/grad_sync.h"

#include "tidal/base/clock.h"
#include "tidal/base/error.h"
#include "tidal/memory_scope.h"
#include "tidal/models/moe.h"
#include "tidal/parallel/data.h"

namespace tidal::parallel {

GradSync::GradSync(const std::vector<std::pair<std::string, Tensor>>& params, const ParallelGroups& groups,
                   optim::DistributedAdamW* sharded)
    : params_(params),
      comm_(groups.world()),
      sharded_(sharded),
      config_(groups.layout()),
      expert_data_(groups.expert_data()) {
  TIDAL_ASSERT(!expert_data_ || !sharded || sharded->expert_data() == expert_data_,
               "[data parallel] the distributed optimizer shards the experts over another group");
  TIDAL_ASSERT(!sharded || sharded->parameters().size() == params.size(),
               "[data parallel] the distributed optimizer holds other parameters than the model");
  bucket_of_.resize(params_.size());
  if (!config_.overlap_grad_reduce) {
    buckets_.emplace_back();  // one bucket, reduced after backward
    for (size_t i = 0; i < params_.size(); ++i) buckets_.back().push_back(i);
  } else {
    // Reverse order, cut when a bucket reaches the size: backward produces the last layers' first.
    const int64_t limit = config_.bucket_elements();
    int64_t filled = limit;
    for (size_t k = params_.size(); k-- > 0;) {
      if (filled >= limit) {
        buckets_.emplace_back();
        filled = 0;
      }
      buckets_.back().push_back(k);
      filled += params_[k].second.numel();
    }
    stream_ = std::make_unique<Stream>("comm");
    stream_comm_ = comm_.duplicate();  // the stream's collectives never meet the compute thread's
    if (expert_data_) stream_expert_comm_ = expert_data_->duplicate();
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b]) bucket_of_[i] = b;
  ready_in_.assign(buckets_.size(), 0);
  seen_.assign(params_.size(), 0);
  stats_.buckets = int64_t(buckets_.size());
  if (config_.overlap_grad_reduce)
    for (size_t i = 0; i < params_.size(); ++i)
      hooks_.push_back(params_[i].second.add_post_accumulate_grad_hook([this, i] { on_gradient(i); }));
}

GradSync::~GradSync() {
  stream_.reset();  // finishes what is queued (its tasks use the members below)
  for (size_t i = 0; i < hooks_.size(); ++i) params_[i].second.remove_post_accumulate_grad_hook(hooks_[i]);
}

void GradSync::begin_micro_batch(int64_t m, int64_t count) {
  // ZeRO-2/3 keep only the shard's sums between micro-batches; the others sum locally until the last.
  reducing_ = config_.shards_gradients() || m + 1 == count;
  if (sharded_ != nullptr && reducing_) sharded_->set_in_place(config_.reduces_in_place(count));
  launched_ = 0;
  ready_in_.assign(buckets_.size(), 0);
  seen_.assign(params_.size(), 0);
}

void GradSync::on_gradient(size_t param) {
  if (!reducing_) return;
  const size_t b = bucket_of_[param];
  TIDAL_CHECK(b >= launched_, "[data parallel] parameter '", params_[param].first,
              "' received a gradient after its bucket's reduction started (a second contribution in one backward): "
              "run without --overlap-grad-reduce");
  if (seen_[param]) return;
  seen_[param] = 1;
  ++ready_in_[b];
  launch_ready();
}

void GradSync::launch_ready() {
  while (launched_ < buckets_.size() && ready_in_[launched_] == buckets_[launched_].size()) {
    launch(launched_++);
  }
}

void GradSync::launch(size_t bucket) {
  stream_->enqueue([this, bucket] { reduce(bucket); }, "grad_reduce");
}

void GradSync::reduce(size_t bucket) {
  const int64_t start = now_ns();
  const std::vector<size_t>& idx = buckets_[bucket];
  dist::Communicator& comm = stream_comm_ ? *stream_comm_ : comm_;
  dist::Communicator* expert_comm = stream_expert_comm_ ? stream_expert_comm_.get() : expert_data_;
  if (sharded_) {
    sharded_->reduce_scatter(idx, {&comm, expert_comm});
  } else {
    std::vector<std::pair<std::string, Tensor>> subset, experts;
    subset.reserve(idx.size());
    for (size_t i : idx)
      (expert_data_ && models::is_expert_parameter(params_[i].first) ? experts : subset).push_back(params_[i]);
    all_reduce_gradients(comm, subset);
    // Expert parallel: the ranks holding the same experts (every rank of the group has the same list).
    if (expert_comm) all_reduce_gradients(*expert_comm, experts);
  }
  ++stats_.reductions;
  stats_.busy_ns += now_ns() - start;
}

void GradSync::end_micro_batch() {
  if (!reducing_) return;
  reducing_ = false;
  const int64_t start = now_ns();
  if (stream_) {
    // Buckets some rank still lacks gradients for (or a skipped backward): in order, now.
    while (launched_ < buckets_.size()) launch(launched_++);
    stream_->synchronize();
  } else {
    reduce(0);
  }
  stats_.exposed_ns += now_ns() - start;
}

}  // namespace tidal::parallel
