// The files of a profile: the Chrome trace (trace-event format, JSON object form: Perfetto and
// chrome://tracing open it), the memory timeline CSV, and write_profile, which writes them all.
#include <map>
#include <set>

#include "tidal/io/atomic_file.h"
#include "tidal/profile/analysis.h"
#include "tidal/profile/profiler.h"
#include "tidal/profile/svg.h"

namespace tidal::profile {
namespace {

constexpr int kPid = 1;
constexpr int kPhaseTid = 0;      // steps and phases
constexpr int kComputeTid = 1;    // the compute thread (recorder thread 0)
constexpr int kStreamTid0 = 100;  // side streams: 100, 101, ...
constexpr int kOtherTid0 = 1000;  // other threads that recorded ranges

double us(int64_t ns, int64_t t0) { return double(ns - t0) / 1e3; }

nlohmann::json meta(const char* what, int tid, nlohmann::json args) {
  return {{"name", what}, {"ph", "M"}, {"ts", 0}, {"pid", kPid}, {"tid", tid}, {"args", std::move(args)}};
}

// The categories a pool used in the window (a counter track each); at least one.
std::vector<int> used_categories(const CategoryBytes& start, const std::vector<MemEvent>& events) {
  std::set<int> used;
  for (int i = 0; i < kNumMemoryCategories; ++i)
    if (start[size_t(i)] != 0) used.insert(i);
  for (const MemEvent& e : events) used.insert(int(e.category));
  if (used.empty()) used.insert(int(MemoryCategory::temporary));
  return {used.begin(), used.end()};
}

void add_counters(nlohmann::json& ev, const char* name, const char* reserved_name, const CategoryBytes& start,
                  int64_t reserved_start, const std::vector<MemEvent>& events, int64_t t0) {
  const std::vector<int> cats = used_categories(start, events);
  const std::vector<CategoryBytes> states = replay_states(start, events);
  auto counter = [&](int64_t ts, const CategoryBytes& c) {
    nlohmann::json args = nlohmann::json::object();
    for (int i : cats) args[std::string(category_name(MemoryCategory(i)))] = c[size_t(i)];
    return nlohmann::json{{"name", name}, {"ph", "C"},          {"ts", us(ts, t0)},
                          {"pid", kPid},  {"tid", kComputeTid}, {"args", std::move(args)}};
  };
  auto reserved = [&](int64_t ts, int64_t r) {
    return nlohmann::json{{"name", reserved_name}, {"ph", "C"},          {"ts", us(ts, t0)},
                          {"pid", kPid},           {"tid", kComputeTid}, {"args", {{"reserved", r}}}};
  };
  ev.push_back(counter(t0, start));
  ev.push_back(reserved(t0, reserved_start));
  int64_t last_reserved = reserved_start;
  for (size_t i = 0; i < events.size(); ++i) {
    const MemEvent& e = events[i];
    if (!e.settled()) continue;  // the state after a change of category comes with its second half
    ev.push_back(counter(e.time_ns, states[i]));
    if (e.reserved != last_reserved) ev.push_back(reserved(e.time_ns, last_reserved = e.reserved));
  }
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

const char* event_name(MemoryEventKind k) {
  switch (k) {
    case MemoryEventKind::allocate: return "alloc";
    case MemoryEventKind::free: return "free";
    case MemoryEventKind::recategorize_from: return "recategorize_from";
    case MemoryEventKind::recategorize_to: return "recategorize_to";
    case MemoryEventKind::failed: return "out_of_memory";
  }
  return "?";
}

void write_text(const std::string& path, const std::string& text) {
  io::write_atomically(path, [&](int fd) { io::write_all(fd, text.data(), text.size(), path); });
}

// The steps on the phase lane, then every range: phases there, the compute thread's on its lane, other
// threads' on one lane each.
void add_ranges(nlohmann::json& ev, const ProfileData& d, int64_t t0) {
  for (const StepSpan& s : d.steps)
    ev.push_back({{"name", "step " + std::to_string(s.step)},
                  {"cat", "step"},
                  {"ph", "X"},
                  {"ts", us(s.start_ns, t0)},
                  {"dur", double(s.end_ns - s.start_ns) / 1e3},
                  {"pid", kPid},
                  {"tid", kPhaseTid},
                  {"args", {{"step", s.step}}}});
  std::set<int> other_threads;
  for (const RangeRecord& r : d.ranges) {
    int tid = kComputeTid;
    if (r.kind == kPhase)
      tid = kPhaseTid;
    else if (r.thread != 0)
      other_threads.insert(tid = kOtherTid0 + r.thread);
    const bool recompute = is_recompute(r.name);
    nlohmann::json e = {{"name", r.name},
                        {"cat", recompute ? std::string("recompute") : r.kind},
                        {"ph", "X"},
                        {"ts", us(r.start_ns, t0)},
                        {"dur", double(r.end_ns - r.start_ns) / 1e3},
                        {"pid", kPid},
                        {"tid", tid},
                        {"args", {{"layer", r.layer}, {"module", r.module}}}};
    if (recompute) e["cname"] = "terrible";  // chrome://tracing's red
    if (r.kind == kWait) e["cname"] = "grey";
    if (r.kind == kComm) e["cname"] = "olive";
    ev.push_back(std::move(e));
  }
  for (int tid : other_threads)
    ev.push_back(meta("thread_name", tid, {{"name", "thread " + std::to_string(tid - kOtherTid0)}}));
}

// Side streams: one lane each, after compute.
void add_stream_lanes(nlohmann::json& ev, const ProfileData& d, int64_t t0) {
  std::map<std::string, int> lanes;
  for (const StreamTaskEvent& t : d.tasks) {
    auto [it, inserted] = lanes.emplace(t.stream, kStreamTid0 + int(lanes.size()));
    if (inserted) {
      ev.push_back(meta("thread_name", it->second, {{"name", t.stream + " stream"}}));
      ev.push_back(meta("thread_sort_index", it->second, {{"sort_index", 2 + int(lanes.size())}}));
    }
    ev.push_back({{"name", t.label},
                  {"cat", "stream"},
                  {"ph", "X"},
                  {"ts", us(t.start_ns, t0)},
                  {"dur", double(t.end_ns - t.start_ns) / 1e3},
                  {"pid", kPid},
                  {"tid", it->second},
                  {"args", {{"stream", t.stream}}}});
  }
}

// The failed allocation, if the run ran out of memory: an instant event with what it asked for.
void add_out_of_memory(nlohmann::json& ev, const ProfileData& d, int64_t t0) {
  const int64_t f = failed_event(d);
  if (f < 0) return;
  const MemEvent& e = d.device[size_t(f)];
  ev.push_back({{"name", "out of memory"},
                {"cat", "memory"},
                {"ph", "i"},
                {"s", "g"},
                {"ts", us(e.time_ns, t0)},
                {"pid", kPid},
                {"tid", kComputeTid},
                {"args",
                 {{"requested", e.delta},
                  {"category", std::string(category_name(e.category))},
                  {"op", e.op},
                  {"layer", e.layer},
                  {"module", e.module}}}});
}

}  // namespace

nlohmann::json chrome_trace(const ProfileData& d) {
  const int64_t t0 = d.start_ns;
  nlohmann::json ev = nlohmann::json::array();
  ev.push_back(meta("process_name", kPhaseTid, {{"name", "tidal"}}));
  ev.push_back(meta("thread_name", kPhaseTid, {{"name", "steps and phases"}}));
  ev.push_back(meta("thread_sort_index", kPhaseTid, {{"sort_index", 0}}));
  ev.push_back(meta("thread_name", kComputeTid, {{"name", "compute"}}));
  ev.push_back(meta("thread_sort_index", kComputeTid, {{"sort_index", 1}}));
  add_ranges(ev, d, t0);
  add_stream_lanes(ev, d, t0);
  add_counters(ev, "device memory", "device reserved", d.device_start, d.device_reserved_start, d.device, t0);
  if (!d.host.empty() || d.host_reserved_start > 0)
    add_counters(ev, "host memory", "host reserved", d.host_start, d.host_reserved_start, d.host, t0);
  add_out_of_memory(ev, d, t0);
  nlohmann::json trace;
  trace["traceEvents"] = std::move(ev);
  trace["displayTimeUnit"] = "ms";
  trace["otherData"] = {{"producer", "tidal train --profile"}, {"info", d.info}};
  return trace;
}

std::string memory_timeline_csv(const ProfileData& d) {
  std::string out = "time_us,op,layer,category,delta_bytes,allocated,reserved,module,pool,event\n";
  auto rows = [&](const std::vector<MemEvent>& events, const char* pool) {
    for (const MemEvent& e : events) {
      char num[160];
      std::snprintf(num, sizeof num, "%.3f", double(e.time_ns - d.start_ns) / 1e3);
      out += std::string(num) + "," + csv_field(e.op) + "," + std::to_string(e.layer) + "," +
             std::string(category_name(e.category)) + "," + std::to_string(e.delta) + "," +
             std::to_string(e.allocated) + "," + std::to_string(e.reserved) + "," + csv_field(e.module) + "," + pool +
             "," + event_name(e.kind) + "\n";
    }
  };
  rows(d.device, "device");
  rows(d.host, "host");
  return out;
}

void write_profile(const ProfileData& d, const std::string& dir) {
  io::create_directories(dir, "[profile]");
  const nlohmann::json summary = summarize(d);
  write_text(dir + "/trace.json", chrome_trace(d).dump() + "\n");
  write_text(dir + "/memory_timeline.csv", memory_timeline_csv(d));
  write_text(dir + "/summary.json", summary.dump(1) + "\n");
  write_text(dir + "/memory_report.md", memory_report(d, summary));
  write_text(dir + "/memory.svg", memory_svg(d));
  write_text(dir + "/timeline.svg", timeline_svg(d));
}

}  // namespace tidal::profile
