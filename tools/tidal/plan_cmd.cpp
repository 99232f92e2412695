// `tidal plan [tidal train flags] [--memory BYTES] [--headroom PERCENT] [--dry-run] [--device NAME|FILE]`: the step
// peak tidal predicts for a training configuration and, against a budget, the memory features that make it fit
// (tidal/plan/triage.h). `tidal plan --calibrate` measures this machine into a device profile
// (tidal/plan/calibrate.h); `tidal plan --list-devices` prints the built-in profiles.
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "tidal/base/error.h"
#include "tidal/base/flags.h"
#include "tidal/dist/communicator.h"
#include "tidal/memory_stats.h"
#include "tidal/parallel/expert.h"
#include "tidal/plan/auto_memory.h"
#include "tidal/plan/calibrate.h"
#include "tidal/plan/device_profile.h"
#include "tidal/plan/dry_run_pool.h"
#include "tidal/plan/report.h"
#include "tidal/plan/search.h"
#include "tidal/plan/triage.h"
#include "tidal/train/arguments.h"
#include "tools/tidal/cli.h"
#include "tools/tidal/plan_progress.h"

namespace tidal::cli {
namespace {

// `tidal plan --calibrate [--quick] [--profile-out FILE]`: every rank measures (the all-reduce needs
// them all), rank 0 prints the table and writes the file.
int run_calibrate(bool quick, std::string out) {
  if (out.empty()) out = plan::kDefaultDeviceProfileFile;
  const bool first = dist::world().rank() == 0;
  plan::CalibrateOptions o;
  o.quick = quick;
  if (first) o.progress = [](const std::string& what) { std::fprintf(stderr, "calibrating: %s\n", what.c_str()); };
  const plan::DeviceProfile p = plan::calibrate(o);
  if (!first) return kOk;
  plan::save_device_profile(out, p);
  std::printf("%s(written to %s; plan with it: tidal plan --device %s ...)\n", plan::format_device_profile(p).c_str(),
              out.c_str(), out.c_str());
  return kOk;
}

// tidal plan's own flags, declared on tidal train's table: one parser for the whole command line.
Flags& add_plan_flags(Flags& f) {
  return f.option("memory", "the device memory budget, e.g. 80GiB", "BYTES")
      .option("headroom", "percent of the budget kept free (default 10)", "PERCENT")
      .option("data-parallel-size", "plan one of N data-parallel ranks (default 1)", "N")
      .option("device", "a device profile: a built-in name or a file from --calibrate", "NAME|FILE")
      .option("profile-out", "where --calibrate writes the profile", "FILE")
      .option("kernels", "whose kernels' workspaces the dry runs size: cpu (default) or cuda", "cpu|cuda")
      .flag("dry-run", "also run two training steps on the meta device and print their exact peaks")
      .flag("calibrate", "measure this machine into a device profile")
      .flag("quick", "with --calibrate: tiny shapes, a smoke test")
      .flag("list-devices", "print the built-in device profiles")
      .flag("json", "print the search as JSON: given, chosen, candidates")
      .option("host-memory", "the host memory the run may use (offload, swap optimizer); default: no limit", "BYTES");
}

// --kernels: the backend whose workspaces (flash attention's, above all) the dry runs allocate.
Device plan_kernels(const Flags& f) {
  if (!f.has("kernels")) return Device::cpu();
  const std::string k = f.str("kernels");
  TIDAL_CHECK(k == "cpu" || k == "cuda", "tidal plan: --kernels takes cpu or cuda, got '", k, "'");
  return k == "cpu" ? Device::cpu() : Device::cuda(0);
}

}  // namespace

int run_plan(const std::vector<std::string>& argv) {
  Flags f = train::train_flags("plan");
  add_plan_flags(f);
  // --offload-dir is tidal plan's: search offload to disk too, with the spill file there (tidal
  // train's flag of the same name, taken out before the train flags are read).
  f.parse(argv);
  if (f.help_requested()) {
    std::printf(
        "usage: tidal plan [tidal train flags] [--memory BYTES] [--headroom PERCENT] [--data-parallel-size N]\n"
        "                  [--dry-run] [--kernels cpu|cuda] [--device NAME|FILE] [--json] [--host-memory BYTES]\n"
        "                  [--offload-dir DIR]\n"
        "       tidal plan --calibrate [--profile-out FILE] [--quick]\n"
        "       tidal plan --list-devices\n\n"
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
        "breakdown beside the estimator's prediction (docs/memory.md, \"Dry run\"), and with\n"
        "--report-memory the table of every tensor the first micro-batch saved for backward; with\n"
        "--data-parallel-size N it plays ranks of N in one process and prints the rank with the highest\n"
        "peak. It refuses --load, --pretrained and --overlap-grad-reduce. --kernels cuda sizes the\n"
        "kernels' workspaces as the CUDA backend does (cuDNN's attention: docs/cuda.md), cpu by default.\n"
        "--device NAME|FILE plans for a device profile: a built-in (--list-devices: h100, h200, a100) or\n"
        "a file from --calibrate (./tidal-device-profile.json is read when it exists); its memory is the\n"
        "budget when --memory is not given. With a profile, tidal plan searches the memory features,\n"
        "the micro-batch and (with ranks) sharding, expert and context parallelism (when not given: given\n"
        "sizes are kept and must divide N) for the fastest configuration that fits: exact peaks\n"
        "from dry runs, step times from a cost model over their kernels; it prints the Pareto front of\n"
        "memory against time with the chosen one marked (--json: as JSON). --host-memory BYTES: the host\n"
        "memory offload and the swap optimizer may use; --offload-dir DIR: search offload to disk too.\n"
        "tidal train --auto-memory trains with the choice (docs/planning.md).\n"
        "--calibrate measures this machine with tidal's own kernels (GEMM and flash attention f32/bf16,\n"
        "memory bandwidth, kernel overhead, host copies, spill-file disk, all-reduce under mpirun; about\n"
        "10-20 s on 2 cores) and writes the profile to --profile-out (default ./tidal-device-profile.json);\n"
        "--quick runs tiny shapes (a smoke test: figures meaningless). docs/planning.md.\n"
        "The other flags are tidal train's ('tidal train --help'); docs/profiling.md, \"Planning before\n"
        "training\".\n");
    return kOk;
  }
  const std::string disk_dir = f.has("offload-dir") ? f.take("offload-dir").front() : "";
  const bool dry = f.flag_on("dry-run");
  // Whether any tidal train flag was given (--calibrate takes none).
  const auto train_given = [&] {
    Flags plan_only("plan");
    add_plan_flags(plan_only);
    for (const std::string& name : f.given())
      if (!plan_only.declares(name)) return true;
    return false;
  };
  if (f.flag_on("list-devices")) {
    for (const plan::BuiltinDevice& b : plan::builtin_device_profiles())
      std::fputs(plan::format_device_line(b.key, b.profile).c_str(), stdout);
    return kOk;
  }
  if (f.flag_on("calibrate")) {
    TIDAL_CHECK(!train_given() && !dry && !f.has("device") && disk_dir.empty(),
                "--calibrate measures this machine and takes ",
                "only --profile-out and --quick; plan a configuration in a second call with --device FILE");
    return run_calibrate(f.flag_on("quick"), f.str("profile-out"));
  }
  TIDAL_CHECK(!f.flag_on("quick") && !f.has("profile-out"), "--quick and --profile-out go with --calibrate");
  std::string memory = f.str("memory");
  const bool json = f.flag_on("json");
  TIDAL_CHECK(!(json && dry), "tidal plan: --json prints the search; run --dry-run without it");
  // The profile that times the search: --device, else this machine's calibrated file when it exists.
  TIDAL_CHECK(!f.has("device") || !f.str("device").empty(), "tidal plan: --device needs a profile: a built-in ",
              "name (tidal plan --list-devices) or a file from tidal plan --calibrate");
  std::optional<plan::DeviceProfile> device = plan::saved_device_profile(f.str("device"));
  std::string device_from;
  if (f.has("device")) {
    const bool budget = memory.empty() && device->memory_bytes > 0;
    if (budget) memory = std::to_string(device->memory_bytes);
    device_from = budget ? "; its memory is the budget" : "";
  } else if (device) {
    device_from = std::string(", from ./") + plan::kDefaultDeviceProfileFile;
  }
  if (device && !json)
    std::printf("Device: %s (%s)%s\n", device->name.c_str(), device->source.c_str(), device_from.c_str());
  const double headroom = f.number("headroom", plan::kDefaultPlanHeadroom * 100, 0, 95) / 100;
  if (memory.empty()) {
    const char* env = std::getenv("TIDAL_DEVICE_MEMORY");
    if (env != nullptr) memory = env;
  }
  f.take("device");  // the profile's (read above), not a run device: tidal plan plans on the meta device
  train::TrainArgs args = train::train_args(f);
  args.device = plan_kernels(f);
  args.parallel.world = int(f.integer("data-parallel-size", 1, 1, parallel::kMaxDataParallelSize));
  args.default_global_batch();  // bound to the ranks planned for
  const plan::TriageSettings s = plan::triage_settings(args);
  // Expert and context parallelism as given are kept (the search varies them when not given): they must
  // run on the ranks planned for.
  parallel::check_expert_parallel(args.parallel, args.model);
  TIDAL_CHECK(args.parallel.world % args.parallel.context == 0, "tidal plan: --context-parallel-size ",
              args.parallel.context, " does not divide the ", args.parallel.world,
              " ranks planned for (--data-parallel-size): the ranks are data-parallel size x context-parallel size");
  if (dry) {
    const plan::DryRun d = plan::dry_run_largest_rank(args);
    // A step the estimator refuses still gets its exact dry run, and against a budget whether that peak fits; the
    // triage and the search need the estimator.
    std::optional<plan::StepPeak> predicted;
    std::string unmodeled;
    try {
      predicted = plan::predict_step_peak(args.model, s);
    } catch (const InternalError&) {
      throw;
    } catch (const Error& e) {
      unmodeled = e.what();
    }
    std::fputs(plan::format_dry_run(d, predicted, args.report_memory).c_str(), stdout);
    if (!predicted) {
      std::printf("No estimate, so no triage and no search: %s\n", unmodeled.c_str());
      if (memory.empty()) return kOk;
      const int64_t target = int64_t(double(parse_bytes(memory)) * (1 - headroom));
      const bool fits = d.device.peak_allocated <= target;
      std::printf("The dry run's device peak %s the budget less its headroom, %s.\n", fits ? "fits" : "does not fit",
                  format_bytes(target).c_str());
      return fits ? kOk : kOutOfMemory;
    }
  }
  // --json is the search's document, which needs a budget; the advice without one is text.
  TIDAL_CHECK(!json || !memory.empty(), "tidal plan: --json prints the search for a memory budget: give --memory ",
              "80GiB (or --device NAME|FILE, whose memory is the budget, or TIDAL_DEVICE_MEMORY)");
  if (memory.empty()) {  // no budget: what a step needs and what each step of the triage would save
    std::fputs(plan::oom_advice(args.model, s).c_str(), stdout);
    std::printf("(give a budget, --memory 80GiB or TIDAL_DEVICE_MEMORY, for a plan)\n");
    return kOk;
  }
  const int64_t budget = parse_bytes(memory);
  TIDAL_CHECK(budget > 0, "tidal plan: --memory must be positive, got '", memory, "'");
  if (!device && (json || f.has("host-memory") || !disk_dir.empty())) {
    // The search needs step times and no profile is at hand: this machine's, measured now (on stderr, so
    // --json's standard output stays JSON), as --auto-memory does.
    std::fprintf(stderr,
                 "tidal plan: no device profile (--device NAME|FILE, or ./%s from tidal plan --calibrate): "
                 "calibrating this machine now (10-20 s)\n",
                 plan::kDefaultDeviceProfileFile);
    device = plan::calibrate();
  }
  if (!device) {  // no step times: the triage order on the estimator alone
    const plan::Plan plan = plan::make_plan(args.model, s, budget, headroom);
    std::fputs(plan::format_plan(plan, args.model, s).c_str(), stdout);
    std::printf(
        "(for the fastest configuration that fits, with step times: --device NAME|FILE, or tidal plan "
        "--calibrate first)\n");
    return plan.fits ? kOk : kOutOfMemory;
  }
  plan::SearchOptions o;
  o.budget = budget;
  o.headroom = headroom;
  o.profile = *device;
  if (f.has("host-memory")) {
    o.host_budget = parse_bytes(f.str("host-memory"));
    TIDAL_CHECK(o.host_budget > 0, "tidal plan: --host-memory must be positive, got '", f.str("host-memory"), "'");
  }
  o.disk_dir = disk_dir;
  o.dry_run_workers = plan::dry_run_workers();  // TIDAL_PLAN_JOBS, else every core
  PlanProgress progress;                        // on stderr
  o.progress = [&progress](const plan::SearchProgress& p) { progress.update(p); };
  const plan::PlanSearch search = plan::search_plans(args, o);
  if (json) {
    std::printf("%s\n", plan::plan_search_json(search, o).dump(2).c_str());
  } else {
    std::fputs(plan::format_plan_search(search, args, o).c_str(), stdout);
  }
  return search.chosen >= 0 ? kOk : kOutOfMemory;
}

}  // namespace tidal::cli
