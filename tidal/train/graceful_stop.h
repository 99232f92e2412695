#pragma once
// Megatron-LM's three ways to end a run early with nothing lost: --exit-signal-handler (a SIGTERM),
// --exit-interval N (after an iteration that is a multiple of N) and --exit-duration-in-mins M (once M minutes
// have passed since the run started). Each saves the step it ends (with --save) and stops training with
// exit 0. A signal and a clock are each rank's own, so that part of the decision is all-reduced: any rank's
// reason stops every rank after the same iteration (Megatron all-reduces its duration test with MAX); the
// interval is the same on every rank (same_settings.h checks it).
#include <chrono>
#include <cstdint>
#include <string>

#include "tidal/dist/communicator.h"
#include "tidal/train/exit_signal.h"

namespace tidal::train {

// By priority: when ranks have different reasons, the highest is the one reported.
enum class StopReason { none = 0, interval = 1, duration = 2, signal = 3 };

class GracefulStop {
 public:
  using Clock = std::chrono::steady_clock;
  // `started`: when the run started; the duration counts from it, setup included (Megatron counts from
  // start-up). Installs the SIGTERM handler when `signal_handler`.
  GracefulStop(int64_t exit_interval, double exit_duration_minutes, bool signal_handler, Clock::time_point started);

  // After iteration `it` of `last`: why to save and stop now, or none. A collective when the signal handler or
  // the duration is on: every rank calls it after every iteration. The last iteration is never an early stop
  // (the run ends there anyway, saving as usual).
  StopReason after(int64_t it, int64_t last, dist::Communicator& comm) const;

  // The log line for a stop: "received SIGTERM: stopped after iteration 3 of 100 (--exit-signal-handler)".
  std::string describe(StopReason why, int64_t it, int64_t last) const;

 private:
  int64_t interval_;
  double minutes_;
  bool signal_on_;
  ExitSignal signal_;
  Clock::time_point started_;
};

}  // namespace tidal::train
