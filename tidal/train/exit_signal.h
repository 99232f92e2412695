#pragma once
// Megatron-LM's --exit-signal-handler: a SIGTERM (what a scheduler sends before it kills a job) makes
// training save a checkpoint at the end of the current step and stop with exit 0, instead of dying mid-step
// and losing the steps since the last save. The handler only sets a flag; the training loop reads it after
// each step, every rank agreeing (any rank's signal stops them all).
#include <csignal>

#include "tidal/dist/communicator.h"

namespace tidal::train {

class ExitSignal {
 public:
  // Installs the SIGTERM handler when `on` (the previous one comes back when this goes).
  explicit ExitSignal(bool on);
  ~ExitSignal();
  ExitSignal(const ExitSignal&) = delete;
  ExitSignal& operator=(const ExitSignal&) = delete;

  // Whether any rank of `comm` received the signal (a collective when on: every rank calls it each step).
  bool received(dist::Communicator& comm) const;

 private:
  bool on_;
  struct sigaction previous_ {};
};

}  // namespace tidal::train
