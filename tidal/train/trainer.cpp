#include "tidal/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <optional>

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/autograd/saved_tensor_log.h"
#include "tidal/data/gpt_dataset.h"
#include "tidal/data/tokenizer.h"
#include "tidal/io/atomic_file.h"
#include "tidal/memory/offload.h"
#include "tidal/memory/chunk_loss.h"
#include "tidal/memory/swap_optimizer.h"
#include "tidal/memory_scope.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/generate.h"
#include "tidal/memory/offload_runner.h"
#include "tidal/models/pretrained.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/optim/adamw.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/lr_schedule.h"
#include "tidal/profile/profiler.h"
#include "tidal/train/builtin_corpus.h"
#include "tidal/train/checkpoint.h"
#include "tidal/train/metrics.h"
#include "tidal/train/oom_advice.h"
#include "tidal/train/profiling.h"

namespace tidal::train {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Data {
  std::shared_ptr<const data::TokenDataset> train, valid;
  std::optional<data::Tokenizer> tokenizer;
  std::string tokenizer_path;
  std::string description;
};

Data load_data(const TrainArgs& a, models::ModelConfig& config, std::FILE* out) {
  Data d;
  if (a.mock_data) {
    d.train = std::make_shared<data::MockDataset>(config.vocab_size, a.seq_length, a.seed);
    d.valid = std::make_shared<data::MockDataset>(config.vocab_size, a.seq_length, a.seed + 1);
    d.description = "mock data (seeded random tokens, vocabulary " + std::to_string(config.vocab_size) + ")";
    return d;
  }
  std::string prefix;
  if (a.builtin_corpus) {
    const auto t0 = Clock::now();
    PreparedCorpus c = prepare_builtin_corpus(config.vocab_size);
    std::fprintf(out, "built-in corpus: Debian's fortunes, %lld documents, %lld tokens (%s, %s in %.1f s)\n",
                 (long long)c.documents, (long long)c.tokens, c.reused ? "cached" : "tokenizer trained and data prepared",
                 c.data_prefix.c_str(), seconds_since(t0));
    prefix = c.data_prefix;
    d.tokenizer_path = c.tokenizer_path;
  } else {
    TIDAL_CHECK(a.data_path.size() == 1, "tidal train: give one --data-path prefix (blending several is not supported)");
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
  auto indexed = std::make_shared<data::IndexedDataset>(prefix);
  d.train = data::GPTDataset::from_split(indexed, a.split, 0, a.seq_length, a.seed);
  const auto ranges = data::split_documents(a.split, indexed->num_documents());
  if (ranges[1].size() > 0) d.valid = data::GPTDataset::from_split(indexed, a.split, 1, a.seq_length, a.seed);
  d.description = prefix + " (" + std::to_string(indexed->num_documents()) + " documents, " +
                  std::to_string(indexed->num_tokens()) + " tokens; split " + a.split + ")";
  return d;
}

// Architecture fields a checkpoint must agree on.
void check_same_model(const nlohmann::json& saved, const models::ModelConfig& now, const std::string& path) {
  const models::ModelConfig s = models::config_from_json(saved);
  TIDAL_CHECK(s.model_type == now.model_type && s.num_hidden_layers == now.num_hidden_layers &&
                  s.hidden_size == now.hidden_size && s.num_attention_heads == now.num_attention_heads &&
                  s.kv_heads() == now.kv_heads() && s.vocab_size == now.vocab_size &&
                  s.intermediate_size == now.intermediate_size && s.num_experts == now.num_experts,
              "[checkpoint] ", path, " holds a different model (", s.model_type, ", ", s.num_hidden_layers,
              " layers, hidden ", s.hidden_size, ", vocab ", s.vocab_size, ") than the one configured (",
              now.model_type, ", ", now.num_hidden_layers, " layers, hidden ", now.hidden_size, ", vocab ",
              now.vocab_size, "): use the same model flags as the run that saved it");
}

class Progress {
 public:
  Progress(bool on, int64_t total, std::FILE* out) : on_(on && ::isatty(fileno(out))), total_(total), out_(out) {}
  void update(int64_t it, double loss, double ms) {
    if (!on_) return;
    const int width = 30, filled = int(double(width) * double(it) / double(std::max<int64_t>(total_, 1)));
    std::fprintf(out_, "\r  [%.*s%*s] %lld/%lld  loss %.4f  %.0f ms/it ", filled, "==============================",
                 width - filled, "", (long long)it, (long long)total_, loss, ms);
    std::fflush(out_);
  }
  void clear() {
    if (on_) std::fprintf(out_, "\r\033[K");
  }

 private:
  bool on_;
  int64_t total_;
  std::FILE* out_;
};

double evaluate(const models::CausalLM& model, const data::TokenDataset& valid, int64_t batches, int64_t batch_size,
                const memory::LossComputeConfig& loss) {
  NoGradGuard no_grad;
  data::DataLoader loader(std::shared_ptr<const data::TokenDataset>(&valid, [](const data::TokenDataset*) {}));
  double sum = 0;
  for (int64_t i = 0; i < batches; ++i) {
    const Tensor tokens = loader.next(batch_size).tokens;  // (B, T + 1)
    const int64_t t = tokens.size(1) - 1;
    sum += memory::lm_loss(model, tokens.narrow(1, 0, t), tokens.narrow(1, 1, t), loss, 0.0).item<double>();
  }
  return sum / double(batches);
}

}  // namespace

namespace {

TrainResult train_loop(const TrainArgs& args, std::FILE* out, models::ModelConfig& config) {
  Data data = load_data(args, config, out);
  config.validate();

  Allocator& device = device_allocator(Device::cpu());
  Allocator& host = host_allocator();
  device.reset_peak_stats();
  host.reset_peak_stats();

  manual_seed(args.seed);
  std::unique_ptr<models::CausalLM> model = models::create_model(config);
  model->set_attention_kernel(args.attention == "eager" ? AttentionKernel::eager : AttentionKernel::flash);
  const memory::MemoryConfig& mem = args.memory;
  const std::vector<memory::LayerRecompute>& plan = mem.recompute_plan;  // empty: no recompute
  if (mem.recompute.any()) model->set_recompute(plan);
  std::unique_ptr<memory::Offloader> offloader;
  if (mem.offload.enabled) {
    // A missing spill directory is made, like --save's and --profile's.
    if (mem.offload.target == memory::OffloadTarget::disk) io::create_directories(mem.offload.dir, "--offload-dir");
    offloader = std::make_unique<memory::Offloader>(memory::offload_options(mem.offload));
    model->set_layer_runner(
        memory::offload_layer_runner(*offloader, plan, config.num_hidden_layers, mem.offload.policy));
  }
  if (!args.pretrained.empty()) {
    model->load_hf_state_dict(models::load_pretrained_dir(args.pretrained).weights);
  }
  optim::AdamWOptions adam;
  adam.lr = args.lr;
  adam.beta1 = args.adam_beta1;
  adam.beta2 = args.adam_beta2;
  adam.eps = args.adam_eps;
  adam.weight_decay = args.weight_decay;
  std::unique_ptr<optim::AdamW> optimizer = memory::make_adamw(model->named_parameters(), adam, mem.swap_optimizer);
  optim::LrSchedule schedule;
  schedule.lr = args.lr;
  schedule.min_lr = args.min_lr;
  schedule.warmup_iters = args.lr_warmup_iters;
  schedule.decay_iters = args.lr_decay_iters;
  schedule.train_iters = args.train_iters;
  schedule.style = optim::parse_lr_decay_style(args.lr_decay_style);
  optim::validate(schedule);

  data::DataLoader loader(data.train);
  int64_t start = 0;
  set_rng_state({args.seed, 0});
  if (!args.load.empty()) {
    Checkpoint ck = load_checkpoint(args.load);
    check_same_model(ck.config, config, ck.path);
    model->load_state_dict(ck.model);
    optimizer->load_state_dict(ck.optimizer);
    start = ck.state.iteration;
    loader.set_position(ck.state.data_position);
    set_rng_state(ck.state.rng);
    std::fprintf(out, "resumed from %s at iteration %lld\n", ck.path.c_str(), (long long)start);
  }

  nlohmann::json settings = args.to_json();
  settings["model"] = models::config_to_json(config);
  settings["data"] = data.description;
  MetricsWriter metrics(args.metrics_json, settings);
  const int64_t accum = args.grad_accumulation_steps();
  const int64_t tokens_per_step = args.global_batch_size * args.seq_length;
  const double flops_per_token = training_flops_per_token(config, args.seq_length);
  std::fprintf(out, "model: %s (%s), %lld parameters; data: %s\n", config.model_type.c_str(), args.model_source.c_str(),
               (long long)model->num_parameters(), data.description.c_str());
  std::fprintf(out, "training %lld iterations of %lld x %lld tokens (micro-batch %lld, %lld accumulation steps), "
               "%s attention, recompute: %s, offload: %s\n",
               (long long)args.train_iters, (long long)args.global_batch_size, (long long)args.seq_length,
               (long long)args.micro_batch_size, (long long)accum, args.attention.c_str(),
               mem.recompute.describe().c_str(), mem.offload.describe().c_str());
  if (mem.recompute.any() && args.attention == "flash")
    for (const memory::LayerRecompute& p : plan)
      if (p.core_attn) {
        std::fprintf(out, "note: core_attn recompute does nothing with flash attention, which keeps no (s x s) "
                     "tensor for backward (only q, k, v, the output and the log-sum-exp); use --attention eager to "
                     "see it matter\n");
        break;
      }
  const auto* swapped = dynamic_cast<const memory::SwapAdamW*>(optimizer.get());
  if (mem.loss.chunked || swapped)
    std::fprintf(out, "loss compute mode: %s; optimizer states: %s\n", mem.loss.describe().c_str(),
                 swapped ? swapped->describe().c_str() : "on the device");
  std::vector<autograd::SavedTensorRecord> saved_tensors;  // of the first micro-batch
  const int64_t recompute_ns0 = autograd::recompute_time_ns();
  // An unwritable --save fails now, not after the first interval's steps.
  if (!args.save.empty()) io::create_directories(args.save, "--save");
  profile::Profiler profiler(profile_options(args, start), profile_info(args, config, model->num_parameters()));

  TrainResult result;
  result.iterations = start;
  result.final_val_loss = std::nan("");
  Progress progress(args.progress, args.train_iters, out);
  const double aux_coef = config.router_aux_loss_coef;
  auto save = [&](int64_t it) {
    TrainingState st{it, get_rng_state(), loader.position(), settings, nlohmann::json::object()};
    save_checkpoint(args.save, st, model->state_dict(), optimizer->state_dict(), models::config_to_json(config),
                    data.tokenizer_path);
    std::fprintf(out, " saved checkpoint at iteration %lld to %s\n", (long long)it, args.save.c_str());
  };

  for (int64_t it = start + 1; it <= args.train_iters; ++it) {
    const auto t0 = Clock::now();
    profiler.begin_step(it);
    const double lr = optim::lr_at(it - 1, schedule);
    double loss_sum = 0;
    for (int64_t m = 0; m < accum; ++m) {
      const Tensor tokens = loader.next(args.micro_batch_size).tokens;  // (B, T + 1)
      const int64_t t = tokens.size(1) - 1;
      Tensor loss;
      if (offloader) offloader->begin_micro_batch();
      {
        profile::Range phase("forward", profile::kPhase);
        std::optional<autograd::SavedTensorLog> log;
        if (saved_tensors.empty() || profiler.wants_saved_tensors(it, m)) log.emplace();
        loss = memory::lm_loss(*model, tokens.narrow(1, 0, t), tokens.narrow(1, 1, t), mem.loss, aux_coef);
        if (log) {
          if (saved_tensors.empty()) saved_tensors = log->snapshot();
          profiler.set_saved_tensors(it, log->snapshot());
        }
      }
      if (args.report_memory && it == start + 1 && m == 0) {
        progress.clear();
        std::fprintf(out, "\ntensors saved for backward in the first micro-batch (recompute: %s):\n%s\n",
                     mem.recompute.describe().c_str(), autograd::saved_tensors_table(saved_tensors).c_str());
      }
      const double value = loss.item<double>();
      TIDAL_CHECK(std::isfinite(value), "the loss became ", value, " at iteration ", it,
                  ": training diverged; try a lower --lr (now ", args.lr, ") or a longer --lr-warmup-iters");
      loss_sum += value;
      profile::Range phase("backward", profile::kPhase);
      (accum == 1 ? loss : mul(loss, 1.0 / double(accum))).backward();
    }
    double grad_norm = 0;
    {
      profile::Range phase("optimizer", profile::kPhase);
      grad_norm = optim::clip_grad_norm(model->parameters(), args.clip_grad);
      optimizer->step(lr);
      optimizer->zero_grad();
    }
    const double loss = loss_sum / double(accum);
    const double step_s = seconds_since(t0);
    profiler.end_step(it, out);
    StepMetrics sm{it, loss, lr, grad_norm, step_s * 1e3, double(tokens_per_step) / step_s,
                   device.stats().peak_allocated};
    metrics.add_step(sm);
    result.losses.push_back(loss);
    result.final_loss = loss;
    result.iterations = it;
    progress.update(it, loss, step_s * 1e3);
    if (it % args.log_interval == 0 || it == args.train_iters) {
      progress.clear();
      const MemoryStats s = device.stats();
      std::fprintf(out,
                   " iteration %8lld/%8lld | consumed samples: %10lld | elapsed time per iteration (ms): %8.1f | "
                   "tokens/s: %8.0f | achieved GFLOP/s: %6.1f | learning rate: %.6E | global batch size: %5lld | "
                   "lm loss: %.6E | grad norm: %.3f | mem alloc: %s | mem peak: %s\n",
                   (long long)it, (long long)args.train_iters, (long long)loader.position(), sm.step_ms,
                   sm.tokens_per_s, flops_per_token * sm.tokens_per_s / 1e9, lr, (long long)args.global_batch_size,
                   loss, grad_norm, format_bytes(s.allocated).c_str(), format_bytes(s.peak_allocated).c_str());
      std::fflush(out);
      metrics.write();
    }
    if (data.valid && args.eval_interval > 0 && (it % args.eval_interval == 0 || it == args.train_iters)) {
      progress.clear();
      model->train(false);
      result.final_val_loss = evaluate(*model, *data.valid, args.eval_iters, args.micro_batch_size, mem.loss);
      model->train(true);
      std::fprintf(out, " validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.3f\n",
                   (long long)it, result.final_val_loss, std::exp(result.final_val_loss));
    }
    if (!args.save.empty() && ((args.save_interval > 0 && it % args.save_interval == 0) || it == args.train_iters))
      save(it);
  }
  progress.clear();

  const MemoryStats dev = device.stats();
  metrics.set_summary(result.final_loss, result.final_val_loss, dev, host.stats());
  nlohmann::json rc;
  rc["mode"] = mem.recompute.describe();
  rc["recomputed_layers"] = nlohmann::json::array();
  for (size_t l = 0; l < plan.size(); ++l)
    if (plan[l].any()) {
      nlohmann::json what = nlohmann::json::array();
      for (auto [on, name] : {std::pair{plan[l].full, "full"}, {plan[l].core_attn, "core_attn"}, {plan[l].mlp, "mlp"},
                              {plan[l].moe, "moe"}, {plan[l].moe_act, "moe_act"}, {plan[l].activation, "activation"},
                              {plan[l].norm, "norm"}})
        if (on) what.push_back(name);
      rc["recomputed_layers"].push_back({{"layer", l}, {"policies", what}});
    }
  rc["recompute_ms"] = double(autograd::recompute_time_ns() - recompute_ns0) / 1e6;
  metrics.set_summary_field("recompute", rc);
  metrics.set_summary_field("saved_tensors", autograd::saved_tensors_json(saved_tensors));
  if (offloader) {
    const memory::OffloadStats os = offloader->stats();
    const double steps = double(std::max<int64_t>(1, result.iterations - start));
    metrics.set_summary_field("offload", {{"offloaded_bytes_per_step", double(os.offloaded_bytes) / steps},
                                          {"kept_on_device_bytes_per_step", double(os.kept_bytes) / steps},
                                          {"in_use_bytes_per_step", double(os.in_use_bytes) / steps},
                                          {"d2h_ms", double(os.d2h_ns) / 1e6}, {"h2d_ms", double(os.h2d_ns) / 1e6},
                                          {"exposed_wait_ms", double(os.exposed_wait_ns) / 1e6},
                                          {"overlap_fraction", os.overlap_fraction()},
                                          {"host_peak_bytes", host.stats().peak_allocated}});
    std::fprintf(out, "offload: %s per step to %s, copies %.0f ms, compute waited %.0f ms (overlap %.2f)%s\n",
                 format_bytes(int64_t(double(os.offloaded_bytes) / steps)).c_str(), memory::name(mem.offload.target),
                 double(os.d2h_ns + os.h2d_ns) / 1e6, double(os.exposed_wait_ns) / 1e6, os.overlap_fraction(),
                 os.kept_bytes > 0 ? (", host cap reached: " + format_bytes(int64_t(double(os.kept_bytes) / steps)) +
                                      " per step stayed on the device").c_str()
                                   : "");
  }
  if (swapped) metrics.set_summary_field("swap_optimizer", swapped->stats_json());
  metrics.write();
  std::fprintf(out, "\nmemory at the device peak (%s of %s reserved):\n%s", format_bytes(dev.peak_allocated).c_str(),
               format_bytes(dev.peak_reserved).c_str(), format_breakdown(dev).c_str());
  if (data.tokenizer && !args.sample_prompt.empty() && args.sample_tokens > 0) {
    models::SampleOptions so;
    so.max_new_tokens = args.sample_tokens;
    so.seed = args.seed;
    so.stop_token = data.tokenizer->eod_id();
    const std::vector<int64_t> ids = models::generate(*model, data.tokenizer->encode(args.sample_prompt), so);
    result.sample = data.tokenizer->decode(ids, /*skip_special=*/true);
    std::fprintf(out, "\nsample (temperature %.1f, top-k %lld):\n%s\n", so.temperature, (long long)so.top_k,
                 result.sample.c_str());
  }
  return result;
}

}  // namespace

TrainResult run_training(const TrainArgs& args, std::FILE* out) {
  models::ModelConfig config = args.model;  // load_data may take the tokenizer's vocabulary
  try {
    return train_loop(args, out, config);
  } catch (const OutOfMemory& e) {  // the breakdown at that moment and what to try (oom_advice.h)
    throw OutOfMemory(out_of_memory_message(e, config, triage_settings(args)), e.requested(), e.stats());
  }
}

}  // namespace tidal::train
