#pragma once
// The progress of `tidal plan`'s search (plan/search.h SearchProgress) on stderr, once it has run 10 s
// (a quick search says nothing): on a terminal one line redrawn in place; otherwise a line when a phase
// starts and at most every 10 s within it. At the end, one line with the time each phase took.
#include <chrono>
#include <cstdio>

#include "tidal/plan/search.h"

namespace tidal::cli {

class PlanProgress {
 public:
  explicit PlanProgress(std::FILE* out = stderr);
  ~PlanProgress() { clear(); }
  PlanProgress(const PlanProgress&) = delete;
  PlanProgress& operator=(const PlanProgress&) = delete;
  void update(const plan::SearchProgress& p);

 private:
  void clear();
  std::FILE* out_;
  bool terminal_, drawn_ = false;
  plan::SearchProgress::Phase phase_ = plan::SearchProgress::Phase::done;  // of the last line written
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace tidal::cli
