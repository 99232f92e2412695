// `tidal plan [tidal train flags] [--memory BYTES] [--headroom PERCENT] [--dry-run]`: the step peak tidal predicts for
// a training configuration and, against a budget, the memory features that make it fit (tidal/train/plan.h).
#include <cstdio>
#include <cstdlib>

#include "tidal/base/error.h"
#include "tidal/base/flags.h"
#include "tidal/memory_stats.h"
#include "tidal/train/arguments.h"
#include "tidal/train/plan.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {

int run_plan(const std::vector<std::string>& argv) {
  // tidal plan's own two options (with their values) go to `own`, the rest to tidal train's parser.
  std::vector<std::string> own, train_argv;
  bool dry = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--help" || argv[i] == "-h") {
      std::printf(
          "usage: tidal plan [tidal train flags] [--memory BYTES] [--headroom PERCENT] [--data-parallel-size N]\n"
          "                  [--dry-run]\n\n"
          "Predicts the device memory of one training step of that configuration (nothing is allocated:\n"
          "any preset size works) and, against --memory (default: TIDAL_DEVICE_MEMORY) less --headroom\n"
          "percent (default 10), which of tidal's memory features make it fit, in the triage order. Exit\n"
          "code 0 when it fits (as given or with the plan), 3 when nothing does. --data-parallel-size N\n"
          "plans one of N ranks under mpirun (per-rank memory; sharding then saves: docs/distributed.md).\n"
          "--bf16 plans mixed precision: bf16 parameters, activations and logits, f32 gradient sums, and\n"
          "12 bytes of AdamW state per parameter (f32 master weights and moments; docs/memory.md).\n"
          "--dry-run also runs two training steps of the configuration on the meta device (shapes, no\n"
          "values: any size, no memory touched, no file written; the same code as training, offload and\n"
          "the swap optimizer included) and prints the allocators' exact device and host peaks and their\n"
          "breakdown beside the estimator's prediction (docs/memory.md, \"Dry run\"); with\n"
          "--data-parallel-size N it plays ranks of N in one process and prints the rank with the highest\n"
          "peak. It refuses --load, --pretrained and --overlap-grad-reduce.\n"
          "The other flags are tidal train's ('tidal train --help'); docs/profiling.md, \"Planning before\n"
          "training\".\n");
      return kOk;
    }
    if (argv[i] == "--dry-run") {
      dry = true;
    } else if (argv[i] == "--memory" || argv[i] == "--headroom" || argv[i] == "--data-parallel-size") {
      own.push_back(argv[i]);
      if (i + 1 < argv.size()) own.push_back(argv[++i]);
    } else {
      train_argv.push_back(argv[i]);
    }
  }
  Flags f("plan");
  f.option("memory", "the device memory budget, e.g. 80GiB", "BYTES")
      .option("headroom", "percent of the budget kept free (default 10)", "PERCENT")
      .option("data-parallel-size", "plan one of N data-parallel ranks (default 1)", "N");
  f.parse(own);
  std::string memory = f.str("memory");
  const double headroom = f.number("headroom", train::kDefaultPlanHeadroom * 100, 0, 95) / 100;
  if (memory.empty()) {
    const char* env = std::getenv("TIDAL_DEVICE_MEMORY");
    if (env != nullptr) memory = env;
  }
  const train::TrainArgs args = train::parse_train_args(train_argv);
  const train::TriageSettings s =
      train::triage_settings(args, int(f.integer("data-parallel-size", 1, 1, train::kMaxDataParallelSize)));
  if (dry) {
    const train::DryRun d = train::dry_run_largest_rank(args, int(s.data_parallel));
    std::fputs(train::format_dry_run(d, train::predict_step_peak(args.model, s)).c_str(), stdout);
  }
  if (memory.empty()) {  // no budget: what a step needs and what each step of the triage would save
    std::fputs(train::oom_advice(args.model, s).c_str(), stdout);
    std::printf("(give a budget, --memory 80GiB or TIDAL_DEVICE_MEMORY, for a plan)\n");
    return kOk;
  }
  const int64_t budget = parse_bytes(memory);
  TIDAL_CHECK(budget > 0, "tidal plan: --memory must be positive, got '", memory, "'");
  const train::Plan plan = train::make_plan(args.model, s, budget, headroom);
  std::fputs(train::format_plan(plan, args.model, s).c_str(), stdout);
  return plan.fits ? kOk : kOutOfMemory;
}

}  // namespace tidal::cli
