#include "tidal/train/dry_run.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "tidal/allocator.h"
#include "tidal/base/error.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/train/profiling.h"
#include "tidal/train/setup.h"
#include "tidal/train/step.h"

namespace tidal::train {
namespace {

void check_supported(const TrainArgs& a) {
  const char* what = "tidal plan --dry-run: ";
  TIDAL_CHECK(!a.memory.offload.enabled, what,
              "--activation-offload is not dry-run yet (its host copies need a meta host allocator): "
              "drop it for the dry run; the estimator's prediction covers it");
  TIDAL_CHECK(!a.memory.swap_optimizer.on, what,
              "--swap-optimizer is not dry-run yet (its host states need a meta host allocator): "
              "drop it for the dry run; the estimator's prediction covers it");
  TIDAL_CHECK(a.data_parallel.sharding == ShardingStrategy::no_shard, what, "--data-parallel-sharding-strategy ",
              sharding_name(a.data_parallel.sharding),
              " is not dry-run yet (one process, no sharding): the estimator's prediction covers it");
  TIDAL_CHECK(a.load.empty() && a.pretrained.empty(), what,
              "--load and --pretrained read values a dry run does not have: drop them (the model flags give the "
              "shapes)");
}

// The run's arguments as a dry run takes them: mock tokens, nothing written, no evaluation.
TrainArgs dry_args(const TrainArgs& a) {
  TrainArgs d = a;
  d.mock_data = true;
  d.builtin_corpus = false;
  d.data_path.clear();
  d.save.clear();
  d.metrics_json.clear();
  d.profile_dir.clear();
  return d;
}

}  // namespace

DryRun dry_run(const TrainArgs& given) {
  check_supported(given);
  const TrainArgs args = dry_args(given);
  Allocator& meta = device_allocator(Device::meta());
  TIDAL_ASSERT(meta.stats().allocated == 0, "a dry run needs the meta device to itself (",
               format_bytes(meta.stats().allocated), " of meta tensors are live)");
  meta.empty_cache();  // reserved bytes from this run's requests alone, as a fresh process's
  dist::SingleCommunicator comm;
  models::ModelConfig config = args.model;
  DryRun r;
  {
    Setup s = setup_training(args, config, stderr, comm, Device::meta());
    // Off (no --profile-dir), and without profile_info: its advice builds a model on the meta device.
    profile::Profiler profiler(profile_options(args, 0), nlohmann::json::object());
    SavedTensors saved;
    const int64_t steps = std::min<int64_t>(args.train_iters, kDryRunSteps);  // the schedule keeps --train-iters
    for (int64_t it = 1; it <= steps; ++it) {
      profiler.begin_step(it);
      std::optional<KernelRecorder> recorder;  // the last step's kernels, for the cost model
      if (it == steps) recorder.emplace();
      train_step(it, args, s, profiler, saved, [](int64_t) {});
      if (recorder) r.kernels = recorder->finish();
      profiler.end_step(it, nullptr);
      ++r.steps;
    }
    r.device = meta.stats();
    r.activation_bytes_per_layer.assign(size_t(config.num_hidden_layers), 0);
    for (const autograd::SavedTensorRecord& x : saved) {
      if (x.category != "activation" || x.policy != "kept") continue;
      if (x.layer >= 0 && x.layer < config.num_hidden_layers) {
        r.activation_bytes_per_layer[size_t(x.layer)] += x.bytes;
      } else {
        r.activation_bytes_outside_layers += x.bytes;
      }
    }
  }
  meta.empty_cache();
  return r;
}

}  // namespace tidal::train
