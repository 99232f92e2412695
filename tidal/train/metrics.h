#pragma once
// --metrics-json: one JSON object kept current during the run (rewritten atomically at every log
// step): {"config": {...}, "steps": [...], "summary": {...}}. Field names are stable: later features
// add fields, these stay.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tidal/memory_stats.h"
#include "tidal/models/config.h"

namespace tidal::train {

struct StepMetrics {
  int64_t iteration = 0;
  double loss = 0, lr = 0, grad_norm = 0, step_ms = 0, tokens_per_s = 0;
  int64_t device_peak_bytes = 0;
  std::vector<double> mtp_losses;  // --mtp-num-layers: each depth's loss ("mtp_losses"; absent without MTP)
};

class MetricsWriter {
 public:
  // No file when `path` is empty (then every call is a no-op except the bookkeeping).
  MetricsWriter(std::string path, nlohmann::json config);
  void add_step(const StepMetrics& m);
  // The summary fields; memory from the device and host allocators' stats.
  void set_summary(double final_loss, double final_val_loss, const MemoryStats& device, const MemoryStats& host);
  // An extra summary field (later features add theirs; the documented ones stay).
  void set_summary_field(const std::string& key, nlohmann::json value) { summary_[key] = std::move(value); }
  // Writes the file: the whole document each time, so it is current while training runs. `last`: the run's
  // final write; a stream (--metrics-json /dev/stdout, a FIFO) gets that one only, one document.
  void write(bool last = false) const;
  const std::vector<StepMetrics>& steps() const { return steps_; }
  double median_step_ms() const;
  double mean_tokens_per_s() const;

 private:
  std::string path_;
  bool stream_ = false;  // path_ is written through, not replaced (io::replaces_file)
  nlohmann::json config_;
  std::vector<StepMetrics> steps_;
  nlohmann::json summary_ = nlohmann::json::object();
};

// Model FLOPs per token of one training step (forward + backward = 3 x forward): 2 per
// multiply-add of every matrix product a token goes through (experts: only the top-k it uses) plus
// attention's q k^T and p v (counted in full, as Megatron-LM does; a sliding layer's query against
// the min(window, seq) keys of its window).
double training_flops_per_token(const models::ModelConfig& c, int64_t seq_length);

}  // namespace tidal::train
