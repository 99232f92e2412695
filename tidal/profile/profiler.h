#pragma once
// A profile of a range of training steps (`tidal train --profile DIR --profile-steps A:B`): while the
// window is open the range recorder, the stream observer and both allocators' event logs are on; at
// its end the profiler writes DIR/trace.json (Chrome trace events), memory_timeline.csv,
// memory_report.md, summary.json (what `tidal report` prints), memory.svg and timeline.svg.
// See docs/profiling.md.
#include <array>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tidal/autograd/saved_tensor_record.h"
#include "tidal/device.h"
#include "tidal/memory_stats.h"
#include "tidal/range_recorder.h"

namespace tidal::profile {

using CategoryBytes = std::array<int64_t, kNumMemoryCategories>;

// An allocator event with its strings copied (they are read while the model lives).
struct MemEvent {
  int64_t time_ns = 0, delta = 0, allocated = 0, reserved = 0, category_allocated = 0;
  MemoryCategory category = MemoryCategory::temporary;
  std::string op, module;
  int layer = -1;
  uintptr_t block = 0;
  MemoryEventKind kind = MemoryEventKind::allocate;
  bool failed() const { return kind == MemoryEventKind::failed; }  // the request that ran out of memory
  // A state the allocator was in: not the first half of a change of category, not a failed request.
  bool settled() const { return kind != MemoryEventKind::failed && kind != MemoryEventKind::recategorize_from; }
};

struct RangeRecord {  // a RangeEvent with its strings copied
  std::string name, kind, module;
  int64_t start_ns = 0, end_ns = 0;
  int layer = -1;
  int thread = 0;
};

struct StepSpan {
  int64_t step = 0;
  int64_t start_ns = 0, end_ns = 0;
};

// Everything recorded in a window.
struct ProfileData {
  nlohmann::json info = nlohmann::json::object();  // model, batch and settings, for the report's header
  int64_t start_ns = 0, end_ns = 0;
  CategoryBytes device_start{}, host_start{};  // allocated per category when the window opened
  int64_t device_reserved_start = 0, host_reserved_start = 0;
  int64_t device_limit = 0;
  std::vector<MemEvent> device, host;
  std::vector<RangeRecord> ranges;
  std::vector<StreamTaskEvent> tasks;
  std::vector<StepSpan> steps;
  std::vector<autograd::SavedTensorRecord> saved_tensors;  // first micro-batch of the first step
  int64_t saved_tensors_step = 0;
  std::string stopped;  // why the window ended early ("" when it ran to its end)
};

struct ProfileOptions {
  std::string dir;         // empty: profiling off
  int64_t first_step = 0;  // inclusive, in iteration numbers
  int64_t last_step = 0;
  Device device = Device::cpu();  // whose allocators' events the memory timeline records (--device)
};

// Parses "A:B" or "A" (1 <= A <= B); throws tidal::Error otherwise.
std::pair<int64_t, int64_t> parse_step_range(const std::string& text);

class Profiler {
 public:
  Profiler(ProfileOptions options, nlohmann::json info);
  // If a window is still open (an error stopped training inside it), writes what it has.
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  bool on() const { return !options_.dir.empty(); }
  bool active() const { return active_; }
  // Opens the window at its first step.
  void begin_step(int64_t step);
  // Closes the step; after the window's last step writes the files and prints one line to `out`.
  void end_step(int64_t step, std::FILE* out);
  // Whether the trainer should log the saved tensors of this micro-batch for the report.
  bool wants_saved_tensors(int64_t step, int64_t micro_batch) const;
  void set_saved_tensors(int64_t step, std::vector<autograd::SavedTensorRecord> records);
  // Stops now and writes what there is (`why` goes into the report); no-op when no window is open.
  void finish(const std::string& why, std::FILE* out);
  const std::string& dir() const { return options_.dir; }
  const ProfileData& data() const { return data_; }

 private:
  void drain();
  ProfileOptions options_;
  ProfileData data_;
  bool active_ = false;
  bool written_ = false;
  int uncaught_ = 0;
};

// Writes every file of a profile to `dir` (created if needed).
void write_profile(const ProfileData& data, const std::string& dir);

// The pieces, for tests and tools.
nlohmann::json chrome_trace(const ProfileData& data);
std::string memory_timeline_csv(const ProfileData& data);

}  // namespace tidal::profile
