#include "tidal/train/trainer.h"

#include <chrono>
#include <cmath>

#include "tidal/checkpoint/format.h"
#include "tidal/checkpoint/save.h"
#include "tidal/dist/collectives.h"
#include "tidal/models/generate.h"
#include "tidal/ops/random.h"
#include "tidal/seam/runtime.h"
#include "tidal/train/graceful_stop.h"
#include "tidal/train/profiling.h"
#include "tidal/train/report.h"
#include "tidal/train/same_settings.h"
#include "tidal/train/setup.h"
#include "tidal/train/step.h"

namespace tidal::train {
namespace {

using Clock = std::chrono::steady_clock;

bool due(int64_t it, int64_t interval, int64_t last) { return (interval > 0 && it % interval == 0) || it == last; }

// Every rank writes its pieces of the checkpoint (checkpoint/rank_state.h: which, by the run's layout).
void save(const TrainArgs& args, const models::ModelConfig& config, const Setup& s, int64_t it) {
  const checkpoint::TrainingState st{it, get_rng_state(), s.loader.position(), s.settings, nlohmann::json::object()};
  parallel::ParamGather::Scope whole(s.param_gather.get(), /*whole=*/true);  // ZeRO-3: the whole model to write
  checkpoint::save_checkpoint(s.comm(), args.checkpoint.save, st, s.checkpoint->files(), models::config_to_json(config),
                              s.data.tokenizer_path);
}

// --sample-prompt continued by the trained model (when the data has a tokenizer).
std::string sample(const TrainArgs& args, const Setup& s, Report& report) {
  models::SampleOptions so;
  so.max_new_tokens = args.sample_tokens;
  so.seed = args.seed;
  so.stop_token = s.data.tokenizer->eod_id();
  // Every rank generates (under expert parallelism each forward is a collective) and takes rank 0's tokens.
  dist::Communicator& world = s.comm();
  so.agree = [&world](int64_t token) { return int64_t(dist::all_gather_values(world, double(token))[0]); };
  parallel::ParamGather::Scope whole(s.param_gather.get(), /*whole=*/true);
  s.model->set_context_parallel(nullptr);  // every rank generates from the whole prompt
  const std::vector<int64_t> ids = models::generate(*s.model, s.data.tokenizer->encode(args.sample_prompt), so);
  std::string text = s.data.tokenizer->decode(ids, /*skip_special=*/true);
  report.sample(so.temperature, so.top_k, text);
  return text;
}

// Setup (setup.h), then one step (step.h) per iteration with its log line, evaluation and checkpoint,
// then the summary (report.h).
TrainResult train_loop(const TrainArgs& args, std::FILE* out, models::ModelConfig& config, dist::Communicator& comm,
                       const TrainHooks& hooks, Clock::time_point started) {
  Setup s = setup_training(args, config, out, comm, args.device);
  Report report(args, config, s, out);
  // An unwritable --save fails now, not after the first interval's steps; a killed save's leftovers go.
  // Rank 0 writes for the run and holds --save's lock throughout: a second run saving there stops at once.
  checkpoint::PreparedSave save_dir;
  if (!args.checkpoint.save.empty() && comm.rank() == 0) {
    save_dir = checkpoint::prepare_save_dir(args.checkpoint.save);
    for (const std::string& name : save_dir.removed)
      std::fprintf(out, "removed %s/%s, left by an interrupted save\n", args.checkpoint.save.c_str(), name.c_str());
  }
  nlohmann::json info = profile_info(args, config, s.model->num_parameters());
  if (hooks.advice && !args.profile.dir.empty()) info["advice"] = hooks.advice(args, config);
  profile::Profiler profiler(profile_options(args, s.start), std::move(info));

  TrainResult result;
  result.iterations = s.start;
  result.final_val_loss = std::nan("");
  SavedTensors saved;  // of the first micro-batch
  const GracefulStop graceful(args.exit_interval, args.exit_duration_minutes, args.exit_signal_handler, started);
  for (int64_t it = s.start + 1; it <= args.train_iters; ++it) {
    const auto t0 = Clock::now();
    profiler.begin_step(it);
    const StepResult step = train_step(it, args, s, profiler, saved, [&](int64_t m) {
      if (args.report_memory && it == s.start + 1 && m == 0) report.saved_tensors(saved);
    });
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    profiler.end_step(it, out);
    report.step(it, step, seconds, s.loader.position());
    // Pinned host memory (offload, swap optimizer): what the first step took becomes one pool, so the
    // later steps never pin memory again (Allocator::pool_cached_blocks; nothing on the CPU backend).
    if (it == s.start + 1) host_allocator(args.device).pool_cached_blocks();
    result.losses.push_back(step.loss);
    if (!step.nonfinite.empty()) ++result.skipped_iterations;
    result.final_loss = step.loss;
    result.iterations = it;
    if (s.data.valid && args.eval_interval > 0 && due(it, args.eval_interval, args.train_iters)) {
      result.final_val_loss = validation_loss(args, s);
      report.validation(it, result.final_val_loss, s.loader.position());
    }
    // --exit-signal-handler, --exit-duration-in-mins, --exit-interval: save this step and stop (every rank agrees).
    const StopReason why = graceful.after(it, args.train_iters, comm);
    const bool stop = why != StopReason::none;
    if (!args.checkpoint.save.empty() && (stop || due(it, args.checkpoint.save_interval, args.train_iters))) {
      save(args, config, s, it);
      report.checkpoint_saved(it);
    }
    if (stop) {
      std::fprintf(out, "%s%s\n", graceful.describe(why, it, args.train_iters).c_str(),
                   args.checkpoint.save.empty() ? "; no --save, so nothing was saved" : "");
      break;
    }
  }
  report.summary(s, result.iterations, result.final_loss, result.final_val_loss, saved);
  if (s.data.tokenizer && !args.sample_prompt.empty() && args.sample_tokens > 0)
    result.sample = sample(args, s, report);
  return result;
}

TrainResult run_training_on(const TrainArgs& given, std::FILE* out, dist::Communicator& comm, const TrainHooks& hooks) {
  TIDAL_CHECK(!given.auto_memory || hooks.choose, "tidal train: --auto-memory needs the planner: run it through ",
              "plan::run_training (plan/training.h), as `tidal train` does");
  // --device cuda:N: that GPU is the process's before anything is allocated on it (a machine without
  // one fails here with CUDA's reason).
  const Clock::time_point started = Clock::now();  // --exit-duration-in-mins counts from here
  select_device(given.device);
  // --distributed-timeout-minutes: from here a collective that does not complete in time ends the job.
  dist::set_collective_timeout(given.parallel.timeout_minutes * 60);
  TrainArgs bound = given.on(comm.size());
  check_same_settings(bound, comm);  // before anything else is collective
  const TrainArgs args = given.auto_memory ? hooks.choose(bound, comm, out) : bound;
  models::ModelConfig config = args.model;  // load_data may take the tokenizer's vocabulary
  try {
    return train_loop(args, out, config, comm, hooks, started);
  } catch (const OutOfMemory& e) {
    if (!hooks.out_of_memory) throw;
    throw OutOfMemory(hooks.out_of_memory(e, args, config), e.requested(), e.stats());
  }
}

}  // namespace

TrainResult run_training(const TrainArgs& args, std::FILE* out, const TrainHooks& hooks) {
  return run_training(args, out, dist::world(), hooks);
}

TrainResult run_training(const TrainArgs& args, std::FILE* out, dist::Communicator& comm, const TrainHooks& hooks) {
  if (comm.rank() != 0) {  // rank 0 speaks and writes for the run
    TrainArgs quiet = args;
    quiet.metrics_json.clear();
    quiet.profile.dir.clear();
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> null(std::fopen("/dev/null", "w"), &std::fclose);
    TIDAL_CHECK(null != nullptr, "tidal train: cannot open /dev/null for rank ", comm.rank(), "'s output");
    return run_training_on(quiet, null.get(), comm, hooks);
  }
  return run_training_on(args, out, comm, hooks);
}

}  // namespace tidal::train
