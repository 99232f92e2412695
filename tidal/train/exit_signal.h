#pragma once
// Megatron-LM's --exit-signal-handler: a SIGTERM (what a scheduler sends before it kills a job) makes
// training save a checkpoint at the end of the current step and stop with exit 0, instead of dying mid-step
// and losing the steps since the last save. The handler only sets a flag; the training loop reads it after
// each step through GracefulStop (graceful_stop.h), every rank agreeing (any rank's signal stops them all).
#include <csignal>

namespace tidal::train {

class ExitSignal {
 public:
  // Installs the SIGTERM handler when `on` (the previous one comes back when this goes).
  explicit ExitSignal(bool on);
  ~ExitSignal();
  ExitSignal(const ExitSignal&) = delete;
  ExitSignal& operator=(const ExitSignal&) = delete;

  // Whether this process received the signal (GracefulStop agrees with the other ranks).
  bool received() const;

 private:
  bool on_;
  struct sigaction previous_ {};
};

}  // namespace tidal::train
