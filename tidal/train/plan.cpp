#include "tidal/train/plan.h"

#include <algorithm>
#include <cstdio>

#include "tidal/base/error.h"
#include "tidal/memory_stats.h"

namespace tidal::train {
namespace {

// Which flags a step sets: a later step of the same kind replaces the earlier one's flags.
std::string kind(const std::string& step) {
  if (step.rfind("recompute", 0) == 0) return "recompute";
  return step;
}

std::string needs_line(const StepPeak& p) {
  return format_bytes(p.total) + " (parameters " + format_bytes(p.parameters) + ", optimizer states " +
         format_bytes(p.optimizer_states) + ", activations " + format_bytes(p.activations) + ", logits " +
         format_bytes(p.logits) + ")";
}

}  // namespace

std::string Plan::flags() const {
  std::vector<std::pair<std::string, std::string>> by_kind;  // in the order first taken
  for (const PlanStep& st : steps) {
    const std::string k = kind(st.suggestion.step);
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
    const int group = triage_group(options.front().step);  // triage() lists them in the order
    const Suggestion *enough = nullptr, *largest = nullptr;
    for (const Suggestion& x : options) {
      if (triage_group(x.step) != group) continue;
      if (peak - x.saving <= budget && (enough == nullptr || x.saving < enough->saving)) enough = &x;
      if (largest == nullptr || x.saving > largest->saving) largest = &x;
    }
    const Suggestion* pick = enough != nullptr ? enough : largest;
    cur = pick->with;
    peak = predict_step_peak(m, cur).total;
    plan.steps.push_back({*pick, peak});
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
    std::snprintf(head, sizeof head, "  %-24s", (st.suggestion.step + ":").c_str());
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

}  // namespace tidal::train
