#pragma once
// `tidal plan --calibrate`: measures this machine into a DeviceProfile with tidal's own ops and
// kernels at training-like shapes, so the rates are the ones a training step reaches here
// (docs/planning.md, "Calibrating this machine"). Uses the kernel threads training uses
// (num_threads(): TIDAL_NUM_THREADS, else every core). About 10-20 s on 2 cores; `quick` runs tiny
// shapes once (tests: the structure of the result, never its figures).
#include <functional>
#include <string>

#include "tidal/plan/device_profile.h"

namespace tidal::plan {

struct CalibrateOptions {
  bool quick = false;
  std::string temp_dir;  // where the spill-file measurement writes (default: TMPDIR, else /tmp)
  std::function<void(const std::string&)> progress;  // called with "GEMM f32", ... before each measurement
};

// Rank 0's figures under mpirun (every rank must call it: the all-reduce is measured across ranks).
// On one rank collective_bandwidth and collective_latency_s stay 0: not measured.
DeviceProfile calibrate(const CalibrateOptions& options = {});

// This machine's processor, from /proc/cpuinfo ("AMD EPYC 9R14"), or "unknown CPU".
std::string cpu_model_name();

}  // namespace tidal::plan
