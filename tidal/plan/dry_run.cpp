#include "tidal/plan/dry_run.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>

#include "tidal/allocator.h"
#include "tidal/base/error.h"
#include "tidal/dist/meta_communicator.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/moe.h"
#include "tidal/nn/lora.h"
#include "tidal/ops/matmul.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/shard_layout.h"
#include "tidal/seam/planned_device.h"
#include "tidal/train/profiling.h"
#include "tidal/train/setup.h"
#include "tidal/train/step.h"

namespace tidal::plan {
namespace {

void check_supported(const train::TrainArgs& a) {
  const char* what = "tidal plan --dry-run: ";
  TIDAL_CHECK(a.checkpoint.load.empty() && a.pretrained.empty(), what,
              "--load and --pretrained read values a dry run does not have: drop them (the model flags give the "
              "shapes)");
  TIDAL_CHECK(!a.parallel.overlap_grad_reduce, what,
              "--overlap-grad-reduce is not dry-run: its reductions run on a stream thread beside backward, so the "
              "peak depends on timing (in a real run too); drop it for the dry run (the buffers are the same, less "
              "the overlap's transient bytes)");
}

// The run's arguments as a dry run takes them: mock tokens, nothing written, no evaluation.
train::TrainArgs dry_args(const train::TrainArgs& a) {
  train::TrainArgs d = a;
  d.mock_data = true;
  d.builtin_corpus = false;
  d.data_path.clear();
  d.checkpoint.save.clear();
  d.metrics_json.clear();
  d.profile.dir.clear();
  return d;
}

// Both meta allocators, empty: reserved bytes from this run's requests alone, as a fresh process's.
void start_fresh(Allocator& a) {
  TIDAL_ASSERT(a.stats().allocated == 0, "a dry run needs the ", a.name(), " allocator to itself (",
               format_bytes(a.stats().allocated), " of meta tensors are live)");
  a.empty_cache();
}

// Every rank's shard size under `args`' sharding (one rank: the whole model).
std::vector<int64_t> shard_sizes(const train::TrainArgs& args, int ranks) {
  models::ModelConfig config = args.model;
  config.validate();
  nn::Init init;
  init.device = Device::meta();
  std::vector<int64_t> numels;
  const std::unique_ptr<models::CausalLM> model = models::create_model(config, init);
  if (args.lora.enabled()) nn::apply_lora(*model, args.lora.config, init);  // the optimizer holds the adapters alone
  for (const auto& [name, p] : model->named_trainable_parameters()) numels.push_back(p.numel());
  const optim::ShardLayout layout = optim::make_shard_layout(numels, ranks, optim::kGradNormChunk);
  std::vector<int64_t> sizes;
  for (int r = 0; r < ranks; ++r) sizes.push_back(layout.shard_size(r));
  return sizes;
}

}  // namespace

DryRun dry_run(const train::TrainArgs& given, int rank, bool kept_kernels) {
  const int ranks = given.parallel.world;
  check_supported(given);
  const train::TrainArgs args = dry_args(given);
  const PlanFor target(given.device.type);  // the kernels' workspaces as --device's backend sizes them
  // The products' kept workspace (cuBLASLt's, planning for cuda) goes when the dry run does, also on an error.
  struct ReleaseWorkspace {
    ~ReleaseWorkspace() { release_planned_matmul_workspace(); }
  } release_workspace;
  Allocator& meta = device_allocator(Device::meta());
  Allocator& host = host_allocator(Device::meta());
  start_fresh(meta);
  start_fresh(host);
  dist::MetaCommunicator comm(rank, ranks);
  models::ModelConfig config = args.model;
  DryRun r;
  r.rank = rank;
  r.ranks = ranks;
  r.sharding = args.parallel.sharding;
  {
    std::FILE* quiet = std::fopen("/dev/null", "w");  // setup's log lines (ZeRO-3's build) are the real run's
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> closer(quiet, std::fclose);
    train::Setup s = train::setup_training(args, config, quiet != nullptr ? quiet : stderr, comm, Device::meta());
    for (const auto& [name, p] : s.model->named_trainable_parameters()) {  // reduced and updated (LoRA: adapters)
      r.parameter_numels.push_back(p.numel());
      r.expert_parameter.push_back(models::is_expert_parameter(name));
    }
    // Off (no --profile-dir): nothing of the header is read.
    profile::Profiler profiler(train::profile_options(args, 0), nlohmann::json::object());
    train::SavedTensors saved;
    const int64_t steps = std::min<int64_t>(args.train_iters, kDryRunSteps);  // the schedule keeps --train-iters
    for (int64_t it = 1; it <= steps; ++it) {
      profiler.begin_step(it);
      std::optional<KernelRecorder> recorder;  // the last step's kernels, for the cost model
      if (it == steps) recorder.emplace();
      train::train_step(it, args, s, profiler, saved, [](int64_t) {});
      if (recorder) {
        r.kernels = kept_kernels ? recorder->finish_kept() : recorder->finish();
        for (const StepKernel& k : r.kernels) r.recorded_kernels += k.count;
      }
      profiler.end_step(it, nullptr);
      ++r.steps;
    }
    r.device = meta.stats();
    r.host = host.stats();
    r.activation_bytes_per_layer.assign(size_t(config.num_hidden_layers), 0);
    for (const autograd::SavedTensorRecord& x : saved) {
      if (x.category != "activation" || x.policy != "kept") continue;
      if (x.layer >= 0 && x.layer < config.num_hidden_layers) {
        r.activation_bytes_per_layer[size_t(x.layer)] += x.bytes;
      } else {
        r.activation_bytes_outside_layers += x.bytes;
      }
    }
    r.saved = std::move(saved);
  }
  meta.empty_cache();
  host.empty_cache();
  return r;
}

std::vector<int> largest_rank_candidates(const train::TrainArgs& args) {
  const int ranks = args.parallel.world;
  TIDAL_CHECK(ranks >= 1, "tidal plan --dry-run: --data-parallel-size must be >= 1, got ", ranks);
  std::vector<int> run = {0};
  if (ranks > 1 && args.parallel.sharded()) {
    check_supported(args);
    const std::vector<int64_t> sizes = shard_sizes(args, ranks);
    run.resize(size_t(ranks));
    std::iota(run.begin(), run.end(), 0);
    std::stable_sort(run.begin(), run.end(), [&](int a, int b) { return sizes[size_t(a)] > sizes[size_t(b)]; });
    run.resize(size_t(std::min(ranks, kDryRunRanks)));
    std::sort(run.begin(), run.end());
  }
  return run;
}

DryRunOutcome rank_dry_run(const train::TrainArgs& args, int rank, bool keep_saved) {
  DryRunOutcome o;
  try {
    o.run = dry_run(args, rank);
    if (!keep_saved) o.run->saved = {};
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    o.error = e.what();
  }
  return o;
}

DryRun largest_of(const std::vector<int>& ranks, std::vector<DryRunOutcome> outcomes) {
  TIDAL_ASSERT(ranks.size() == outcomes.size() && !ranks.empty(), "largest_of: ", outcomes.size(), " dry runs for ",
               ranks.size(), " ranks");
  DryRun best;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (!outcomes[i].run) throw Error(outcomes[i].error);  // the first rank's refusal, as one after another
    DryRun& d = *outcomes[i].run;
    const bool higher =
        best.ranks_run.empty() || d.device.peak_allocated > best.device.peak_allocated ||
        (d.device.peak_allocated == best.device.peak_allocated && d.host.peak_allocated > best.host.peak_allocated);
    if (higher) {
      std::vector<int> so_far = std::move(best.ranks_run);
      best = std::move(d);
      best.ranks_run = std::move(so_far);
    }
    best.ranks_run.push_back(ranks[i]);
  }
  return best;
}

DryRun dry_run_largest_rank(const train::TrainArgs& args) {
  const std::vector<int> run = largest_rank_candidates(args);
  std::vector<DryRunOutcome> outcomes;
  for (const int r : run) {
    outcomes.push_back(rank_dry_run(args, r, true));
    if (!outcomes.back().run) break;  // the first refusal is the answer
  }
  outcomes.resize(run.size());
  return largest_of(run, std::move(outcomes));
}

}  // namespace tidal::plan
