#include "tidal/profile/profiler.h"

#include <exception>

#include "tidal/allocator.h"
#include "tidal/base/clock.h"
#include "tidal/base/error.h"
#include "tidal/io/atomic_file.h"
#include "tidal/profile/analysis.h"

namespace tidal::profile {

std::pair<int64_t, int64_t> parse_step_range(const std::string& text) {
  const size_t colon = text.find(':');
  auto number = [&](const std::string& s) {
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TIDAL_CHECK(used == s.size() && used > 0 && v >= 1,
                "--profile-steps takes A:B (iterations, 1 <= A <= B) or A, got '", text, "'");
    return v;
  };
  const int64_t a = number(text.substr(0, colon));
  const int64_t b = colon == std::string::npos ? a : number(text.substr(colon + 1));
  TIDAL_CHECK(a <= b, "--profile-steps ", text, ": the first step is after the last");
  return {a, b};
}

Profiler::Profiler(ProfileOptions options, nlohmann::json info) : options_(std::move(options)) {
  data_.info = std::move(info);
  if (!options_.dir.empty()) io::create_directories(options_.dir, "--profile");  // fail now, not after the steps
  uncaught_ = std::uncaught_exceptions();
}

Profiler::~Profiler() {
  if (!active_) return;
  try {
    finish(std::uncaught_exceptions() > uncaught_ ? "training stopped by an error inside the profiled steps"
                                                  : "training ended before the last profiled step",
           stderr);
  } catch (...) {  // a destructor must not throw; the profile is lost, training's own error stands
  }
}

void Profiler::begin_step(int64_t step) {
  if (!on() || written_) return;
  if (!active_ && step >= options_.first_step && step <= options_.last_step) {
    Allocator& dev = device_allocator(options_.device);
    Allocator& host = host_allocator(options_.device);
    dev.clear_events();
    host.clear_events();
    const MemoryStats ds = dev.set_event_log(true), hs = host.set_event_log(true);
    for (int i = 0; i < kNumMemoryCategories; ++i) {
      data_.device_start[size_t(i)] = ds.category[size_t(i)].allocated;
      data_.host_start[size_t(i)] = hs.category[size_t(i)].allocated;
    }
    data_.device_reserved_start = ds.reserved;
    data_.host_reserved_start = hs.reserved;
    data_.device_limit = ds.limit;
    start_recording();
    data_.start_ns = now_ns();
    active_ = true;
  }
  if (active_) data_.steps.push_back({step, now_ns(), 0});
}

bool Profiler::wants_saved_tensors(int64_t, int64_t micro_batch) const {
  return active_ && micro_batch == 0 && data_.saved_tensors_step == 0;
}

void Profiler::set_saved_tensors(int64_t step, std::vector<autograd::SavedTensorRecord> records) {
  if (!active_ || data_.saved_tensors_step != 0) return;
  data_.saved_tensors = std::move(records);
  data_.saved_tensors_step = step;
}

void Profiler::drain() {
  auto copy = [](std::vector<MemoryEvent> in, std::vector<MemEvent>& out) {
    for (const MemoryEvent& e : in)
      out.push_back({e.time_ns, e.delta, e.allocated, e.reserved, e.category_allocated, e.category, e.op ? e.op : "",
                     e.module ? e.module : "", e.layer, reinterpret_cast<uintptr_t>(e.block), e.kind});
  };
  copy(device_allocator(options_.device).take_events(), data_.device);
  copy(host_allocator(options_.device).take_events(), data_.host);
  for (const RangeEvent& r : take_ranges())
    data_.ranges.push_back({r.name ? r.name : "", r.kind ? r.kind : kOp, r.module ? r.module : "", r.start_ns, r.end_ns,
                            r.layer, r.thread});
  for (StreamTaskEvent& t : take_stream_tasks()) data_.tasks.push_back(std::move(t));
}

void Profiler::end_step(int64_t step, std::FILE* out) {
  if (!active_) return;
  data_.steps.back().end_ns = now_ns();
  drain();
  if (step >= options_.last_step) finish("", out);
}

void Profiler::finish(const std::string& why, std::FILE* out) {
  if (!active_) return;
  stop_recording();
  device_allocator(options_.device).set_event_log(false);
  host_allocator(options_.device).set_event_log(false);
  drain();
  active_ = false;
  written_ = true;
  data_.end_ns = now_ns();
  if (!data_.steps.empty() && data_.steps.back().end_ns == 0) data_.steps.back().end_ns = data_.end_ns;
  data_.stopped = why;
  // After an out-of-memory error, what follows it is the unwinding: the profile ends at the failure.
  const int64_t f = failed_event(data_);
  if (f >= 0) {
    const int64_t t = data_.device[size_t(f)].time_ns;
    data_.device.resize(size_t(f) + 1);
    std::erase_if(data_.host, [t](const MemEvent& e) { return e.time_ns > t; });
    data_.stopped = "out of memory";
  }
  write_profile(data_, options_.dir);
  if (out != nullptr) {
    const int64_t p = peak_event(data_);
    std::string steps = data_.steps.empty() ? "-" : std::to_string(data_.steps.front().step);
    if (data_.steps.size() > 1) steps.append(1, '-').append(std::to_string(data_.steps.back().step));
    std::string peak = "-";
    if (p >= 0) peak = format_bytes(data_.device[size_t(p)].allocated) + " at op " + data_.device[size_t(p)].op;
    std::fprintf(out,
                 " profile of step %s written to %s (trace.json, memory_timeline.csv, memory_report.md, memory.svg, "
                 "timeline.svg); peak %s; 'tidal report %s' summarizes it\n",
                 steps.c_str(), options_.dir.c_str(), peak.c_str(), options_.dir.c_str());
    std::fflush(out);
  }
}

}  // namespace tidal::profile
