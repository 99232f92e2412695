#include "tidal/plan/auto_memory.h"

#include <filesystem>
#include <string>
#include <utility>

#include "tidal/allocator.h"
#include "tidal/base/error.h"
#include "tidal/dist/collectives.h"
#include "tidal/memory_stats.h"
#include "tidal/plan/calibrate.h"
#include "tidal/plan/candidates.h"
#include "tidal/plan/search.h"

namespace tidal::plan {

std::optional<DeviceProfile> saved_device_profile(const std::string& device_profile) {
  if (!device_profile.empty()) return load_device_profile(device_profile);
  std::error_code ec;
  if (std::filesystem::is_regular_file(kDefaultDeviceProfileFile, ec))
    return load_device_profile(std::string("./") + kDefaultDeviceProfileFile);
  return std::nullopt;
}

DeviceProfile auto_memory_profile(const std::string& device_profile, std::FILE* out) {
  if (std::optional<DeviceProfile> p = saved_device_profile(device_profile)) return *p;
  std::fprintf(out,
               "--auto-memory: no device profile (--device-profile, or ./%s from tidal plan --calibrate): "
               "calibrating this machine now\n",
               kDefaultDeviceProfileFile);
  std::fflush(out);
  return calibrate();
}

namespace {

std::string seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, s >= 10 ? "%.1f s" : "%.1f ms", s >= 10 ? s : s * 1000);
  return b;
}

}  // namespace

// The search's choice for `args` on its ranks, announced on `out`: the configuration and its flags
// (empty: the run as given).
std::pair<train::TrainArgs, std::string> search_choice(const train::TrainArgs& args, std::FILE* out) {
  SearchOptions o;
  o.budget = args.auto_memory_budget > 0 ? args.auto_memory_budget : device_allocator(args.device).limit();
  TIDAL_CHECK(o.budget > 0,
              "tidal train --auto-memory: no device memory to fit (the cpu device is this machine's RAM, without a "
              "limit of its own): give --auto-memory-budget BYTES or TIDAL_DEVICE_MEMORY");
  o.profile = auto_memory_profile(args.device_profile, out);
  const PlanSearch s = search_plans(args, o);
  TIDAL_CHECK(s.chosen >= 0, "tidal train --auto-memory: ", s.nothing_fits);
  const PlanCandidate& c = s.candidates[size_t(s.chosen)];
  std::fprintf(out,
               "--auto-memory: %s (device peak %s%s of %s less %.0f%% headroom; a step predicted at %s on %s; %s)\n",
               c.flags.empty() ? "the run as given" : c.flags.c_str(), c.exact ? "" : "about ",
               format_bytes(c.device_peak).c_str(), format_bytes(s.budget).c_str(), o.headroom * 100,
               seconds(c.time.total_s).c_str(), o.profile.name.c_str(), c.why.c_str());
  return {c.args, c.flags};
}

train::TrainArgs auto_memory_choice(const train::TrainArgs& args, std::FILE* out) {
  return search_choice(args, out).first;
}

train::TrainArgs apply_auto_memory(const train::TrainArgs& given, dist::Communicator& comm, std::FILE* out) {
  train::TrainArgs args = given;
  args.parallel = given.parallel.on(comm.size());
  args.default_global_batch();
  if (comm.size() == 1) return auto_memory_choice(args, out);
  // Rank 0 searches and every rank takes its choice: ranks that each searched could choose apart
  // (a candidate on the edge of the budget) and then train different configurations, which hangs.
  // The others find the choice among the same candidates by its flags. The profile is loaded (or
  // calibrated, which measures the ranks' all-reduce) on every rank.
  std::string chosen;  // rank 0's flags, or its error after "!"
  if (comm.rank() == 0) {
    try {
      chosen = search_choice(args, out).second;
      chosen.insert(chosen.begin(), ' ');
    } catch (const Error& e) {
      chosen = e.what();
      chosen.insert(chosen.begin(), '!');
    }
  } else {
    auto_memory_profile(args.device_profile, out);
  }
  chosen = dist::all_gather_strings(comm, chosen)[0];
  TIDAL_CHECK(chosen[0] != '!', chosen.substr(1));
  const std::string flags = chosen.substr(1);
  if (flags.empty()) return args;
  for (CandidateConfig& c : enumerate_candidates(args))
    if (c.flags == flags) return std::move(c.args);
  TIDAL_CHECK(false, "tidal train --auto-memory: rank ", comm.rank(), " does not have rank 0's choice (", flags,
              ") among its candidates: the ranks were given different flags");
  return args;
}

std::string planner_advice(const train::TrainArgs& args, int64_t limit) {
  if (limit <= 0) return "";
  std::optional<DeviceProfile> profile;
  try {
    profile = saved_device_profile(args.device_profile);
  } catch (const Error&) {  // a bad profile file: the advice must not hide the out-of-memory error
  }
  if (!profile)
    return "For the fastest configuration that fits " + format_bytes(limit) +
           ": rerun with --auto-memory (it calibrates this machine first), or run 'tidal plan --calibrate' once and "
           "this message names it.\n";
  SearchOptions o;
  o.budget = limit;
  o.profile = *profile;
  const PlanSearch s = search_plans(args, o);
  if (s.chosen < 0) return s.nothing_fits + "\n";
  const PlanCandidate& c = s.candidates[size_t(s.chosen)];
  return "tidal plan's choice for " + format_bytes(limit) + " (the fastest that fits, " + format_bytes(c.device_peak) +
         ", a step of " + seconds(c.time.total_s) + " on " + o.profile.name + "): " + c.flags +
         "\n(rerun with --auto-memory to apply it).\n";
}

}  // namespace tidal::plan
