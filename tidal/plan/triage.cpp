#include "tidal/plan/triage.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "tidal/base/error.h"
#include "tidal/memory_stats.h"

namespace tidal::plan {
namespace {

// Which flags a step sets: a later step of the same kind replaces the earlier one's flags.
TriageStep kind(TriageStep step) { return step == TriageStep::recompute_full ? TriageStep::recompute_selective : step; }

std::string needs_line(const StepPeak& p) {
  return format_bytes(p.total) + " (parameters " + format_bytes(p.parameters) + ", optimizer states " +
         format_bytes(p.optimizer_states) + ", activations " + format_bytes(p.activations) + ", logits " +
         format_bytes(p.logits) + ")";
}

// The greedy's order: the triage groups, with expert and context parallelism (printed in the sharding
// group) a group of their own after sharding and before recompute.
int plan_order(TriageStep step) {
  const bool parallel = step == TriageStep::expert_parallel || step == TriageStep::context_parallel;
  return 2 * triage_group(step) + (parallel ? 1 : 0);
}

}  // namespace

std::string Plan::flags() const {
  std::vector<std::pair<TriageStep, std::string>> by_kind;  // in the order first taken
  for (const PlanStep& st : steps) {
    const TriageStep k = kind(st.suggestion.step);
    auto it = std::find_if(by_kind.begin(), by_kind.end(), [&](const auto& e) { return e.first == k; });
    if (it == by_kind.end()) {
      by_kind.push_back({k, st.suggestion.flags});
    } else {
      it->second = st.suggestion.flags;
    }
  }
  std::string out;
  for (const auto& [k, f] : by_kind) out += (out.empty() ? "" : " ") + f;
  return out;
}

Plan make_plan(const models::ModelConfig& m, const TriageSettings& s, int64_t budget, double headroom) {
  TIDAL_CHECK(headroom >= 0 && headroom < 1, "tidal plan: the headroom must be in [0, 1), got ", headroom);
  Plan plan;
  plan.budget = budget;
  plan.target = int64_t(double(budget) * (1 - headroom));
  budget = plan.target;
  plan.start = predict_step_peak(m, s);
  TriageSettings cur = s;
  int64_t peak = plan.start.total;
  // Every step lowers the prediction, so this ends; the bound is a guard.
  for (int guard = 0; peak > budget && guard < 32; ++guard) {
    std::vector<Suggestion> options;
    for (Suggestion& x : triage(m, cur))
      if (x.saving > 0) options.push_back(std::move(x));
    if (options.empty()) break;
    const int group = plan_order(options.front().step);  // triage() lists them in the order
    const Suggestion *enough = nullptr, *largest = nullptr;
    for (const Suggestion& x : options) {
      if (plan_order(x.step) != group) continue;
      if (peak - x.saving <= budget && (enough == nullptr || x.saving < enough->saving)) enough = &x;
      if (largest == nullptr || x.saving > largest->saving) largest = &x;
    }
    Suggestion pick = enough != nullptr ? *enough : *largest;
    // Expert and context parallelism are offered at their largest size; where that is enough, the smallest
    // size that is enough instead (fewer ranks in each exchange).
    if (enough != nullptr && (pick.step == TriageStep::expert_parallel || pick.step == TriageStep::context_parallel)) {
      const int widest =
          pick.step == TriageStep::expert_parallel ? pick.with.parallel.expert : pick.with.parallel.context;
      for (int n = 2; n < widest; ++n) {
        std::optional<Suggestion> x = suggest_parallel_size(m, cur, pick.step, n);
        if (x && peak - x->saving <= budget) {
          pick = std::move(*x);
          break;
        }
      }
    }
    cur = pick.with;
    peak = predict_step_peak(m, cur).total;
    plan.steps.push_back({pick, peak});
  }
  plan.fits = peak <= budget;
  return plan;
}

std::string format_plan(const Plan& p, const models::ModelConfig& m, const TriageSettings& s) {
  std::string out = m.model_type + ", micro-batch " + std::to_string(s.micro_batch) + " x " + std::to_string(s.seq) +
                    " tokens: a training step needs about " + needs_line(p.start) + ".\n";
  const std::string target = "the budget, " + format_bytes(p.budget) + ", less " + format_bytes(p.budget - p.target) +
                             " of headroom: " + format_bytes(p.target);
  if (p.steps.empty()) {
    out += p.fits ? "It fits " + target + ".\n" : "It does not fit " + target + ", and nothing tidal has lowers it.\n";
    return out;
  }
  out += "It does not fit " + target + ". In the triage order, each step on top of those before it:\n";
  for (const PlanStep& st : p.steps) {
    char head[64];
    std::snprintf(head, sizeof head, "  %-24s", (std::string(name(st.suggestion.step)) + ":").c_str());
    out += head + st.suggestion.flags + "  -> " + format_bytes(st.peak) + (st.peak <= p.target ? ", fits" : "") + "\n";
  }
  if (p.fits) {
    out += "Add: " + p.flags() + "\n";
  } else {
    out += "Even with all of them a step needs " + format_bytes(p.steps.back().peak) +
           ": a shorter sequence, a smaller model or a larger device.\n";
  }
  return out;
}

std::string format_dry_run(const DryRun& d, const std::optional<StepPeak>& predicted, bool saved_table) {
  const MemoryStats& st = d.device;
  char line[160];
  std::string out = "Dry run (" + std::to_string(d.steps) +
                    " steps on the meta device, counted by the allocator): " + "device peak " +
                    format_bytes(st.peak_allocated) + " (" + std::to_string(st.peak_allocated) + " B; reserved " +
                    format_bytes(st.peak_reserved) + ")";
  if (predicted) {
    const double ratio = predicted->total > 0 ? double(st.peak_allocated) / double(predicted->total) : 0.0;
    std::snprintf(line, sizeof line, "%.3f", ratio);
    out += ", the estimator predicts " + format_bytes(predicted->total) + " (dry run / estimator " + line + ").\n";
  } else {
    out += "; the estimator does not model this model.\n";
  }
  if (d.ranks > 1) {
    std::string run;
    for (int r : d.ranks_run) run += (run.empty() ? "" : ", ") + std::to_string(r);
    out += "  Rank " + std::to_string(d.rank) + " of " + std::to_string(d.ranks) +
           " has the highest device peak (ranks dry-run: " + (run.empty() ? std::to_string(d.rank) : run) + ").\n";
  }
  const MemoryStats& host = d.host;
  out += "  Host peak " + format_bytes(host.peak_allocated) + " (" + std::to_string(host.peak_allocated) +
         " B; reserved " + format_bytes(host.peak_reserved) + ").\n";
  out += "  category           at the peak    its own peak\n";
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const MemoryCategory cat = MemoryCategory(c);
    const bool on_host = cat == MemoryCategory::host_offload;  // the host allocator's (dry_run.h)
    const MemoryStats& from = on_host ? host : st;
    std::snprintf(line, sizeof line, "  %-16s %13s %15s%s\n", std::string(category_name(cat)).c_str(),
                  format_bytes(from.at_peak[size_t(c)]).c_str(), format_bytes(from[cat].peak).c_str(),
                  on_host ? "  (host)" : "");
    out += line;
  }
  out += "  activations saved by a micro-batch's forward: outside the layers " +
         format_bytes(d.activation_bytes_outside_layers);
  const std::vector<int64_t>& per = d.activation_bytes_per_layer;
  if (!per.empty()) {
    const auto [lo, hi] = std::minmax_element(per.begin(), per.end());
    out += ", per layer " + (*lo == *hi ? format_bytes(*lo) + " each of " + std::to_string(per.size()) : std::string());
    if (*lo != *hi) {
      for (size_t l = 0; l < per.size(); ++l) out += (l ? ", " : "") + std::to_string(l) + ": " + format_bytes(per[l]);
    }
  }
  out += "\n";
  if (!saved_table)
    return out + "  (--report-memory: the table of the " + std::to_string(d.saved.size()) + " tensors saved)\n";
  return out + "Tensors the first micro-batch saved for backward:\n" + autograd::saved_tensors_table(d.saved);
}

}  // namespace tidal::plan
