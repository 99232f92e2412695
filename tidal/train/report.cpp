#include "tidal/train/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "tidal/allocator.h"
#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/saved_tensor_log.h"
#include "tidal/base/process_memory.h"
#include "tidal/data/blended_dataset.h"
#include "tidal/dist/communicator.h"
#include "tidal/memory/recompute.h"

namespace tidal::train {
namespace {

// A note when the plan recomputes the attention core where the kernel keeps nothing worth it.
void print_core_attn_note(const TrainArgs& args, std::FILE* out) {
  const memory::MemoryConfig& mem = args.memory;
  if (!mem.recompute.any() || args.attention != AttentionKernel::flash) return;
  for (const memory::LayerRecompute& p : mem.recompute_plan)
    if (p.core_attn) {
      std::fprintf(out,
                   "note: core_attn recompute does nothing with flash attention, which keeps no (s x s) "
                   "tensor for backward (only q, k, v, the output and the log-sum-exp); use --attention eager to "
                   "see it matter\n");
      return;
    }
}

}  // namespace

Progress::Progress(bool on, int64_t total, std::FILE* out)
    : on_(on && ::isatty(fileno(out))), total_(total), out_(out) {}

void Progress::update(int64_t it, double loss, double ms) {
  if (!on_) return;
  const int width = 30, filled = int(double(width) * double(it) / double(std::max<int64_t>(total_, 1)));
  std::fprintf(out_, "\r  [%.*s%*s] %lld/%lld  loss %.4f  %.0f ms/it ", filled,
               "==============================", width - filled, "", (long long)it, (long long)total_, loss, ms);
  std::fflush(out_);
}

void Progress::clear() {
  if (on_) std::fprintf(out_, "\r\033[K");
}

namespace {

// Every rank's device memory (a collective: every rank calls it), for summary.ranks.
nlohmann::json ranks_json(dist::Communicator& comm, const MemoryStats& dev) {
  nlohmann::json mine = {{"rank", comm.rank()},
                         {"device_peak_bytes", dev.peak_allocated},
                         {"device_peak_reserved_bytes", dev.peak_reserved}};
  nlohmann::json by_category = nlohmann::json::object();
  for (int c = 0; c < kNumMemoryCategories; ++c)
    by_category[std::string(category_name(MemoryCategory(c)))] = dev.category[size_t(c)].peak;
  mine["peak_bytes_by_category"] = by_category;
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& text : dist::all_gather_strings(comm, mine.dump()))
    all.push_back(nlohmann::json::parse(text));
  return all;
}

}  // namespace

Report::Report(const TrainArgs& args, const models::ModelConfig& config, const Setup& s, std::FILE* out)
    : args_(args),
      out_(out),
      metrics_(args.metrics_json, s.settings),
      progress_(args.progress, args.train_iters, out),
      tokens_per_step_(args.global_batch_size * args.seq_length),
      flops_per_token_(training_flops_per_token(config, args.seq_length)) {
  const memory::MemoryConfig& mem = args.memory;
  std::fprintf(out, "model: %s (%s), %lld parameters; data: %s\n", config.model_type.c_str(), args.model_source.c_str(),
               (long long)s.model->num_parameters(), s.data.description.c_str());
  std::string ranks;
  if (s.groups->data().size() > 1) ranks += ", " + std::to_string(s.groups->data().size()) + " data-parallel ranks";
  if (s.groups->context_size() > 1)
    ranks += ", context-parallel size " + std::to_string(s.groups->context_size()) +
             (s.groups->ring() ? " (K/V exchange overlapped)" : " (blocking K/V exchange)");
  std::fprintf(out,
               "training %lld iterations of %lld x %lld tokens (micro-batch %lld, %lld accumulation steps%s), "
               "%s attention, recompute: %s, offload: %s\n",
               (long long)args.train_iters, (long long)args.global_batch_size, (long long)args.seq_length,
               (long long)args.micro_batch_size, (long long)s.micro_batches, ranks.c_str(), name(args.attention),
               mem.recompute.describe().c_str(), mem.offload.describe().c_str());
  print_core_attn_note(args, out);
  if (config.mtp_num_layers > 0)
    std::fprintf(out,
                 "multi-token prediction: %lld depths (model.layers.%lld-%lld), each predicting one token further; "
                 "loss = lm loss + %g / %lld x their sum\n",
                 (long long)config.mtp_num_layers, (long long)config.num_hidden_layers,
                 (long long)(config.num_hidden_layers + config.mtp_num_layers - 1), args.mtp_loss_scaling_factor,
                 (long long)config.mtp_num_layers);
  if (args.precision.bf16)
    std::fprintf(out,
                 "mixed precision (--bf16): bf16 weights and activations, f32 gradient sums, f32 master weights "
                 "and AdamW states\n");
  if (mem.loss.chunked || mem.swap_optimizer.on)
    std::fprintf(out, "loss compute mode: %s; optimizer states: %s\n", mem.loss.describe().c_str(),
                 s.optimizer->describe().c_str());
  recompute_ns0_ = autograd::recompute_time_ns();
  if (!args.tensorboard.dir.empty() && s.comm().rank() == 0) {
    tensorboard_ = std::make_unique<io::EventWriter>(args.tensorboard.dir);
    std::fprintf(out, "TensorBoard events: %s\n", tensorboard_->path().c_str());
  }
}

void Report::saved_tensors(const SavedTensors& saved) {
  progress_.clear();
  std::fprintf(out_, "\ntensors saved for backward in the first micro-batch (recompute: %s):\n%s\n",
               args_.memory.recompute.describe().c_str(), autograd::saved_tensors_table(saved).c_str());
}

void Report::step(int64_t it, const StepResult& r, double seconds, int64_t consumed_samples) {
  Allocator& device = device_allocator(args_.device);
  const StepMetrics sm{it,
                       r.loss,
                       r.lr,
                       r.grad_norm,
                       seconds * 1e3,
                       double(r.tokens > 0 ? r.tokens : tokens_per_step_) / seconds,  // variable lengths: the batches'
                       device.stats().peak_allocated,
                       r.mtp_losses};
  metrics_.add_step(sm);
  if (!r.nonfinite.empty()) {
    ++skipped_;
    progress_.clear();
    std::fprintf(out_, " iteration %lld skipped (--skip-nonfinite-steps): %s | number of skipped iterations: %lld\n",
                 (long long)it, r.nonfinite.c_str(), (long long)skipped_);
  }
  progress_.update(it, r.loss, seconds * 1e3);
  if (tensorboard_ && (it % args_.tensorboard.log_interval == 0 || it == args_.train_iters))
    tensorboard_step(it, r, sm, consumed_samples);
  if (it % args_.log_interval != 0 && it != args_.train_iters) return;
  progress_.clear();
  const MemoryStats s = device.stats();
  std::fprintf(out_,
               " iteration %8lld/%8lld | consumed samples: %10lld | elapsed time per iteration (ms): %8.1f | "
               "tokens/s: %8.0f | achieved GFLOP/s: %6.1f | learning rate: %.6E | global batch size: %5lld | "
               "lm loss: %.6E | grad norm: %.3f | mem alloc: %s | mem peak: %s",
               (long long)it, (long long)args_.train_iters, (long long)consumed_samples, sm.step_ms, sm.tokens_per_s,
               flops_per_token_ * sm.tokens_per_s / 1e9, r.lr, (long long)args_.global_batch_size, r.loss, r.grad_norm,
               format_bytes(s.allocated).c_str(), format_bytes(s.peak_allocated).c_str());
  if (r.moe_dropped >= 0)  // --moe-expert-capacity-factor
    std::fprintf(out_, " | moe dropped slots: %lld of %lld", (long long)r.moe_dropped, (long long)r.moe_slots);
  for (size_t k = 0; k < r.mtp_losses.size(); ++k)  // --mtp-num-layers, Megatron's names
    std::fprintf(out_, " | mtp_%zu loss: %.6E", k + 1, r.mtp_losses[k]);
  std::fprintf(out_, "\n");
  std::fflush(out_);
  metrics_.write();
}

void Report::validation(int64_t it, double loss, int64_t consumed_samples) {
  progress_.clear();
  std::fprintf(out_, " validation loss at iteration %lld | lm loss value: %.6E | lm loss PPL: %.3f\n", (long long)it,
               loss, std::exp(loss));
  if (!tensorboard_) return;
  // Megatron's tags.
  tensorboard_->scalar("lm loss validation", it, loss);
  tensorboard_->scalar("lm loss validation vs samples", consumed_samples, loss);
  if (args_.tensorboard.validation_ppl) {
    tensorboard_->scalar("lm loss validation ppl", it, std::exp(loss));
    tensorboard_->scalar("lm loss validation ppl vs samples", consumed_samples, std::exp(loss));
  }
  tensorboard_->flush();
}

void Report::tensorboard_step(int64_t it, const StepResult& r, const StepMetrics& m, int64_t consumed_samples) {
  io::EventWriter& tb = *tensorboard_;
  // Megatron-LM's tags (training_log), and tidal's throughput figures.
  tb.scalar("lm loss", it, r.loss);
  tb.scalar("lm loss vs samples", consumed_samples, r.loss);
  tb.scalar("learning-rate", it, r.lr);
  tb.scalar("learning-rate vs samples", consumed_samples, r.lr);
  tb.scalar("batch-size", it, double(args_.global_batch_size));
  tb.scalar("grad-norm", it, r.grad_norm);
  tb.scalar("grad-norm vs samples", consumed_samples, r.grad_norm);
  tb.scalar("tokens-per-second", it, m.tokens_per_s);
  tb.scalar("achieved-gflops", it, flops_per_token_ * m.tokens_per_s / 1e9);
  if (r.moe_dropped >= 0) tb.scalar("moe-dropped-slots", it, double(r.moe_dropped));
  for (size_t k = 0; k < r.mtp_losses.size(); ++k)
    tb.scalar("mtp_" + std::to_string(k + 1) + " loss", it, r.mtp_losses[k]);
  if (args_.tensorboard.timers) tb.scalar("iteration-time", it, m.step_ms / 1e3);
  if (args_.tensorboard.memory) {
    const MemoryStats s = device_allocator(args_.device).stats();
    tb.scalar("mem-allocated-bytes", it, double(s.allocated));
    tb.scalar("mem-max-allocated-bytes", it, double(s.peak_allocated));
    tb.scalar("mem-reserved-bytes", it, double(s.reserved));
    tb.scalar("mem-max-reserved-bytes", it, double(s.peak_reserved));
    for (int c = 0; c < kNumMemoryCategories; ++c)
      tb.scalar("mem-peak-" + std::string(category_name(MemoryCategory(c))) + "-bytes", it,
                double(s.category[size_t(c)].peak));
  }
  tb.flush();
}

void Report::checkpoint_saved(int64_t it) {
  std::fprintf(out_, " saved checkpoint at iteration %lld to %s\n", (long long)it, args_.checkpoint.save.c_str());
}

void Report::summary(const Setup& s, int64_t last_iteration, double final_loss, double final_val_loss,
                     const SavedTensors& saved) {
  progress_.clear();
  const memory::MemoryConfig& mem = args_.memory;
  const MemoryStats dev = device_allocator(args_.device).stats();
  metrics_.set_summary(final_loss, final_val_loss, dev, host_allocator(args_.device).stats());
  const double recompute_ms = double(autograd::recompute_time_ns() - recompute_ns0_) / 1e6;
  metrics_.set_summary_field("recompute",
                             memory::recompute_stats_json(mem.recompute, mem.recompute_plan, recompute_ms));
  metrics_.set_summary_field("saved_tensors", autograd::saved_tensors_json(saved));
  metrics_.set_summary_field("skipped_iterations", skipped_);
  if (s.offloader) {
    const int64_t steps = std::max<int64_t>(1, last_iteration - s.start);
    metrics_.set_summary_field("offload", s.offloader->stats_json(steps));
    std::fprintf(out_, "%s\n", s.offloader->describe_stats(steps).c_str());
  }
  if (mem.swap_optimizer.on) metrics_.set_summary_field("swap_optimizer", s.optimizer->stats_json());
  // A blend (--data-path W1 A W2 B ...): the training samples each dataset gave.
  if (const auto* blend = dynamic_cast<const data::BlendedDataset*>(&s.loader.dataset())) {
    const int64_t n = s.loader.position();
    std::fprintf(out_, "data blend, %lld training samples drawn: %s\n", (long long)n, blend->describe_draws(n).c_str());
    nlohmann::json draws = nlohmann::json::object();
    const std::vector<int64_t> d = blend->draws(n);
    for (size_t k = 0; k < d.size(); ++k) draws[blend->names()[k]] = d[k];
    metrics_.set_summary_field("blend_draws", draws);
  }
  if (s.comm().size() > 1) {
    metrics_.set_summary_field("ranks", ranks_json(s.comm(), dev));
    const dist::CommStats c = s.comm().stats();
    const parallel::GradSyncStats& g = s.grad_sync->stats();
    nlohmann::json comm = {{"backend", s.comm().backend()},
                           {"calls", c.calls},
                           {"bytes_sent", c.bytes_sent},
                           {"bytes_received", c.bytes_received},
                           {"collective_ms", double(c.busy_ns) / 1e6},
                           {"grad_reduce_buckets", g.buckets},
                           {"grad_reduce_ms", double(g.busy_ns) / 1e6},
                           {"grad_reduce_exposed_ms", double(g.exposed_ns) / 1e6},
                           {"hidden_fraction", g.hidden_fraction()}};
    if (s.param_gather) {
      const parallel::ParamGather::Stats& p = s.param_gather->stats();
      comm["param_gathers"] = p.gathers;
      comm["param_gather_ms"] = double(p.busy_ns) / 1e6;
      comm["param_gather_exposed_ms"] = double(p.exposed_ns) / 1e6;
      std::fprintf(out_, "ZeRO-3 (rank 0): %lld gathers of parameters, %.1f ms gathering, %.1f ms of it waited for\n",
                   (long long)p.gathers, double(p.busy_ns) / 1e6, double(p.exposed_ns) / 1e6);
    }
    metrics_.set_summary_field("comm", std::move(comm));
    std::fprintf(out_,
                 "communication (rank 0, %s): %lld calls, %s sent, %s received, %.1f ms in collectives; gradient "
                 "reduction %.1f ms in %lld bucket(s) per backward, %.0f%% hidden behind backward\n",
                 s.comm().backend(), (long long)c.calls, format_bytes(c.bytes_sent).c_str(),
                 format_bytes(c.bytes_received).c_str(), double(c.busy_ns) / 1e6, double(g.busy_ns) / 1e6,
                 (long long)g.buckets, 100.0 * g.hidden_fraction());
  }
  // The process as the system sees it: on the CPU backend the device memory is this process's, so its pools
  // are in it, beside the code, the libraries' buffers and the host allocator's.
  const int64_t rss = peak_rss_bytes();
  metrics_.set_summary_field("peak_rss_bytes", rss);
  metrics_.write(/*last=*/true);
  std::fprintf(out_, "\nmemory at the device peak (%s of %s reserved):\n%s", format_bytes(dev.peak_allocated).c_str(),
               format_bytes(dev.peak_reserved).c_str(), format_breakdown(dev).c_str());
  std::fprintf(out_, "process peak resident memory (RSS, %s): %s\n",
               args_.device.type == DeviceType::cpu ? "the device's memory included: the CPU backend's device is RAM"
                                                    : "host memory only",
               format_bytes(rss).c_str());
}

void Report::sample(double temperature, int64_t top_k, const std::string& text) {
  std::fprintf(out_, "\nsample (temperature %.1f, top-k %lld):\n%s\n", temperature, (long long)top_k, text.c_str());
}

}  // namespace tidal::train
