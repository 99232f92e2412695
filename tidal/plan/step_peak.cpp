#include "tidal/plan/step_peak.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <unordered_map>

#include "tidal/dist/meta_communicator.h"
#include "tidal/memory/estimator.h"
#include "tidal/memory/savings.h"
#include "tidal/memory/swap_optimizer.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/config.h"
#include "tidal/models/moe.h"
#include "tidal/nn/lora.h"
#include "tidal/optim/distributed_adamw.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/shard_layout.h"

namespace tidal::plan {
namespace {

// The tokens of a sequence one rank holds: all of them, or its two chunks of 2C under context parallelism.
int64_t local_seq(const TriageSettings& s) { return s.seq / s.parallel.context; }

// What the predictions need of a model's parameters, from a meta-device model built once per
// configuration (a plan predicts many steps of the same model; a 30B MoE model has 18k parameters).
// Under expert parallelism E, rank 0's: the dense parameters and the first num_experts / E experts of
// each MoE layer (every rank holds as many).
struct ModelShape {
  std::vector<memory::SwapParam> params;  // the trained ones (with LoRA the adapters), in named_parameters order
  int64_t frozen = 0;                     // elements of the frozen ones (LoRA's base)
  std::vector<int64_t> frozen_numels;     // each frozen one's elements (ZeRO-3 shards them too)
  std::vector<bool> frozen_expert;        // and whether it is an expert's
  std::vector<bool> expert;               // params[i] is an expert's (models/moe.h is_expert_parameter)
  int64_t outer = 0;                      // elements outside the layers
  std::vector<int64_t> per_layer;         // elements of each layer
  int64_t buffer_bytes = 0;               // buffers (DeepSeek-V3's router biases: f32, on every rank, not sharded)
  std::vector<std::string> adapted;       // LoRA: the adapted modules' names
  int64_t elements = 0;                   // of `params`
  // What the predictions derive from the shapes alone, by (what, ranks, expert-parallel size or dtype and
  // swap windows): a search predicts 10^5 candidates of one model (memo below).
  mutable std::map<std::tuple<int, int64_t, int64_t>, int64_t> derived;
  // The estimator's activations by its inputs (their hash, then the inputs themselves): candidates that
  // differ only in sharding, the optimizer or the loss's head have the same.
  mutable std::unordered_map<uint64_t, std::vector<std::pair<memory::ActivationInputs, memory::ActivationEstimate>>>
      activations;
  mutable int64_t activation_entries = 0;
};

std::mutex& shape_mutex() {
  static std::mutex mu;
  return mu;
}

// `compute()`, once per shape and key.
template <class F>
int64_t memo(const ModelShape& shape, int what, int64_t a, int64_t b, F compute) {
  const std::tuple<int, int64_t, int64_t> key{what, a, b};
  {
    std::lock_guard lock(shape_mutex());
    if (auto it = shape.derived.find(key); it != shape.derived.end()) return it->second;
  }
  const int64_t v = compute();
  std::lock_guard lock(shape_mutex());
  shape.derived.emplace(key, v);
  return v;
}
enum Derived : int { kLargestShard, kFrozenShard, kDenseShard, kExpertShard, kSwapDeviceBytes };

std::string lora_key(const nn::LoraConfig& c) {
  if (!c.enabled()) return "";
  std::string key = "|lora " + std::to_string(c.r);
  for (const std::string& t : c.target_modules) key += " " + t;
  return key;
}

const ModelShape& model_shape(const models::ModelConfig& m, int expert_parallel, const nn::LoraConfig& lora) {
  static std::map<std::string, ModelShape> cache;
  const std::string key = models::config_to_json(m).dump() + "|" + std::to_string(expert_parallel) + lora_key(lora);
  std::lock_guard lock(shape_mutex());
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cache.size() >= 16) cache.clear();  // a bound; the references handed out are used at once
  nn::Init init;
  init.device = Device::meta();
  // Under expert parallelism rank 0's model: its experts only (per-expert modules, or rows of stacked ones).
  const std::unique_ptr<models::CausalLM> model = models::create_model(
      m, init, expert_parallel > 1 ? std::make_shared<dist::MetaCommunicator>(0, expert_parallel) : nullptr);
  std::vector<std::string> adapted;
  if (lora.enabled()) adapted = nn::apply_lora(*model, lora, init).modules;
  ModelShape shape;
  shape.per_layer.assign(size_t(m.num_hidden_layers), 0);
  for (const auto& [name, p] : model->named_parameters()) {
    const bool expert = models::is_expert_parameter(name);
    if (!p.requires_grad()) {
      shape.frozen += p.numel();
      shape.frozen_numels.push_back(p.numel());
      shape.frozen_expert.push_back(expert);
    } else {
      shape.params.push_back({p.numel(), p.dtype()});
      shape.expert.push_back(expert);
      shape.elements += p.numel();
    }
    const int64_t l = model->layer_of_parameter(name);
    (l < 0 ? shape.outer : shape.per_layer[size_t(l)]) += p.numel();
  }
  for (const auto& [name, b] : model->named_buffers()) shape.buffer_bytes += b.nbytes();
  shape.adapted = std::move(adapted);
  return cache.emplace(key, std::move(shape)).first->second;
}

uint64_t hash_of(const memory::ActivationInputs& in) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields' values
  const auto mix = [&h](int64_t v) {
    h ^= uint64_t(v);
    h *= 1099511628211ull;
  };
  for (const int64_t v :
       {in.batch, in.seq, int64_t(in.kernel), int64_t(in.training), int64_t(in.dtype),
        int64_t(in.offload_policy.has_value()), in.offload_policy ? int64_t(in.offload_policy->kind) : 0,
        in.offload_policy ? in.offload_policy->min_bytes : 0, in.offload_prefetch_depth, int64_t(in.parallel.expert),
        int64_t(in.parallel.context), in.loss_chunk, int64_t(in.lora), in.lora_r, int64_t(in.plan.size())})
    mix(v);
  for (const models::LayerRecompute& p : in.plan)
    mix(int64_t(p.full) | int64_t(p.group_start) << 1 | int64_t(p.core_attn) << 2 | int64_t(p.mlp) << 3 |
        int64_t(p.moe) << 4 | int64_t(p.moe_act) << 5 | int64_t(p.activation) << 6 | int64_t(p.norm) << 7 |
        int64_t(p.mla_up_proj) << 8 | int64_t(p.csa_attention) << 9 | int64_t(p.mhc) << 10 | p.group_size << 11);
  return h;
}

memory::ActivationEstimate estimate(const models::ModelConfig& m, const TriageSettings& s, const ModelShape* shape) {
  memory::ActivationInputs in =
      memory::activation_inputs(s.memory, s.micro_batch, local_seq(s), s.attention, s.precision.param_dtype());
  // The estimator reads the expert and context parallel sizes alone (memory/estimator.h): the rest of the
  // layout (sharding, buckets) is left out, so that candidates differing only there share an estimate.
  in.parallel.expert = s.parallel.expert;
  in.parallel.context = s.parallel.context;
  if (s.lora.enabled()) {  // the frozen base keeps less (memory/estimator.h)
    in.lora = true;
    in.lora_modules = (shape != nullptr ? *shape : model_shape(m, s.parallel.expert, s.lora)).adapted;
    in.lora_r = s.lora.r;
  }
  if (shape == nullptr || !in.expert_tokens.empty()) return memory::estimate_activations(m, in);
  const uint64_t h = hash_of(in);
  {
    std::lock_guard lock(shape_mutex());
    if (auto it = shape->activations.find(h); it != shape->activations.end())
      for (const auto& [inputs, estimate] : it->second)
        if (inputs == in) return estimate;
  }
  memory::ActivationEstimate a = memory::estimate_activations(m, in);
  std::lock_guard lock(shape_mutex());
  if (shape->activation_entries >= 65536) {  // a bound on the memo (a search has far fewer distinct inputs)
    shape->activations.clear();
    shape->activation_entries = 0;
  }
  shape->activations[h].emplace_back(std::move(in), a);
  ++shape->activation_entries;
  return a;
}

}  // namespace

// The default loss's logits: the model's dtype (bf16 under --bf16).
int64_t logits_bytes(const models::ModelConfig& m, const TriageSettings& s, int64_t tokens) {
  return tokens * m.vocab_size * dtype_size(s.precision.param_dtype());
}

// The parameters of the model as the swap optimizer plans its windows (a meta-device model: shapes
// only, no bytes), in the run's dtype (the meta-device model is f32; --bf16 makes every parameter bf16).
std::vector<memory::SwapParam> swap_params(const models::ModelConfig& m, const TriageSettings& s) {
  const DType dtype = s.precision.param_dtype();
  if (s.num_parameters > 0) return {{s.num_parameters, dtype}};
  std::vector<memory::SwapParam> params = model_shape(m, s.parallel.expert, s.lora).params;
  for (memory::SwapParam& p : params) p.dtype = dtype;
  return params;
}

int64_t element_count(const std::vector<memory::SwapParam>& params) {
  int64_t n = 0;
  for (const memory::SwapParam& p : params) n += p.numel;
  return n;
}

namespace {

// ZeRO-3's whole parameters at a time: those outside the layers, and the largest layer's — or two
// adjacent layers' with --overlap-param-gather (a meta-device model); all of them (and no layer) when
// only the count is known (`shape` null).
std::pair<int64_t, int64_t> gathered_elements(const ModelShape* shape, const TriageSettings& s, int64_t n) {
  if (shape == nullptr) return {n, 0};
  const std::vector<int64_t>& per_layer = shape->per_layer;
  int64_t layers = 0;
  for (size_t l = 0; l < per_layer.size(); ++l)
    layers = std::max(
        layers, per_layer[l] + (s.parallel.overlap_param_gather && l + 1 < per_layer.size() ? per_layer[l + 1] : 0));
  return {shape->outer, layers};
}

// The largest rank's shard of the trained parameters (optim/shard_layout.h); under expert parallelism
// Megatron's layout: the dense parameters over all N ranks, the rank's experts over the N / E of its
// expert-data group. Only the count known (`shape` null): one piece of `n` elements.
int64_t largest_shard(const ModelShape* shape, const TriageSettings& s, int64_t n) {
  if (shape == nullptr)
    return optim::largest_shard({n}, {false}, s.parallel.world, s.parallel.expert, optim::kGradNormChunk);
  return memo(*shape, kLargestShard, s.parallel.world, s.parallel.expert, [&] {
    std::vector<int64_t> numels;
    for (const memory::SwapParam& p : shape->params) numels.push_back(p.numel);
    return optim::largest_shard(numels, shape->expert, s.parallel.world, s.parallel.expert, optim::kGradNormChunk);
  });
}

// The reduce-scatter's buffer of every rank's pieces (f32, optim/distributed_adamw.cpp), one group at
// a time: the dense parameters' largest shard times the N ranks, and under expert parallelism the
// experts' times the N / E of an expert-data group; each shard at most `bucket` elements with overlap, and
// every exchange round at most optim::reduce_round elements of it.
int64_t reduce_scatter_pieces(const ModelShape* shape, const TriageSettings& s, int64_t n, int64_t bucket) {
  const bool by_kind = shape != nullptr && s.parallel.expert > 1;
  // The largest shard of the dense parameters (or all of them) over `ranks`, or the experts'.
  const auto shard_of = [&](bool experts, int ranks) -> int64_t {
    if (shape == nullptr) return optim::largest_shard({n}, {false}, ranks, 1, optim::kGradNormChunk);
    return memo(*shape, experts ? kExpertShard : kDenseShard, ranks, by_kind, [&] {
      std::vector<int64_t> numels;
      for (size_t i = 0; i < shape->params.size(); ++i)
        if ((by_kind && shape->expert[i]) == experts) numels.push_back(shape->params[i].numel);
      return numels.empty() ? int64_t(-1)
                            : optim::largest_shard(numels, std::vector<bool>(numels.size(), false), ranks, 1,
                                                   optim::kGradNormChunk);
    });
  };
  int64_t most = 0;
  for (const auto& [experts, ranks] :
       {std::pair{false, s.parallel.world}, std::pair{true, std::max(1, s.parallel.world / s.parallel.expert)}}) {
    if (experts && !by_kind) continue;
    const int64_t shard = shard_of(experts, ranks);
    if (shard < 0) continue;  // no such parameters
    // A call's pieces on this rank: its shard, or at most a bucket of it; the exchange goes in rounds of
    // bucket / ranks elements of them per rank (Note [Reduce-scatter in rounds]).
    const int64_t mine = std::min(shard, bucket);
    const int64_t round = optim::reduce_round(s.parallel.bucket_elements(), mine, ranks);
    most = std::max(most, int64_t(ranks) * std::min(mine, round));
  }
  return 4 * most;
}

}  // namespace

int64_t exchange_buffer_bytes(const models::ModelConfig& m, const TriageSettings& s) {
  const int64_t tokens = s.micro_batch * local_seq(s), el = dtype_size(s.precision.param_dtype());
  int64_t bytes = 0;
  if (s.parallel.expert > 1 && m.is_moe()) bytes = 2 * tokens * m.num_experts_per_tok * m.hidden_size * el;
  if (s.parallel.context > 1 && s.attention == AttentionKernel::eager) {
    // Eager's all-gather (ops/context_gather_attention.h): in backward the whole sequence's dK and dV,
    // and for one of them its blocks by rank and the reduce-scatter's copy of them.
    bytes = std::max(bytes, 2 * s.parallel.context * tokens * m.kv_elements_per_token() * el);
  } else if (s.parallel.context > 1) {
    const int64_t kv = tokens * m.kv_elements_per_token();  // one block's K and V, elements
    bytes = std::max(bytes, 2 * kv * el + 2 * kv * 4);
  }
  return bytes;
}

StepPeak predict_step_peak(const models::ModelConfig& m, const TriageSettings& s) {
  StepPeak p;
  // The meta-device model's shapes (none when only the parameter count is known).
  const ModelShape* shape = s.num_parameters > 0 ? nullptr : &model_shape(m, s.parallel.expert, s.lora);
  const int64_t n = shape != nullptr ? shape->elements : s.num_parameters;
  const DType dtype = s.precision.param_dtype();
  const int64_t param_size = dtype_size(dtype);  // bytes of a parameter element: 4, or 2 under --bf16
  const int64_t whole = 4 * n;                   // the whole gradients (f32: under --bf16 the f32 sums)
  // --bf16: a backward's bf16 gradient lives beside the sums until its hook adds it (train/main_grads.h):
  // a parameter used once is added as soon as its backward is done, a tied embedding's only after
  // the embedding's backward — through the whole backward, where replays and prefetches peak.
  const int64_t in_flight =
      dtype == DType::bf16 && m.tie_word_embeddings && !s.lora.enabled() ? 2 * m.vocab_size * m.hidden_size : 0;
  // The distributed optimizer: AdamW's states of the largest shard (optim/shard_layout.h). ZeRO-1, 2
  // and 3 alike at the step's last reduce-scatter, where the peak of the step's end is.
  const bool sharded = s.parallel.sharded();
  int64_t shard = n;
  if (sharded) shard = largest_shard(shape, s, n);
  const int64_t states = memory::swap_state_bytes_per_element(dtype) * shard;  // moments (+ bf16's master)
  // ZeRO-3: the shard, and the whole parameters outside the layers and of one layer at a time while
  // layers compute (none at the step's end).
  const bool zero3 = s.parallel.shards_parameters();
  const auto [outer, layer] = zero3 ? gathered_elements(shape, s, n) : std::pair<int64_t, int64_t>{n, 0};
  // Buffers (router biases) count as parameters, as the allocator accounts them.
  const int64_t model_buffers = shape == nullptr ? 0 : shape->buffer_bytes;
  const int64_t frozen = shape == nullptr ? 0 : shape->frozen;  // LoRA's base
  // ZeRO-3 with LoRA shards the frozen base too (its own sharding, train/setup.h): its largest rank's shard.
  int64_t frozen_shard = 0;
  if (zero3 && frozen > 0)
    frozen_shard = memo(*shape, kFrozenShard, s.parallel.world, s.parallel.expert, [&] {
      return optim::largest_shard(shape->frozen_numels, shape->frozen_expert, s.parallel.world, s.parallel.expert,
                                  optim::kGradNormChunk);
    });
  p.parameters = param_size * (zero3 ? shard + frozen_shard + outer + layer : n + frozen) + model_buffers;
  const int64_t parameters_at_end = param_size * (zero3 ? shard + frozen_shard + outer : n + frozen) + model_buffers;
  const memory::SwapOptimizerConfig& swap = s.memory.swap_optimizer;
  const int64_t param_count = shape != nullptr ? int64_t(shape->params.size()) : 1;
  const int64_t swap_k = std::min<int64_t>(swap.requested_times(), param_count);
  // The swap optimizer's windows over a shard: about its share of the whole's windows.
  const auto swapped_bytes = [&] { return memory::swap_optimizer_device_bytes(swap_params(m, s), swap_k); };
  const int64_t swapped = !swap.on           ? 0
                          : shape == nullptr ? swapped_bytes()
                                             : memo(*shape, kSwapDeviceBytes, int64_t(dtype), swap_k, swapped_bytes);
  p.optimizer_states = !swap.on  ? states
                       : sharded ? int64_t(double(swapped) * double(shard) / double(std::max<int64_t>(n, 1)))
                                 : swapped;
  // Between optimizer steps a swapped optimizer keeps no state on the device.
  const int64_t resident = p.parameters + (swap.on ? 0 : states);
  // The LM head and the optimizer step run with no layer's parameters gathered (ZeRO-3).
  const int64_t resident_outside_layers = parameters_at_end + (swap.on ? 0 : states);
  const memory::ActivationEstimate a = estimate(m, s, shape);
  p.activations = a.peak;
  // The LM head and loss: what forward keeps for them is in a.after_forward (the estimator counts
  // the same bytes as `saved`); their own peak on top of the rest.
  const memory::LossComputeConfig& loss_mode = s.memory.loss;
  const memory::LossHeadMemory head = memory::loss_head_memory(s.micro_batch, local_seq(s), m.hidden_size, m.vocab_size,
                                                               loss_mode.chunked ? loss_mode.chunk_size : 0, dtype);
  const int64_t tokens = s.micro_batch * local_seq(s);
  // Multi-token prediction: a head and loss per depth too (memory/chunk_loss.cpp lm_losses); the default mode keeps
  // every head's logits until its backward, the last depth's first.
  const int64_t other_logits = loss_mode.chunked ? 0 : m.mtp_num_layers * logits_bytes(m, s, tokens);
  p.logits = loss_mode.chunked ? head.logits : 2 * logits_bytes(m, s, tokens) + other_logits;
  // Gradients kept between micro-batches (accumulation): the whole ones summed so far, or (ZeRO-2/3)
  // the shard's sums — through every later micro-batch's forward and backward.
  const int64_t per_rank_batch = s.micro_batch * std::max(1, s.parallel.world / s.parallel.context);
  const int64_t accumulation =
      per_rank_batch > 0 && s.global_batch % per_rank_batch == 0 ? s.global_batch / per_rank_batch : 1;
  const bool shard_grads = s.parallel.shards_gradients();
  const int64_t held = accumulation > 1 ? (shard_grads ? 4 * shard : whole) : 0;
  const int64_t loss = resident_outside_layers + held + a.after_forward - head.saved + head.peak + other_logits;
  // A step that reduces each gradient once (ZeRO-1; ZeRO-2/3 with one micro-batch per rank), without
  // --overlap-grad-reduce, sums the shard in place, in the whole gradients, kept until the update (Note
  // [Reduce-scatter in place], optim/distributed_adamw.cpp): no shard-sized gradient beside them.
  const bool in_place = s.parallel.reduces_in_place(accumulation);
  // Whole gradients alive at once: all of them, or — sharded and reduced bucket by bucket during backward
  // (--overlap-grad-reduce; ZeRO-2/3 with accumulation without it too: Note [Synchronous buckets],
  // parallel/grad_sync.cpp), each bucket's freed once reduce-scattered — about the bucket being reduced and the
  // one filling (a bound: when a bucket is done depends on timing and on the order gradients complete), with
  // every rank's pieces of one bucket's share of the shard.
  const bool bucketed = sharded && s.parallel.reduces_by_bucket(accumulation, m.is_moe());
  const int64_t bucket = std::min(n, s.parallel.bucket_elements_of(n));
  const int64_t live_grads = bucketed ? std::min(whole, 2 * 4 * bucket) : whole;
  const int64_t pieces = sharded ? reduce_scatter_pieces(shape, s, n, bucketed ? bucket : shard) : 0;
  const bool synchronous = bucketed && !s.parallel.overlap_grad_reduce;  // during backward, on the compute thread
  // A recompute replay or an offload prefetch later in backward, with gradients already there; the
  // optimizer step.
  // (Summed in place: whole gradients held from earlier micro-batches take the new ones.)
  const auto grads_in_backward = [&](int64_t live) {
    return (shard_grads ? held + live : std::max(held, live)) + in_flight;
  };
  // Gradients appear as backward goes (each at its parameter's first backward: train/main_grads.h, the
  // accumulation nodes), from the last layer to the first: a part of backward holds at most those of the layers
  // from its block on and every one outside the layers (the head's; the embedding's, which come last, counted
  // too: a bound), with the activations that part holds at most. Without the shapes: every gradient at the
  // activations' peak.
  int64_t backward = 0;
  if ((a.peak > a.after_forward || synchronous) && shape == nullptr) {
    backward = resident + a.peak + grads_in_backward(synchronous ? 4 * bucket + pieces : live_grads);
  } else if (a.peak > a.after_forward || synchronous) {
    const std::vector<int64_t>& per_layer = shape->per_layer;
    std::vector<int64_t> from(per_layer.size() + 1, shape->outer);  // elements of the layers >= l, and outside
    for (size_t l = per_layer.size(); l-- > 0;) from[l] = from[l + 1] + per_layer[l];
    // Synchronous buckets reduce on the compute thread: from the first bucket done on, the one being reduced
    // (its whole gradients, every rank's pieces of a round of it) is all backward holds of this micro-batch's.
    const auto made = [&](int64_t elements) {
      if (synchronous) return std::min(4 * bucket, 4 * elements) + (elements >= bucket ? pieces : 0);
      return std::min(live_grads, 4 * elements);
    };
    backward = resident + a.backward_before_layers + grads_in_backward(made(shape->outer));
    for (const memory::ActivationEstimate::BackwardBlock& b : a.backward_blocks)
      backward = std::max(backward,
                          resident + b.peak + a.hidden_gradient + grads_in_backward(made(from[size_t(b.first_layer)])));
  }
  // Sharded, the reduce-scatter holds the whole gradients (the last bucket's when the others were freed),
  // the shard's sum unless it is in them, and every rank's pieces of one round.
  // Synchronous buckets were all reduced in backward: the shard's sums alone are left.
  const int64_t optimizer = synchronous ? parameters_at_end + p.optimizer_states + 4 * shard
                            : sharded   ? parameters_at_end + (bucketed ? 4 * bucket : whole) + p.optimizer_states +
                                            (in_place ? 0 : 4 * shard) + pieces
                                      : parameters_at_end + whole + p.optimizer_states;
  // Expert and context parallelism's buffers inside a layer, on top of the activations: the rows the
  // all-to-all brings to this rank's experts and those it returns (tokens x top-k each), or the ring's
  // K/V blocks (the one computed on and the next arriving) with, in backward, their f32 dK/dV.
  const int64_t buffers = exchange_buffer_bytes(m, s);
  const int64_t in_layers = buffers > 0 ? resident + held + a.peak + buffers : 0;
  p.total = std::max({loss, backward, optimizer, in_layers});
  return p;
}

TriageSettings triage_settings(const train::TrainArgs& args) {
  TriageSettings s;
  s.parallel = args.parallel;
  s.micro_batch = args.micro_batch_size;
  s.seq = args.seq_length;
  s.global_batch = args.global_batch_size;
  s.attention = args.attention;
  s.memory = args.memory;
  s.precision = args.precision;
  s.lora = args.lora.config;
  return s;
}
}  // namespace tidal::plan
