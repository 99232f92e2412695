#pragma once
// The progress of `tidal prepare`: on a terminal a line on stderr redrawn in place (the share of the input
// read when its size is known, the documents or records done, MB/s); with --log-interval N (Megatron's
// preprocess_data.py flag) a line every N of them, terminal or not.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tidal/base/flags.h"

namespace tidal::cli {

// --log-interval N (0 when not given).
int64_t log_interval(const Flags& a);
// The inputs' size in bytes (the bar's whole for plain text).
int64_t input_bytes(const std::vector<std::string>& files);

class PrepareProgress {
 public:
  // `unit`: "documents" or "records"; `total_bytes` 0 when the input's size is not known ahead (JSON Lines).
  PrepareProgress(std::string unit, int64_t log_interval, int64_t total_bytes, std::FILE* out = stderr);
  ~PrepareProgress() { clear(); }
  PrepareProgress(const PrepareProgress&) = delete;
  PrepareProgress& operator=(const PrepareProgress&) = delete;
  // `done` documents or records and `bytes` of input read so far.
  void update(int64_t done, int64_t bytes);
  // Erases the redrawn line (before the summary).
  void clear();

 private:
  std::string unit_;
  int64_t log_interval_, total_bytes_, next_log_;
  std::FILE* out_;
  bool terminal_, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace tidal::cli
