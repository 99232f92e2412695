#pragma once
// What `tidal train` prints and keeps in --metrics-json and --tensorboard-dir (trainer.h): the header, the
// progress bar, a Megatron-style line every --log-interval, validation and checkpoint lines, and the summary,
// where each memory feature reports its own statistics (the offloader, the swap optimizer, recompute).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "tidal/io/tensorboard.h"
#include "tidal/train/arguments.h"
#include "tidal/train/metrics.h"
#include "tidal/train/setup.h"
#include "tidal/train/step.h"

namespace tidal::train {

// The progress bar, redrawn in place after every step when `out` is a terminal.
class Progress {
 public:
  Progress(bool on, int64_t total, std::FILE* out);
  void update(int64_t it, double loss, double ms);
  void clear();

 private:
  bool on_;
  int64_t total_;
  std::FILE* out_;
};

class Report {
 public:
  // Prints the header: the model, the data, the batch and each memory feature as configured.
  Report(const TrainArgs& args, const models::ModelConfig& config, const Setup& s, std::FILE* out);
  // --report-memory: the table of what the first micro-batch saved for backward.
  void saved_tensors(const SavedTensors& saved);
  // Records iteration `it` (which took `seconds`); prints and writes the metrics every --log-interval,
  // and a line for every step skipped as non-finite (nan_guard.h).
  void step(int64_t it, const StepResult& r, double seconds, int64_t consumed_samples);
  void validation(int64_t it, double loss, int64_t consumed_samples);
  void checkpoint_saved(int64_t it);
  // The summary, in the metrics and printed: memory, each memory feature's statistics over the
  // iterations this process ran (from `s.start` to `last_iteration`), the device peak's breakdown.
  void summary(const Setup& s, int64_t last_iteration, double final_loss, double final_val_loss,
               const SavedTensors& saved);
  void sample(double temperature, int64_t top_k, const std::string& text);

 private:
  const TrainArgs& args_;
  std::FILE* out_;
  // The step's scalars into the event file (Megatron's tags).
  void tensorboard_step(int64_t it, const StepResult& r, const StepMetrics& m, int64_t consumed_samples);
  MetricsWriter metrics_;
  std::unique_ptr<io::EventWriter> tensorboard_;  // rank 0 with --tensorboard-dir
  Progress progress_;
  int64_t tokens_per_step_ = 0;
  double flops_per_token_ = 0;
  int64_t recompute_ns0_ = 0;  // the recompute clock when training started
  int64_t skipped_ = 0;        // steps --skip-nonfinite-steps skipped
};

}  // namespace tidal::train
