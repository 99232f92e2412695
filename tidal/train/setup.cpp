#include "tidal/train/setup.h"

#include "tidal/train/resume.h"

#include <chrono>
#include <filesystem>
#include <functional>

#include "tidal/allocator.h"
#include "tidal/data/blended_dataset.h"
#include "tidal/data/instruction_dataset.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/shown_name.h"
#include "tidal/memory/offload_runner.h"
#include "tidal/memory/savings.h"
#include "tidal/memory/swap_optimizer.h"
#include "tidal/models/deepseek_v4_checkpoint.h"
#include "tidal/models/moe.h"
#include "tidal/models/peft_adapter.h"
#include "tidal/models/pretrained.h"
#include "tidal/nn/deferred_init.h"
#include "tidal/ops/random.h"
#include "tidal/parallel/data.h"
#include "tidal/train/builtin_corpus.h"

namespace tidal::train {
namespace {

// One --data-path prefix: its training and validation splits, its description and its training samples
// per epoch (a blend's weight by size).
struct PrefixData {
  std::shared_ptr<const data::TokenDataset> train, valid;
  std::string description;
  int64_t train_samples = 0;
};

PrefixData load_prefix(const std::string& prefix, const TrainArgs& a, const data::Tokenizer& tokenizer) {
  PrefixData p;
  if (a.is_instruction_dataset) {
    const data::InstructionFiles files = data::open_instruction_files(prefix, a.packing.neat_pack);
    // Pads are never trained and follow every real token: their id changes no loss (Qwen pads with this one).
    const int64_t pad = tokenizer.token_to_id("<|endoftext|>").value_or(0);
    auto train = data::InstructionDataset::from_split(files, a.split, 0, a.seq_length, a.seed, pad);
    p.train_samples = train->samples_per_epoch();
    p.train = std::move(train);
    const auto ranges = data::split_documents(a.split, files.input_ids->num_documents());
    if (ranges[1].size() > 0)
      p.valid = data::InstructionDataset::from_split(files, a.split, 1, a.seq_length, a.seed, pad);
    p.description = prefix + " (instruction data: " + std::to_string(files.input_ids->num_documents()) + " records, " +
                    std::to_string(files.input_ids->num_tokens()) + " tokens; split " + a.split + ")";
    return p;
  }
  auto indexed = std::make_shared<data::IndexedDataset>(prefix);
  auto train = data::GPTDataset::from_split(indexed, a.split, 0, a.seq_length, a.seed);
  p.train_samples = train->samples_per_epoch();
  p.train = std::move(train);
  const auto ranges = data::split_documents(a.split, indexed->num_documents());
  if (ranges[1].size() > 0) p.valid = data::GPTDataset::from_split(indexed, a.split, 1, a.seq_length, a.seed);
  p.description = prefix + " (" + std::to_string(indexed->num_documents()) + " documents, " +
                  std::to_string(indexed->num_tokens()) + " tokens; split " + a.split + ")";
  return p;
}

// --data-path with several prefixes: Megatron's weighted blend of their splits (data/blended_dataset.h),
// weighted as given or by their training samples per epoch.
void blend(const TrainArgs& a, const data::Tokenizer& tokenizer, TrainingData& d) {
  std::vector<PrefixData> parts;
  std::vector<double> weights = a.data_weights;
  for (const std::string& prefix : a.data_path) {
    parts.push_back(load_prefix(prefix, a, tokenizer));
    if (a.data_weights.empty()) weights.push_back(double(parts.back().train_samples));
  }
  std::vector<std::shared_ptr<const data::TokenDataset>> train, valid;
  std::vector<double> valid_weights;
  std::vector<std::string> valid_names;
  d.description = "a blend of " + std::to_string(parts.size()) + " datasets:";
  double total = 0;
  for (double w : weights) total += w;
  for (size_t i = 0; i < parts.size(); ++i) {
    train.push_back(parts[i].train);
    char share[48];
    std::snprintf(share, sizeof share, " weight %.4g:", weights[i] / total);
    d.description += std::string(i == 0 ? "" : ";") + share + " " + parts[i].description;
    if (parts[i].valid) {
      valid.push_back(parts[i].valid);
      valid_weights.push_back(weights[i]);
      valid_names.push_back(a.data_path[i]);
    }
  }
  d.train = std::make_shared<data::BlendedDataset>(std::move(train), weights, a.data_path);
  if (!valid.empty())
    d.valid =
        std::make_shared<data::BlendedDataset>(std::move(valid), std::move(valid_weights), std::move(valid_names));
}

TrainingData load_data(const TrainArgs& a, models::ModelConfig& config, std::FILE* out) {
  TrainingData d;
  if (a.mock_data) {
    d.train = std::make_shared<data::MockDataset>(config.vocab_size, a.seq_length, a.seed);
    d.valid = std::make_shared<data::MockDataset>(config.vocab_size, a.seq_length, a.seed + 1);
    d.description = "mock data (seeded random tokens, vocabulary " + std::to_string(config.vocab_size) + ")";
    return d;
  }
  std::string prefix;
  if (a.builtin_corpus) {
    const auto t0 = std::chrono::steady_clock::now();
    PreparedCorpus c = prepare_builtin_corpus(config.vocab_size);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(out, "built-in corpus: Debian's fortunes, %lld documents, %lld tokens (%s, %s in %.1f s)\n",
                 (long long)c.documents, (long long)c.tokens,
                 c.reused ? "cached" : "tokenizer trained and data prepared", c.data_prefix.c_str(), seconds);
    prefix = c.data_prefix;
    d.tokenizer_path = c.tokenizer_path;
  } else {
    prefix = a.data_path[0];
    d.tokenizer_path = a.tokenizer;
  }
  d.tokenizer = data::Tokenizer::load(d.tokenizer_path);
  if (a.pretrained.empty()) {
    config.vocab_size = d.tokenizer->vocab_size();
  } else {  // published models pad their vocabulary beyond the tokenizer's
    TIDAL_CHECK(d.tokenizer->vocab_size() <= config.vocab_size, "tidal train: the tokenizer has ",
                d.tokenizer->vocab_size(), " tokens but ", a.pretrained, " only ", config.vocab_size);
  }
  d.variable_multiple = a.variable_seq_lengths ? kVariableSeqMultiple : 0;
  if (a.data_path.size() > 1) {
    blend(a, *d.tokenizer, d);
    return d;
  }
  PrefixData p = load_prefix(prefix, a, *d.tokenizer);
  d.train = std::move(p.train);
  d.valid = std::move(p.valid);
  d.description = std::move(p.description);
  return d;
}

// Expert parallel: which tensors of a whole model's files this rank's model takes (models/moe.h). DeepSeek-V4, whose
// experts are rows of stacked tensors (nn/slab.h): its experts' w1/w2/w3, stacked on load (of a file of stacked
// tensors each rank reads its rows: nn::slab_rows).
std::function<bool(const std::string&)> held_here(const models::CausalLM& model) {
  if (model.config().is_deepseek_v4()) return models::deepseek_v4_holds(models::expert_rows(model));
  std::vector<std::string> names;
  for (const auto& [name, p] : model.named_parameters()) names.push_back(name);
  return models::held_here(names);
}

// The model as configured, its weights drawn from the generator seeded just before.
// `deferred`: the parameters made without their values (ZeRO-3: nn/deferred_init.h). --bf16: each
// weight drawn in f32 as an f32 run draws it, then rounded to bf16 (nn::normal_parameter).
std::unique_ptr<models::CausalLM> build_model(const TrainArgs& args, const models::ModelConfig& config,
                                              const std::shared_ptr<dist::Communicator>& experts,
                                              const std::shared_ptr<nn::DeferredInit>& deferred, Device device) {
  nn::Init init;
  init.device = device;
  init.deferred = deferred;
  init.dtype = args.precision.param_dtype();
  std::unique_ptr<models::CausalLM> model = models::create_model(config, init, experts);
  model->set_attention_kernel(args.attention);
  if (args.memory.recompute.any()) model->set_recompute(args.memory.recompute_plan);
  return model;
}

// --activation-offload: the offloader and the layer runner that sends each block's saves through it.
// On meta (a dry run) it counts its host bytes and writes nothing (memory/offload.h).
std::unique_ptr<memory::Offloader> attach_offloader(const memory::MemoryConfig& mem, const models::ModelConfig& config,
                                                    models::CausalLM& model, Device device) {
  if (!mem.offload.enabled) return nullptr;
  // A missing spill directory is made, like --save's and --profile's.
  if (mem.offload.target == memory::OffloadTarget::disk && !device.is_meta())
    io::create_directories(mem.offload.dir, "--offload-dir");
  auto offloader = std::make_unique<memory::Offloader>(memory::offload_options(mem.offload, device));
  model.set_layer_runner(
      memory::offload_layer_runner(*offloader, mem.recompute_plan, config.num_hidden_layers, mem.offload.policy));
  return offloader;
}

// --lora-*: the adapters on the built (and loaded) model, the rest frozen, and --lora-load's weights.
// Returns adapter_config.json's document, which the checkpoints write beside the adapters.
nlohmann::json attach_lora(const TrainArgs& args, models::CausalLM& model, Device device, std::FILE* out) {
  const nn::LoraConfig& config = args.lora.config;  // the flags', or the adapter's own (parse_lora_args)
  nn::Init init;
  init.device = device;
  init.dtype = args.precision.param_dtype();
  const int64_t total = model.num_parameters();
  const nn::AppliedLora applied = nn::apply_lora(model, config, init);
  if (!args.lora.load.empty())
    models::load_adapter_weights(model, models::read_adapter_weights(args.lora.load),
                                 args.lora.load + "/" + models::kAdapterWeightsFile);
  int64_t trainable = 0;
  for (const auto& [name, p] : model.named_trainable_parameters()) trainable += p.numel();
  std::string targets;
  for (const std::string& t : applied.targets) targets += (targets.empty() ? "" : ", ") + t;
  // What the frozen base does not keep: its f32 gradients (under --bf16 the f32 sums) and AdamW's states.
  const int64_t not_kept = total * (4 + memory::swap_state_bytes_per_element(init.dtype));
  std::fprintf(out,
               "LoRA: r %lld, alpha %g%s on %zu layers (%s)%s: %lld parameters trained, %lld frozen (their "
               "gradients and AdamW states, %s, are never made)\n",
               (long long)config.r, config.alpha, config.use_rslora ? " (rsLoRA)" : "", applied.modules.size(),
               targets.c_str(), args.lora.load.empty() ? "" : (", from " + args.lora.load).c_str(),
               (long long)trainable, (long long)total, format_bytes(not_kept).c_str());
  return models::adapter_config_json(config, applied, args.pretrained);
}

}  // namespace

Setup::Setup(std::unique_ptr<parallel::ParallelGroups> groups_in, TrainingData data_in, int64_t micro_batches_in,
             Device device_in)
    : groups(std::move(groups_in)),
      data(std::move(data_in)),
      loader(data.train, 0, data.variable_multiple),
      micro_batches(micro_batches_in),
      device(device_in) {}

Setup setup_training(const TrainArgs& args, models::ModelConfig& config, std::FILE* out, dist::Communicator& comm,
                     Device device) {
  const parallel::ParallelLayout layout = args.parallel.on(comm.size());
  const int64_t micro_batches =
      parallel::micro_batches_per_rank(args.global_batch_size, args.micro_batch_size, layout.data());
  TrainingData data = load_data(args, config, out);
  config.validate();
  parallel::check_expert_parallel(layout, config);
  device_allocator(device).reset_peak_stats();
  host_allocator(device).reset_peak_stats();

  Setup s(std::make_unique<parallel::ParallelGroups>(comm, layout, device), std::move(data), micro_batches, device);
  manual_seed(args.seed);
  // ZeRO-3 builds the model without its values: each rank materializes one parameter at a time and
  // keeps its shard, so the whole model never needs to fit (not with --pretrained: it loads whole).
  std::shared_ptr<nn::DeferredInit> deferred =
      layout.shards_parameters() && args.pretrained.empty() ? std::make_shared<nn::DeferredInit>() : nullptr;
  // Expert parallel: the model builds this rank's experts only (models/moe.h).
  s.model = build_model(args, config, s.groups->experts(), deferred, device);
  s.offloader = attach_offloader(args.memory, config, *s.model, device);
  if (!args.pretrained.empty()) {  // expert parallel: this rank's experts out of the whole model's
    const models::CausalLM::LoadReport loaded = s.model->load_hf_state_dict(
        models::load_pretrained_dir(args.pretrained, layout.expert > 1 ? held_here(*s.model) : nullptr,
                                    nn::slab_rows(*s.model))
            .weights);
    if (loaded.vision_tensors > 0)
      std::fprintf(out,
                   "%s is a multimodal Gemma 3: training its language model; its vision tower and projector (%lld "
                   "tensors) are not loaded, and checkpoints hold the language model alone (Gemma3ForCausalLM)\n",
                   args.pretrained.c_str(), (long long)loaded.vision_tensors);
    if (loaded.mtp_tensors > 0)
      std::fprintf(out, "%s: its multi-token-prediction layers (%lld tensors) are not loaded (not trained yet)\n",
                   args.pretrained.c_str(), (long long)loaded.mtp_tensors);
  }
  if (args.lora.enabled()) s.adapter_config = attach_lora(args, *s.model, device, out);
  // What trains: every parameter, or with LoRA the adapters alone (no gradients, reductions or
  // optimizer states for the frozen base).
  const optim::NamedParameters trained = s.model->named_trainable_parameters();
  // Expert parallel: the experts' shards over their expert-data-parallel group (optim::ExpertShards).
  auto expert_shards = [&](const optim::NamedParameters& params) {
    optim::ExpertShards experts;
    if (layout.expert > 1) {
      for (const auto& [name, p] : params) experts.is_expert.push_back(models::is_expert_parameter(name));
      experts.slabs = s.model->named_slabs();
      experts.data = s.groups->expert_data();
      experts.experts = s.groups->experts().get();
    }
    return experts;
  };
  if (layout.sharded()) {
    const optim::ExpertShards experts = expert_shards(trained);
    s.sharded = std::make_unique<optim::DistributedAdamW>(trained, comm, layout.shards_parameters(),
                                                          layout.expert > 1 ? &experts : nullptr);
    s.sharded->set_reduce_bucket(layout.bucket_elements());
    s.optimizer = memory::make_adamw(s.sharded->shard_parameters(), args.adamw, args.memory.swap_optimizer,
                                     s.sharded->decay_rule(), int64_t(trained.size()));
  } else {
    s.optimizer = memory::make_adamw(trained, args.adamw, args.memory.swap_optimizer);
  }
  s.schedule = args.schedule;
  optim::validate(s.schedule);
  s.model->set_context_parallel(s.groups->context(), s.groups->ring());
  s.checkpoint =
      std::make_unique<checkpoint::RankState>(*s.model, *s.optimizer, s.sharded.get(), *s.groups, s.adapter_config);
  set_rng_state({args.seed, 0});
  if (!args.checkpoint.load.empty()) resume(args, config, s, out);
  if (args.precision.bf16) {
    // Before the reduction's hooks: its hook moves a bf16 gradient into the f32 sum they reduce.
    s.main_grads = std::make_unique<MainGrads>(trained);
    // The f32 draws of the initialization (nn::normal_parameter) are the build's, not the training's.
    device_allocator(device).reset_peak_stats();
  }
  s.grad_sync = std::make_unique<parallel::GradSync>(trained, *s.groups, s.sharded.get());
  s.update = s.sharded ? sharded_step(*s.sharded, *s.optimizer, comm, args.clip_grad)
                       : replicated_step(trained, *s.optimizer, s.groups->experts().get(), args.clip_grad);
  if (layout.shards_parameters()) {
    // The built values (one parameter at a time), or what --load put into the whole parameters.
    std::function<void(const Tensor&)> materialize;
    if (deferred) materialize = [&deferred](const Tensor& p) { deferred->materialize(p); };
    s.sharded->copy_shard_from_parameters(materialize);
    std::vector<optim::DistributedAdamW*> shardings = {s.sharded.get()};
    if (args.lora.enabled()) {  // the frozen base, sharded the same way, never stepped
      optim::NamedParameters frozen;
      for (const auto& [name, p] : s.model->named_parameters())
        if (!p.requires_grad()) frozen.emplace_back(name, p);
      const optim::ExpertShards experts = expert_shards(frozen);
      s.frozen = std::make_unique<optim::DistributedAdamW>(frozen, comm, true, layout.expert > 1 ? &experts : nullptr);
      s.frozen->copy_shard_from_parameters(materialize);
      shardings.push_back(s.frozen.get());
    }
    s.param_gather = std::make_unique<parallel::ParamGather>(*s.model, shardings, comm, layout.overlap_param_gather);
    // Building is not training: the peaks count from here, and the log says what building took.
    const MemoryStats built = device_allocator(device).stats();
    std::fprintf(out, "ZeRO-3: the model was built %s (device peak %s), now %s of parameters on this rank\n",
                 deferred && args.checkpoint.load.empty() ? "one parameter at a time" : "whole",
                 format_bytes(built.peak_allocated).c_str(),
                 format_bytes(built[MemoryCategory::parameter].allocated).c_str());
    device_allocator(device).reset_peak_stats();
  }

  s.settings = args.to_json();
  s.settings["model"] = models::config_to_json(config);
  s.settings["data"] = s.data.description;
  s.settings["data_parallel_size"] = layout.data();
  return s;
}

}  // namespace tidal::train
