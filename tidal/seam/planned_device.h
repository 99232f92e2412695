#pragma once
// The device a meta-device run (a dry run: plan/dry_run.h) is planned for. The meta device's kernels
// (backend/meta/cost_kernels.cpp) answer the layout and scratch questions a kernel call depends on --
// whether a matrix is a product's operand as it stands, how many partial rows a norm's weight gradient
// takes, how much workspace flash attention needs -- with that device's backend's answers, so a dry run
// of `--device cuda` allocates what the CUDA kernels will (cuDNN's attention workspace, not the CPU's
// tiles). The cpu by default.
#include "tidal/device.h"

namespace tidal {

class Kernels;

DeviceType planned_device();
// That device's kernels (their layout queries need no device: they run on any machine).
Kernels& planned_kernels();

// Plans for `type` while it lives (restoring the previous device after). A type whose backend this
// build lacks is an error naming it.
class PlanFor {
 public:
  explicit PlanFor(DeviceType type);
  ~PlanFor();
  PlanFor(const PlanFor&) = delete;
  PlanFor& operator=(const PlanFor&) = delete;

 private:
  DeviceType saved_;
};

}  // namespace tidal
