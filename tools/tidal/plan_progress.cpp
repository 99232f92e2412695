#include "tools/tidal/plan_progress.h"

#include <unistd.h>

#include <string>

namespace tidal::cli {
namespace {

constexpr double kQuietSeconds = 10;

std::string line(const plan::SearchProgress& p) {
  using Phase = plan::SearchProgress::Phase;
  char b[512];
  switch (p.phase) {
    case Phase::estimate:
      std::snprintf(b, sizeof b, "estimating %lld candidates: %lld done", (long long)p.candidates,
                    (long long)p.estimated);
      break;
    case Phase::time:
      std::snprintf(b, sizeof b, "timing the %lld that may fit: %lld looked at, %lld timed with %lld dry runs",
                    (long long)p.may_fit, (long long)p.considered, (long long)p.timed, (long long)p.dry_runs);
      break;
    case Phase::verify:
      std::snprintf(b, sizeof b, "checking the fastest by their own dry runs: %lld", (long long)p.checks);
      break;
    case Phase::done:
      std::snprintf(b, sizeof b,
                    "searched in %.1f s: the estimator %.1f s (%lld candidates), timing %.1f s (%lld dry runs), "
                    "checks %.1f s (%lld dry runs)",
                    p.estimate_s + p.time_s + p.verify_s, p.estimate_s, (long long)p.candidates, p.time_s,
                    (long long)p.dry_runs, p.verify_s, (long long)p.checks);
      return b;
  }
  std::string out = b;
  if (p.best_s > 0) {
    std::snprintf(b, sizeof b, "; fastest so far %.3g s (%s)", p.best_s, p.best_flags.c_str());
    out += b;
  }
  return out;
}

}  // namespace

PlanProgress::PlanProgress(std::FILE* out)
    : out_(out), terminal_(::isatty(fileno(out)) != 0), start_(std::chrono::steady_clock::now()), last_(start_) {}

void PlanProgress::update(const plan::SearchProgress& p) {
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const bool done = p.phase == plan::SearchProgress::Phase::done;
  // A quick search says nothing: lines start after kQuiet seconds (a redrawn one after a moment).
  if (elapsed < (terminal_ && !done ? 0.5 : kQuietSeconds)) return;
  if (done) {
    clear();
    std::fprintf(out_, "tidal plan: %s\n", line(p).c_str());
  } else if (terminal_) {
    if (since < 0.2 && p.phase == phase_) return;
    std::string l = line(p);
    if (l.size() > 160) l = l.substr(0, 157) + "...";  // one terminal line, redrawn
    std::fprintf(out_, "\r\033[Ktidal plan: %s", l.c_str());
    drawn_ = true;
  } else {
    if (since < kQuietSeconds && p.phase == phase_) return;
    std::fprintf(out_, "tidal plan: %s\n", line(p).c_str());
  }
  std::fflush(out_);
  phase_ = p.phase;
  last_ = now;
}

void PlanProgress::clear() {
  if (!drawn_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace tidal::cli
