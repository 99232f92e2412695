#include "tidal/parallel/layout.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "tidal/base/error.h"

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

int64_t ParallelLayout::bucket_elements() const {
  return bucket_size > 0 ? bucket_size : std::max<int64_t>(40000000, int64_t(1000000) * world);
}

int64_t ParallelLayout::bucket_elements_of(int64_t elements) const {
  if (overlap_grad_reduce || bucket_size > 0) return bucket_elements();
  return std::max<int64_t>(1, std::min(bucket_elements(), (elements + 2 * world - 1) / (2 * world)));
}

ParallelLayout ParallelLayout::on(int ranks) const {
  TIDAL_CHECK(context <= ranks && ranks % context == 0, "tidal train: --context-parallel-size ", context,
              " does not divide the ", ranks, " ranks: the ranks are data-parallel size x context-parallel size");
  ParallelLayout l = *this;
  l.world = ranks;
  return l;
}

Flags& add_parallel_flags(Flags& f) {
  return f
      .option("context-parallel-size",
              "split every sample's sequence over C ranks (ring attention with --attention flash, all-gathered K/V "
              "with eager; default 1: off); the ranks must be a multiple of C and --seq-length a multiple of 2C",
              "C")
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
              "parameters per bucket of --overlap-grad-reduce (and of ZeRO-2/3's buckets reduced during backward with "
              "accumulation, by default at most half a rank's share of the model), and per exchange round of the "
              "distributed optimizer's reduce-scatter (default max(40000000, 1000000 x ranks), Megatron's)",
              "N")
      .option("distributed-timeout-minutes",
              "end the job when a collective has waited this long for another rank (stuck, stopped or gone; "
              "default 10, Megatron's)",
              "M")
      .flag("overlap-param-gather",
            "ZeRO-3: gather the next layer's parameters on a communication stream while the current one computes")
      .option("expert-model-parallel-size",
              "divide each MoE layer's experts among groups of E ranks, tokens exchanged all-to-all (default 1)", "E")
      .option("distributed-backend",
              "what moves tensors between the ranks: mpi (default) or nccl (GPU memory over NCCL, bootstrapped over "
              "MPI; needs --device cuda and a CUDA build)",
              "B");
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

ParallelLayout parse_parallel_layout(const Flags& f) {
  ParallelLayout l;
  l.sharding = parse_sharding_strategy(f);
  l.overlap_grad_reduce = f.flag_on("overlap-grad-reduce");
  l.bucket_size = f.integer("ddp-bucket-size", 0, 1, int64_t(1) << 40);
  l.overlap_param_gather = f.flag_on("overlap-param-gather");
  l.timeout_minutes = f.number("distributed-timeout-minutes", l.timeout_minutes, 1e-3, 1e6);
  l.expert = int(f.integer("expert-model-parallel-size", 1, 1, kMaxDataParallelSize));
  TIDAL_CHECK(!l.overlap_param_gather || l.sharding == ShardingStrategy::optim_grads_params,
              "tidal train: --overlap-param-gather overlaps ZeRO-3's gathering of each layer's parameters: give "
              "--data-parallel-sharding-strategy optim_grads_params too (the other strategies keep whole parameters)");
  TIDAL_CHECK(!f.has("ddp-bucket-size") || l.overlap_grad_reduce || l.sharded(),
              "tidal train: --ddp-bucket-size sizes the buckets of --overlap-grad-reduce and the distributed "
              "optimizer's exchange rounds: give --overlap-grad-reduce or --use-distributed-optimizer too");
  l.context = int(f.integer("context-parallel-size", 1, 1, kMaxDataParallelSize));
  if (f.has("distributed-backend")) l.backend = dist::parse_distributed_backend(f.str("distributed-backend"));
  return l;
}

void to_json(nlohmann::json& j, const ParallelLayout& l) {
  j["data_parallel_sharding_strategy"] = sharding_name(l.sharding);
  j["overlap_grad_reduce"] = l.overlap_grad_reduce;
  if (l.overlap_grad_reduce) j["ddp_bucket_size"] = l.bucket_size;
  j["overlap_param_gather"] = l.overlap_param_gather;
  j["expert_model_parallel_size"] = l.expert;
  j["context_parallel_size"] = l.context;
}

void check_expert_parallel(const ParallelLayout& l, const models::ModelConfig& model) {
  const int e = l.expert, ranks = l.world;
  if (e == 1) return;
  TIDAL_CHECK(model.is_moe(), "tidal train: --expert-model-parallel-size ", e,
              " divides the experts of MoE layers, but the model (", model.model_type,
              ") has none: give 1, or a MoE model (e.g. --model tiny-qwen3-moe)");
  TIDAL_CHECK(ranks % e == 0, "tidal train: --expert-model-parallel-size ", e, " does not divide the ", ranks,
              " ranks: the ranks are data-parallel groups of ", e, " expert-parallel ranks");
  TIDAL_CHECK(model.num_experts % e == 0, "tidal train: --expert-model-parallel-size ", e,
              " does not divide the model's ", model.num_experts, " experts (num_experts): each rank holds ",
              "num_experts / E of them");
}

void check_context_parallel(const ParallelLayout& l, int64_t seq_length) {
  const int64_t c = l.context;
  if (c == 1) return;
  TIDAL_CHECK(seq_length % (2 * c) == 0, "tidal train: --seq-length ", seq_length,
              " is not a multiple of 2 x --context-parallel-size ", c, " = ", 2 * c,
              ": each rank holds two equal chunks of every sequence");
}

}  // namespace tidal::parallel
