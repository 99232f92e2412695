// Note [Cost model] (docs/planning.md, "The cost model"): a roofline per recorded kernel, summed in
// the order the compute thread runs them (one stream: kernels never overlap each other), then the
// copies and collectives that side streams run, each hidden behind the compute it overlaps, or exposed
// for the part that is longer. On the cpu backend a copy or comm stream competes with the compute
// threads for cores and memory bandwidth; the model does not charge for that (there is no measured
// factor to take it from): a hidden copy costs nothing, so CPU predictions with offload, swap or
// overlap are optimistic.
#include "tidal/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/memory/estimator.h"
#include "tidal/memory/recompute.h"
#include "tidal/ops/attention.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/shard_layout.h"
#include "tidal/parallel/data.h"

namespace tidal::plan {
namespace {

void check_rate(double v, const char* field, const DeviceProfile& p) {
  TIDAL_CHECK(v > 0, "[cost model] device profile '", p.name, "': ", field,
              " must be > 0 to cost this step (calibrate it with tidal plan --calibrate or set it in the profile)");
}

double flop_rate(const KernelCost& k, const DeviceProfile& p) {
  const bool bf16 = k.dtype == DType::bf16;
  if (k.kind == CostKind::gemm) {
    const double r = bf16 ? p.gemm_flops_bf16 : p.gemm_flops_f32;
    check_rate(r, bf16 ? "gemm_flops_bf16" : "gemm_flops_f32", p);
    return r;
  }
  const double r = bf16 ? p.attention_flops_bf16 : p.attention_flops_f32;
  check_rate(r, bf16 ? "attention_flops_bf16" : "attention_flops_f32", p);
  return r;
}

// The roofline part of a kernel's time (no overhead).
double roofline_s(const KernelCost& k, const DeviceProfile& p) {
  if (k.kind == CostKind::host_transfer) {
    check_rate(p.h2d_bandwidth, "h2d_bandwidth", p);
    check_rate(p.d2h_bandwidth, "d2h_bandwidth", p);
    return double(k.bytes) / std::min(p.h2d_bandwidth, p.d2h_bandwidth);
  }
  check_rate(p.memory_bandwidth, "memory_bandwidth", p);
  const double memory = double(k.bytes) / p.memory_bandwidth;
  if (k.kind != CostKind::gemm && k.kind != CostKind::attention) return memory;
  return std::max(double(k.flops) / flop_rate(k, p), memory);
}

// The rank's parameters the dry run built: tensors, elements and of them the experts'.
struct RankParameters {
  int64_t tensors = 0, elements = 0, experts = 0;
};
RankParameters rank_parameters(const DryRun& run) {
  RankParameters r;
  r.tensors = int64_t(run.parameter_numels.size());
  for (size_t i = 0; i < run.parameter_numels.size(); ++i) {
    r.elements += run.parameter_numels[i];
    if (i < run.expert_parameter.size() && run.expert_parameter[i]) r.experts += run.parameter_numels[i];
  }
  return r;
}

// Compute time per layer and phase, for the copies and collectives that overlap it.
struct Compute {
  std::vector<double> forward, backward;  // per layer: forward; backward + recompute
  double backward_total = 0, forward_total = 0, optimizer = 0;
  double attention_forward = 0, attention_backward = 0;  // attention kernels, every layer (ring overlap)
};

// Activation offload (docs/offload.md, "How it works"): blocks are layers and the last is never
// offloaded. Block l's saved tensors go to the host as the block saves them and must be there when
// block l + 1 starts: the copy hides behind block l's forward. In backward, block l comes back from the
// first unpack of block l + K (K = --offload-prefetch-depth): behind the backward (and recompute) of
// blocks l + K ... l + 1; K = 0 exposes it all. Per block, the exposed part is the copy beyond that
// compute (queueing on the copy stream when copies outrun compute is not modelled).
void add_offload(const train::TrainArgs& args, const Compute& c, int64_t accum, const DeviceProfile& p, StepTime& t) {
  const int64_t layers = args.model.num_hidden_layers;
  if (!args.memory.offload.enabled || layers < 2) return;
  const AttentionKernel kernel = args.attention;
  memory::ActivationInputs inputs =
      memory::activation_inputs(args.memory, args.micro_batch_size, args.seq_length / args.parallel.context, kernel,
                                args.precision.param_dtype());
  inputs.parallel = args.parallel;
  const memory::ActivationEstimate est = memory::estimate_activations(args.model, inputs);
  const double block = double(est.offloaded_per_step) / double(layers - 1);
  check_rate(p.d2h_bandwidth, "d2h_bandwidth", p);
  check_rate(p.h2d_bandwidth, "h2d_bandwidth", p);
  double out = block / p.d2h_bandwidth, in = block / p.h2d_bandwidth;
  if (args.memory.offload.target == memory::OffloadTarget::disk) {  // host then the spill file, in series
    check_rate(p.disk_bandwidth, "disk_bandwidth", p);
    out += block / p.disk_bandwidth;
    in += block / p.disk_bandwidth;
  }
  const int64_t depth = std::max<int64_t>(0, args.memory.offload.prefetch_depth);
  const double per_mb = 1.0 / double(accum);
  double exposed = 0;
  for (int64_t l = 0; l + 1 < layers; ++l) {
    exposed += std::max(0.0, out - c.forward[size_t(l)] * per_mb);
    double behind = 0;
    for (int64_t j = l + 1; j <= std::min(l + depth, layers - 1); ++j) behind += c.backward[size_t(j)] * per_mb;
    exposed += std::max(0.0, in - behind);
  }
  t.copy_s += double(accum) * double(layers - 1) * (out + in);
  t.exposed_copy_s += double(accum) * exposed;
}

// Swap optimizer (memory/swap_optimizer.h): the states cross in K windows; while window i is updated,
// window i - 1 goes out and then window i + 1 comes in. The first window's way in and the last one's
// way out are exposed, and each window's copies beyond its update.
void add_swap(const DryRun& run, const train::TrainArgs& args, const Compute& c, double share, const DeviceProfile& p,
              StepTime& t) {
  if (!args.memory.swap_optimizer.on) return;
  const int64_t K = std::max<int64_t>(1, args.memory.swap_optimizer.requested_times());
  const double states = double(run.device.category[size_t(MemoryCategory::optimizer_state)].peak) * share;
  check_rate(p.d2h_bandwidth, "d2h_bandwidth", p);
  check_rate(p.h2d_bandwidth, "h2d_bandwidth", p);
  const double in = states / double(K) / p.h2d_bandwidth, out = states / double(K) / p.d2h_bandwidth;
  const double update = c.optimizer / double(K);
  double exposed = in + out;
  for (int64_t i = 0; i < K && K > 1; ++i) {
    const double copies = (i > 0 ? out : 0.0) + (i + 1 < K ? in : 0.0);
    exposed += std::max(0.0, copies - update);
  }
  t.copy_s += double(K) * (in + out);
  t.exposed_copy_s += exposed;
}

// Data-parallel collectives (docs/distributed.md), per rank: an all-reduce moves 2(n-1)/n of the
// bytes, a reduce-scatter or an all-gather (n-1)/n, where n is the group's ranks: all N for the dense
// parameters, the N / E of an expert-data group for a rank's experts (expert parallelism E). Without
// sharding gradients are all-reduced tensor by tensor (two collectives each: docs/distributed.md, "Not
// yet"); sharded, each group's are reduce-scattered at once (a bucket at a time with overlap) and its
// parameters gathered at once after the update, or layer by layer in forward and backward (ZeRO-3).
// Gradient reductions overlap the backward of the micro-batch that reduces under --overlap-grad-reduce
// (all but the last bucket); ZeRO-3's parameter gathers overlap compute under --overlap-param-gather;
// the rest is exposed.
void add_collectives(const DryRun& run, const train::TrainArgs& args, const Compute& c, int64_t accum, int64_t ranks,
                     const DeviceProfile& p, StepTime& t) {
  if (ranks <= 1) return;
  check_rate(p.collective_bandwidth, "collective_bandwidth", p);
  const RankParameters rp = rank_parameters(run);
  const int expert_parallel = args.parallel.expert;
  const int64_t expert_ranks = std::max<int64_t>(1, ranks / expert_parallel);
  const int64_t groups = expert_parallel > 1 && rp.experts > 0 ? 2 : 1;
  // Elements weighted by their group's (n-1)/n.
  const auto moved = [](double elements, int64_t n) { return elements * double(n - 1) / double(n); };
  const double elements = moved(double(rp.elements - rp.experts), ranks) + moved(double(rp.experts), expert_ranks);
  const int64_t item = dtype_size(args.precision.param_dtype());
  const double grads = elements * 4, weights = elements * double(item);  // f32 gradients (or f32 sums)
  const parallel::ParallelLayout& dp = args.parallel;
  // With overlap, the last bucket's share is the least that stays exposed. ZeRO-2/3 with accumulation reduce
  // bucket by bucket without overlap too (Note [Synchronous buckets], parallel/grad_sync.cpp): a collective per
  // bucket, exposed.
  const bool by_bucket = dp.reduces_by_bucket(accum, rp.experts > 0);
  const int64_t per_bucket = dp.overlap_grad_reduce ? dp.bucket_elements() : dp.bucket_elements_of(rp.elements);
  const int64_t buckets = std::max<int64_t>(1, (rp.elements + per_bucket - 1) / per_bucket);
  auto seconds = [&](double bytes, int64_t count) {
    return bytes / p.collective_bandwidth + double(count) * p.collective_latency_s;
  };
  const int64_t sharded_reductions = groups * (by_bucket ? buckets : 1);
  double reduce = 0, gather = 0;  // one reduction; one pass of parameter gathers
  int64_t reductions = 1, gathers = 0, gathered_per_pass = groups;
  switch (dp.sharding) {
    case parallel::ShardingStrategy::no_shard: reduce = seconds(2 * grads, 2 * rp.tensors); break;
    case parallel::ShardingStrategy::optim:
      reduce = seconds(grads, sharded_reductions);
      gathers = 1;
      break;
    case parallel::ShardingStrategy::optim_grads:
      reduce = seconds(grads, sharded_reductions);
      reductions = accum;
      gathers = 1;
      break;
    case parallel::ShardingStrategy::optim_grads_params:
      reduce = seconds(grads, sharded_reductions);
      reductions = accum;
      gathers = 2 * accum;                                              // forward and backward of every micro-batch
      gathered_per_pass = groups * (args.model.num_hidden_layers + 1);  // layer by layer, and the rest
      break;
  }
  gather = seconds(weights, gathered_per_pass);
  const double scalars = seconds(0, 2);  // the loss and the gradient norm
  double exposed = scalars;
  const double backward_mb = c.backward_total / double(accum);
  exposed +=
      double(reductions) * (dp.overlap_grad_reduce ? std::max(reduce / double(buckets), reduce - backward_mb) : reduce);
  if (dp.sharding == parallel::ShardingStrategy::optim_grads_params && dp.overlap_param_gather) {
    const double pass = (c.forward_total + c.backward_total) / double(gathers);
    exposed += double(gathers) * std::max(0.0, gather - pass);
  } else {
    exposed += double(gathers) * gather;
  }
  t.comm_s += double(reductions) * reduce + double(gathers) * gather + scalars;
  t.exposed_comm_s += exposed;
}

// Expert parallelism (models/moe.cpp run_on_owners): per MoE layer and micro-batch, the token counts,
// then the rows to the experts' ranks and back (dispatch and combine) in forward and again in backward;
// a rank sends (E-1)/E of its tokens x top-k rows (the even split). A recompute that replays the MoE
// block (--recompute-modules moe, or the layer in a full-recompute checkpoint) runs its forward's
// counts, dispatch and combine again. The exchanges block the compute thread: all exposed.
void add_all_to_all(const train::TrainArgs& args, int64_t accum, const DeviceProfile& p, StepTime& t) {
  const models::ModelConfig& m = args.model;
  const int64_t e = args.parallel.expert;
  if (e <= 1 || !m.is_moe()) return;
  check_rate(p.collective_bandwidth, "collective_bandwidth", p);
  const std::vector<memory::LayerRecompute> plan = memory::plan_recompute(args.memory.recompute, m);
  int64_t moe_layers = 0, replayed = 0;
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    if (!m.is_moe_layer(l)) continue;
    ++moe_layers;
    if (size_t(l) < plan.size() && (plan[size_t(l)].full || plan[size_t(l)].moe)) ++replayed;
  }
  const int64_t tokens = args.micro_batch_size * args.seq_length / args.parallel.context;
  const double rows = double(tokens * m.num_experts_per_tok * m.hidden_size * dtype_size(args.precision.param_dtype()));
  const double bytes = rows * double(e - 1) / double(e);
  const double layer = 4 * bytes / p.collective_bandwidth + 5 * p.collective_latency_s;   // counts + 4 exchanges
  const double replay = 2 * bytes / p.collective_bandwidth + 3 * p.collective_latency_s;  // counts + 2
  const double s = double(accum) * (double(moe_layers) * layer + double(replayed) * replay);
  t.all_to_all_s += s;
  t.comm_s += s;
  t.exposed_comm_s += s;
}

// Context parallelism (ops/ring_attention.h): per layer and micro-batch, C-1 K/V blocks arrive in
// forward, each while attention computes on the block before it (a worker thread: max(compute,
// comm) per exchange, the part beyond compute exposed). Backward's C exchanges run the same way: the
// first carries the next K/V block, the middle ones K/V and the previous step's f32 dK/dV, the last
// the dK/dV only; then the last dK/dV, going home, blocks.
// With --attention eager (ops/context_gather_attention.h) K and V are all-gathered instead, and their
// gradients reduce-scattered home, blocking: per layer and micro-batch a rank sends (C-1) x its K/V in
// forward and again in backward (two collectives each), and once more in a recompute that replays the
// attention core (--recompute-modules core_attn, or the layer inside a full recompute).
void add_ring(const train::TrainArgs& args, const Compute& c, int64_t accum, const DeviceProfile& p, StepTime& t) {
  const int64_t cp = args.parallel.context;
  const int64_t layers = args.model.num_hidden_layers;
  if (cp <= 1 || layers < 1) return;
  check_rate(p.collective_bandwidth, "collective_bandwidth", p);
  const models::ModelConfig& m = args.model;
  const double kv = double(args.micro_batch_size * (args.seq_length / cp) * m.kv_elements_per_token());
  const double latency = p.collective_latency_s;
  if (args.attention == AttentionKernel::eager) {
    const double pass =
        double(cp - 1) * kv * double(dtype_size(args.precision.param_dtype())) / p.collective_bandwidth + 2 * latency;
    const std::vector<memory::LayerRecompute> plan = memory::plan_recompute(args.memory.recompute, m);
    double passes = 0;
    for (int64_t l = 0; l < layers; ++l)
      passes += 2 + (size_t(l) < plan.size() && (plan[size_t(l)].full || plan[size_t(l)].core_attn) ? 1 : 0);
    const double s = double(accum) * passes * pass;
    t.ring_s += s;
    t.exposed_ring_s += s;
    t.comm_s += s;
    t.exposed_comm_s += s;
    return;
  }
  const double block = kv * double(dtype_size(args.precision.param_dtype())) / p.collective_bandwidth;
  const double grads = kv * 4 / p.collective_bandwidth;
  const double per = double(accum * layers), steps = double(cp - 1);
  const double forward = c.attention_forward / per / double(cp), backward = c.attention_backward / per / double(cp);
  std::vector<double> back;  // backward's exchanges on the worker
  for (int64_t s = 0; s < cp; ++s) back.push_back((s + 1 < cp ? block : 0.0) + (s > 0 ? grads : 0.0) + latency);
  double ring = steps * (block + latency) + grads + latency, exposed = grads + latency;
  exposed += steps * std::max(0.0, block + latency - forward);
  for (double e : back) {
    ring += e;
    exposed += std::max(0.0, e - backward);
  }
  ring *= per;
  exposed *= per;
  t.ring_s += ring;
  t.exposed_ring_s += exposed;
  t.comm_s += ring;
  t.exposed_comm_s += exposed;
}

// The dry run's kernels as a rank of `args` runs them: a batch kernel's time by `batch_share` of the
// micro-batches the dry run ran, an update's by `update_share`; into `t` by kind and `c` by phase and layer.
void add_kernels(const DryRun& run, const train::TrainArgs& args, const DeviceProfile& profile, double batch_share,
                 double update_share, StepTime& t, Compute& c) {
  const size_t layers = size_t(std::max<int64_t>(0, args.model.num_hidden_layers));
  c.forward.assign(layers, 0.0);
  c.backward.assign(layers, 0.0);
  double kernels = 0, flops = 0;
  for (const StepKernel& sk : run.kernels) {
    if (sk.phase == StepPhase::collective) continue;  // the collective's own work: add_collectives times it
    const KernelCost& k = sk.cost;
    const bool update = sk.phase == StepPhase::optimizer || k.kind == CostKind::optimizer;
    const double share = (update ? update_share : batch_share) * double(sk.count);
    const double roof = roofline_s(k, profile) * share, overhead = profile.kernel_overhead_s * share;
    const double time = roof + overhead;
    kernels += share;
    flops += double(k.flops) * share;
    t.overhead_s += overhead;
    switch (k.kind) {
      case CostKind::gemm: t.gemm_s += roof; break;
      case CostKind::attention: t.attention_s += roof; break;
      case CostKind::memory:
      case CostKind::copy: t.memory_s += roof; break;
      case CostKind::optimizer: t.optimizer_s += roof; break;
      case CostKind::host_transfer:  // synchronous: the compute thread waits for it
        t.copy_s += roof;
        t.exposed_copy_s += roof;
        break;
    }
    const bool in_layer = sk.layer >= 0 && size_t(sk.layer) < layers;
    switch (sk.phase) {
      case StepPhase::forward:
        if (k.kind == CostKind::attention) c.attention_forward += time;
        c.forward_total += time;
        if (in_layer) c.forward[size_t(sk.layer)] += time;
        break;
      case StepPhase::recompute: t.recompute_s += time; [[fallthrough]];
      case StepPhase::backward:
        if (k.kind == CostKind::attention) c.attention_backward += time;
        c.backward_total += time;
        if (in_layer) c.backward[size_t(sk.layer)] += time;
        break;
      case StepPhase::optimizer:
        if (k.kind == CostKind::optimizer) c.optimizer += time;
        break;
      case StepPhase::loss:
      case StepPhase::collective:
      case StepPhase::other: break;
    }
  }
  t.kernels = std::llround(kernels);
  t.flops = std::llround(flops);
}

}  // namespace

double kernel_time_s(const KernelCost& k, const DeviceProfile& profile) {
  return roofline_s(k, profile) + profile.kernel_overhead_s;
}

StepTime predict_step_time(const DryRun& run, const train::TrainArgs& args, const DeviceProfile& profile) {
  const int64_t data_parallel = args.parallel.world;
  TIDAL_CHECK(data_parallel >= 1, "[cost model] data-parallel ranks must be >= 1, got ", data_parallel);
  TIDAL_CHECK(!run.kernels.empty(), "[cost model] the dry run recorded no kernels to cost");
  // A dry run of one process (run.ranks 1) ran the whole global batch: a rank runs its share of the
  // micro-batches, and under sharding its share of the update. A dry run that played a rank of
  // `data_parallel` (dry_run(args, rank, ranks)) ran that rank's share already.
  TIDAL_CHECK(run.ranks == 1 || run.ranks == data_parallel, "[cost model] the dry run played a rank of ", run.ranks,
              " ranks, not of ", data_parallel);
  const int64_t dry_micro_batches = std::max<int64_t>(1, args.grad_accumulation_steps());
  const int64_t dp = std::max<int64_t>(1, args.parallel.data());
  TIDAL_CHECK(dry_micro_batches % dp == 0, "[cost model] the global batch's ", dry_micro_batches,
              " micro-batches do not divide over ", dp,
              " data-parallel ranks: make --global-batch-size a multiple of --micro-batch-size x ranks");
  const int64_t accum = dry_micro_batches / dp;
  const bool one_rank_run = run.ranks > 1;
  const double batch_share = one_rank_run ? 1.0 : 1.0 / double(dp);
  // The update's share of what the dry run updated: a sharded run updates the largest rank's shard. A
  // one-process dry run updated the whole model; a dry run of one rank of a sharded run its shard, one
  // of a no_shard run the rank's whole parameters, of which the shard is a share. Timing one strategy
  // from another's kernels: ZeRO-1 from no_shard's (the same forward and backward), ZeRO-3 from
  // ZeRO-2's (the same kernels: ZeRO-3's gathers are collectives). ZeRO-2 and 3 from no_shard's is
  // approximate: no_shard accumulates the micro-batches' whole gradients in backward, they their shard.
  const parallel::ShardingStrategy sharding = args.parallel.sharding;
  const bool zero3_from_zero2 = run.sharding == parallel::ShardingStrategy::optim_grads &&
                                sharding == parallel::ShardingStrategy::optim_grads_params;
  TIDAL_CHECK(!one_rank_run || run.sharding == sharding || run.sharding == parallel::ShardingStrategy::no_shard ||
                  zero3_from_zero2,
              "[cost model] a dry run of a rank under ", parallel::sharding_name(run.sharding), " does not time ",
              parallel::sharding_name(sharding));
  double update_share = 1;
  if (sharding != parallel::ShardingStrategy::no_shard && !one_rank_run) {
    update_share = 1.0 / double(data_parallel);
  } else if (sharding != parallel::ShardingStrategy::no_shard && run.sharding == parallel::ShardingStrategy::no_shard) {
    std::vector<bool> expert = run.expert_parameter;
    expert.resize(run.parameter_numels.size(), false);
    const int64_t shard = optim::largest_shard(run.parameter_numels, expert, int(data_parallel), args.parallel.expert,
                                               optim::kGradNormChunk);
    update_share = double(shard) / double(std::max<int64_t>(1, rank_parameters(run).elements));
  }
  StepTime t;
  Compute c;
  add_kernels(run, args, profile, batch_share, update_share, t, c);
  t.compute_s = t.gemm_s + t.attention_s + t.memory_s + t.optimizer_s + t.overhead_s;
  add_offload(args, c, accum, profile, t);
  add_swap(run, args, c, update_share, profile, t);
  add_collectives(run, args, c, accum, data_parallel, profile, t);
  add_all_to_all(args, accum, profile, t);
  add_ring(args, c, accum, profile, t);
  t.hidden_copy_fraction = t.copy_s > 0 ? 1.0 - t.exposed_copy_s / t.copy_s : 1.0;
  t.total_s = t.compute_s + t.exposed_copy_s + t.exposed_comm_s;
  return t;
}

}  // namespace tidal::plan
