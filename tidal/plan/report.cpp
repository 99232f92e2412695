#include "tidal/plan/report.h"

#include <cstdio>
#include <vector>

#include "tidal/memory_stats.h"

namespace tidal::plan {
namespace {

// Pareto members printed before and after the chosen one.
constexpr size_t kFasterShown = 3, kSmallerShown = 5;

std::string step_time(const PlanCandidate& c) {
  if (!c.timed) return "-";
  char b[32];
  const double s = c.time.total_s;
  std::snprintf(b, sizeof b, s >= 10 ? "%.1f s" : s >= 0.1 ? "%.2f s" : "%.1f ms", s >= 0.1 ? s : s * 1000);
  return b;
}

// "~" marks a figure not wholly the candidate's own dry run's: the estimator's, or for
// --overlap-grad-reduce the dry run without the overlap plus the overlap's change by the estimator.
std::string peak(const PlanCandidate& c) {
  std::string s = format_bytes(c.device_peak);
  if (!c.exact) s.insert(s.begin(), '~');
  return s;
}

nlohmann::json candidate_json(const PlanCandidate& c) {
  nlohmann::json j = {{"flags", c.flags},
                      {"recompute", c.recompute},
                      {"device_peak_bytes", c.device_peak},
                      {"host_peak_bytes", c.checked ? nlohmann::json(c.host_peak) : nlohmann::json(nullptr)},
                      {"estimated_peak_bytes", c.estimated_peak},
                      {"exact", c.exact},
                      {"checked", c.checked},
                      {"fits", c.fits},
                      {"pareto", c.pareto},
                      {"expert_model_parallel_size", c.args.parallel.expert},
                      {"context_parallel_size", c.args.parallel.context},
                      {"why", c.why}};
  if (c.timed) {
    const StepTime& t = c.time;
    j["step_ms"] = t.total_s * 1e3;
    j["time_ms"] = {{"compute", t.compute_s * 1e3},
                    {"recompute", t.recompute_s * 1e3},
                    {"copies", t.copy_s * 1e3},
                    {"exposed_copies", t.exposed_copy_s * 1e3},
                    {"collectives", t.comm_s * 1e3},
                    {"exposed_collectives", t.exposed_comm_s * 1e3},
                    {"all_to_all", t.all_to_all_s * 1e3},
                    {"ring", t.ring_s * 1e3},
                    {"exposed_ring", t.exposed_ring_s * 1e3}};
  } else {
    j["step_ms"] = nullptr;
  }
  return j;
}

}  // namespace

std::string format_plan_search(const PlanSearch& s, const train::TrainArgs& g, const SearchOptions& o) {
  std::string out = g.model.model_type + ", micro-batch " + std::to_string(g.micro_batch_size) + " x " +
                    std::to_string(g.seq_length) + " tokens, global batch " + std::to_string(g.global_batch_size) +
                    (g.precision.bf16 ? ", bf16" : ", fp32") + ", " + std::to_string(g.parallel.world) +
                    (g.parallel.world == 1 ? " rank" : " ranks") + "; step times for " + o.profile.name + " (" +
                    o.profile.source + ").\n";
  out += "Budget " + format_bytes(s.budget) + " less " + format_bytes(s.budget - s.target) +
         " of headroom: " + format_bytes(s.target) +
         (s.host_budget > 0 ? "; host memory " + format_bytes(s.host_budget) : std::string()) + ".\n";
  out += "As given: device peak " + peak(s.given) +
         (s.given.host_peak > 0 ? ", host " + format_bytes(s.given.host_peak) : "") + ", step " + step_time(s.given) +
         (s.given.fits ? ": fits.\n" : ": does not fit.\n");
  // The front in time order; around the chosen candidate: a few faster ones (they do not fit) and the
  // smaller, slower ones after it.
  std::vector<size_t> front;
  for (size_t i = 0; i < s.candidates.size(); ++i)
    if (s.candidates[i].pareto || int(i) == s.chosen) front.push_back(i);
  size_t at = 0;
  while (at < front.size() && int(front[at]) != s.chosen) ++at;
  if (at == front.size()) at = front.size() - std::min<size_t>(front.size(), 4);  // none fits: the smallest
  const size_t first = at - std::min<size_t>(at, kFasterShown);
  const size_t last = std::min(front.size(), at + 1 + kSmallerShown);
  out += "Searched " + std::to_string(s.enumerated) + " candidates (the estimator), timed " +
         std::to_string(s.candidates.size()) + " with " + std::to_string(s.dry_runs) + " dry runs" +
         (s.made_runs > 0 ? " (and " + std::to_string(s.made_runs) + " runs' kernels made from two runs' parts)" : "") +
         ". The Pareto front " + "of device peak against step time has " + std::to_string(front.size()) + " members" +
         (last - first < front.size() ? "; around the chosen one (--json lists every candidate)" : "") +
         " (~: not its own dry run's peak: the estimator's, or for --overlap-grad-reduce the dry run's without it "
         "plus the overlap's change by the estimator; host peak unknown: -; * chosen):\n";
  out += "       step   device peak     host peak  flags\n";
  for (size_t k = first; k < last; ++k) {
    const size_t i = front[k];
    const PlanCandidate& c = s.candidates[i];
    char line[96];
    std::snprintf(line, sizeof line, "  %c %8s %13s %13s  ", int(i) == s.chosen ? '*' : ' ', step_time(c).c_str(),
                  peak(c).c_str(), c.checked ? format_bytes(c.host_peak).c_str() : "-");
    out += line + (c.flags.empty() ? std::string("(as given)") : c.flags) + (c.fits ? "" : "  [does not fit]") + "\n";
    out += "             " + c.why + "\n";
  }
  if (s.chosen >= 0) {
    const PlanCandidate& c = s.candidates[size_t(s.chosen)];
    out += c.flags.empty()
               ? "Chosen: the run as given is the fastest that fits.\n"
               : "Chosen, the fastest that fits: " + c.flags +
                     "\n(these memory flags replace the given ones; tidal train --auto-memory applies them)\n";
  } else {
    out += s.nothing_fits + "\n";
  }
  return out;
}

nlohmann::json plan_search_json(const PlanSearch& s, const SearchOptions& o) {
  nlohmann::json j;
  j["budget_bytes"] = s.budget;
  j["target_bytes"] = s.target;
  j["host_budget_bytes"] = s.host_budget;
  j["headroom"] = o.headroom;
  j["data_parallel_size"] = s.given.args.parallel.world;
  j["profile"] = {{"name", o.profile.name}, {"source", o.profile.source}};
  j["given"] = candidate_json(s.given);
  j["chosen"] = s.chosen >= 0 ? candidate_json(s.candidates[size_t(s.chosen)]) : nlohmann::json(nullptr);
  j["candidates"] = nlohmann::json::array();
  for (const PlanCandidate& c : s.candidates) j["candidates"].push_back(candidate_json(c));
  j["enumerated"] = s.enumerated;
  j["dry_runs"] = s.dry_runs;
  j["made_runs"] = s.made_runs;
  if (s.chosen < 0) j["nothing_fits"] = s.nothing_fits;
  return j;
}

}  // namespace tidal::plan
