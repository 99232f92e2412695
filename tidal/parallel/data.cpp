#include "tidal/parallel/data.h"

#include "tidal/base/error.h"
#include "tidal/dist/collectives.h"
#include "tidal/memory_scope.h"

namespace tidal::parallel {

const char* sharding_name(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::no_shard: return "no_shard";
    case ShardingStrategy::optim: return "optim";
    case ShardingStrategy::optim_grads: return "optim_grads";
    case ShardingStrategy::optim_grads_params: return "optim_grads_params";
  }
  return "?";
}

Flags& add_data_parallel_flags(Flags& f) {
  return f
      .flag("use-distributed-optimizer",
            "shard AdamW's states over the data-parallel ranks (ZeRO-1; = --data-parallel-sharding-strategy optim)")
      .option(
          "data-parallel-sharding-strategy",
          "what the data-parallel ranks shard: no_shard (default), optim (ZeRO-1: AdamW's states), "
          "optim_grads (ZeRO-2: and the gradients), optim_grads_params (ZeRO-3: and the parameters, gathered layer by "
          "layer)",
          "S")
      .flag("overlap-grad-reduce",
            "reduce the gradients in buckets on a communication stream while backward runs (default: after it)")
      .option("ddp-bucket-size",
              "parameters per bucket of --overlap-grad-reduce (default max(40000000, 1000000 x ranks), Megatron's)",
              "N")
      .flag("overlap-param-gather",
            "ZeRO-3: gather the next layer's parameters on a communication stream while the current one computes")
      .option("expert-model-parallel-size",
              "divide each MoE layer's experts among groups of E ranks, tokens exchanged all-to-all (default 1)", "E");
}

namespace {

ShardingStrategy parse_sharding_strategy(const Flags& f) {
  ShardingStrategy s = f.flag_on("use-distributed-optimizer") ? ShardingStrategy::optim : ShardingStrategy::no_shard;
  if (!f.has("data-parallel-sharding-strategy")) return s;
  const std::string name = f.str("data-parallel-sharding-strategy");
  ShardingStrategy given = ShardingStrategy::no_shard;
  if (name == "no_shard")
    given = ShardingStrategy::no_shard;
  else if (name == "optim")
    given = ShardingStrategy::optim;
  else if (name == "optim_grads")
    given = ShardingStrategy::optim_grads;
  else if (name == "optim_grads_params")
    given = ShardingStrategy::optim_grads_params;
  else
    detail::throw_error(detail::str_cat("tidal train: unknown --data-parallel-sharding-strategy '", name,
                                        "': valid are no_shard, optim, optim_grads, optim_grads_params"));
  TIDAL_CHECK(!f.flag_on("use-distributed-optimizer") || given == ShardingStrategy::optim,
              "tidal train: --use-distributed-optimizer shards the optimizer states, but "
              "--data-parallel-sharding-strategy says ",
              name, ": give one of them");
  return given;
}

}  // namespace

DataParallelConfig parse_data_parallel(const Flags& f) {
  DataParallelConfig c;
  c.sharding = parse_sharding_strategy(f);
  c.overlap_grad_reduce = f.flag_on("overlap-grad-reduce");
  c.bucket_size = f.integer("ddp-bucket-size", 0, 1, int64_t(1) << 40);
  c.overlap_param_gather = f.flag_on("overlap-param-gather");
  c.expert_parallel = int(f.integer("expert-model-parallel-size", 1, 1, kMaxDataParallelSize));
  TIDAL_CHECK(!c.overlap_param_gather || c.sharding == ShardingStrategy::optim_grads_params,
              "tidal train: --overlap-param-gather overlaps ZeRO-3's gathering of each layer's parameters: give "
              "--data-parallel-sharding-strategy optim_grads_params too (the other strategies keep whole parameters)");
  TIDAL_CHECK(!f.has("ddp-bucket-size") || c.overlap_grad_reduce,
              "tidal train: --ddp-bucket-size sizes the buckets of --overlap-grad-reduce: give that flag too");
  return c;
}

int64_t micro_batches_per_rank(int64_t global_batch, int64_t micro_batch, int ranks) {
  TIDAL_CHECK(global_batch % (micro_batch * ranks) == 0, "tidal train: --global-batch-size ", global_batch,
              " is not a multiple of --micro-batch-size ", micro_batch, " x ", ranks,
              " data-parallel ranks: the global batch is micro-batch x accumulation steps x ranks");
  return global_batch / (micro_batch * ranks);
}

data::Batch next_rank_batch(data::DataLoader& loader, int64_t micro_batch, int rank, int ranks) {
  const int64_t start = loader.position();
  loader.set_position(start + int64_t(rank) * micro_batch);
  data::Batch b = loader.next(micro_batch);
  loader.set_position(start + int64_t(ranks) * micro_batch);
  return b;
}

void all_reduce_gradients(dist::Communicator& comm, const std::vector<std::pair<std::string, Tensor>>& params) {
  if (comm.size() == 1) return;
  // A parameter takes part when any rank has a gradient for it.
  std::string have(params.size(), '\0');
  for (size_t i = 0; i < params.size(); ++i) have[i] = params[i].second.grad().defined() ? 1 : 0;
  have = dist::any_rank(comm, have);
  for (size_t i = 0; i < params.size(); ++i) {
    if (!have[i]) continue;
    const Tensor& p = params[i].second;
    if (!p.grad().defined()) {
      MemoryScope scope(MemoryCategory::gradient);
      p.set_grad(zeros_like(p));
    }
    dist::all_reduce_sum(comm, p.grad());
  }
}

}  // namespace tidal::parallel
