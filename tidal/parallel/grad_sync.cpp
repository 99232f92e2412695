#include "tidal/parallel/grad_sync.h"

// Note [Synchronous buckets]
// ZeRO-2/3 with accumulation keep the shard's sums (4 S_r bytes) from the step's first reduction on. Reduced
// after backward, every micro-batch's whole gradients (4 P) would stand beside them at its end: more than ZeRO-1,
// which sums the micro-batches in its whole gradients. So, as DeepSpeed's ZeRO-2 does without overlap_comm,
// they reduce bucket by bucket during backward, on the compute thread: a bucket as soon as backward has
// accumulated every gradient in it (the hook runs inside backward), its whole gradients then freed. The buckets
// are --overlap-grad-reduce's (reverse order), at most half a rank's share of the model unless --ddp-bucket-size
// says otherwise (ParallelLayout::bucket_elements_of). Why it is safe:
// - A hook runs once per parameter and backward, after its last contribution: the engine runs an accumulation
//   node when every edge to it has brought its part (autograd/engine.cpp), and a parameter has one such node
//   in a graph (a tied embedding's LM-head part waits there for the embedding's); recompute and offload replay
//   forward inside backward into graphs of their own, dropped, and do not accumulate. So no parameter gets a
//   gradient after its bucket was reduced (on_gradient checks), and each element is summed once per
//   micro-batch in rank order onto the shard's sums: bit for bit the reduction after backward.
// - Collectives in the same order on every rank: the engine runs the nodes in reverse creation order, so
//   ranks whose graphs have the same shape (every model without experts: the data changes values, not the
//   graph) run the hooks, ZeRO-3's gathers, context parallelism's exchanges and the buckets' reductions in the
//   same order. A model with experts is left out: an expert none of a rank's tokens chose has no gradient
//   there, its bucket would wait for the end of backward on that rank and not on the others, while ZeRO-3's
//   gathers or expert parallelism's all-to-alls go on in between. Such a model reduces after backward, as do
//   ZeRO-1 and no_shard (which sum the micro-batches locally), one micro-batch per rank (in place) and one
//   rank (nothing to shard: its "shard" is the whole model).
// - A rank whose backward is skipped (a non-finite loss) reduces every bucket in order at end_micro_batch.

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
  for (size_t i = 0; i < params_.size(); ++i) {
    all_.push_back(i);
    experts_ = experts_ || models::is_expert_parameter(params_[i].first);
  }
  // Buckets (Note [Synchronous buckets]): with --overlap-grad-reduce, or for ZeRO-2/3's synchronous ones.
  const bool bucketed = config_.overlap_grad_reduce || config_.reduces_by_bucket(2, experts_);
  if (!bucketed) {
    buckets_.push_back(all_);  // one bucket, reduced after backward
  } else {
    // Reverse order, cut when a bucket reaches the size: backward produces the last layers' first.
    int64_t elements = 0;
    for (const auto& [name, p] : params_) elements += p.numel();
    const int64_t limit = config_.bucket_elements_of(elements);
    int64_t filled = limit;
    for (size_t k = params_.size(); k-- > 0;) {
      if (filled >= limit) {
        buckets_.emplace_back();
        filled = 0;
      }
      buckets_.back().push_back(k);
      filled += params_[k].second.numel();
    }
  }
  if (config_.overlap_grad_reduce) {
    stream_ = std::make_unique<Stream>("comm");
    stream_comm_ = comm_.duplicate();  // the stream's collectives never meet the compute thread's
    if (expert_data_) stream_expert_comm_ = expert_data_->duplicate();
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i : buckets_[b]) bucket_of_[i] = b;
  ready_in_.assign(buckets_.size(), 0);
  seen_.assign(params_.size(), 0);
  stats_.buckets = int64_t(buckets_.size());
  if (bucketed)
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
  inline_ = reducing_ && !stream_ && !hooks_.empty() && config_.reduces_by_bucket(count, experts_);
  launched_ = 0;
  ready_in_.assign(buckets_.size(), 0);
  seen_.assign(params_.size(), 0);
}

void GradSync::on_gradient(size_t param) {
  if (!reducing_ || (!stream_ && !inline_)) return;
  const size_t b = bucket_of_[param];
  TIDAL_CHECK(b >= launched_, "[data parallel] parameter '", params_[param].first,
              "' received a gradient after its bucket's reduction started (a second contribution in one backward)");
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
  if (!stream_) {  // synchronous: the compute thread waits for all of it
    const int64_t start = now_ns();
    reduce(buckets_[bucket]);
    stats_.exposed_ns += now_ns() - start;
    return;
  }
  stream_->enqueue([this, bucket] { reduce(buckets_[bucket]); }, "grad_reduce");
}

void GradSync::reduce(const std::vector<size_t>& idx) {
  const int64_t start = now_ns();
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
  if (inline_) {  // buckets some gradient was missing from (or a skipped backward): in order, now
    inline_ = false;
    while (launched_ < buckets_.size()) launch(launched_++);
    return;
  }
  const int64_t start = now_ns();
  if (stream_) {
    // Buckets some rank still lacks gradients for (or a skipped backward): in order, now.
    while (launched_ < buckets_.size()) launch(launched_++);
    stream_->synchronize();
  } else {
    reduce(all_);
  }
  stats_.exposed_ns += now_ns() - start;
}

}  // namespace tidal::parallel
