#include "tidal/profile/analysis.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace tidal::profile {
namespace {

double ms(int64_t ns) { return double(ns) / 1e6; }

nlohmann::json by_category(const CategoryBytes& v) {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < kNumMemoryCategories; ++i) j[std::string(category_name(MemoryCategory(i)))] = v[size_t(i)];
  return j;
}

// The state at time t of a replayed event list: the state after the last event at or before t.
CategoryBytes state_at(const CategoryBytes& start, const std::vector<MemEvent>& events,
                       const std::vector<CategoryBytes>& states, int64_t t) {
  auto it =
      std::upper_bound(events.begin(), events.end(), t, [](int64_t x, const MemEvent& e) { return x < e.time_ns; });
  if (it == events.begin()) return start;
  return states[size_t(it - events.begin() - 1)];
}

struct Interval {
  int64_t a, b;
};

std::vector<Interval> union_of(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& x, const Interval& y) { return x.a < y.a; });
  std::vector<Interval> u;
  for (const Interval& i : v) {
    if (!u.empty() && i.a <= u.back().b)
      u.back().b = std::max(u.back().b, i.b);
    else
      u.push_back(i);
  }
  return u;
}

// When the compute thread was working: inside an op or a node's backward, and not blocked in a
// wait (a node that waits for its saved tensor's copy is not computing meanwhile) or in a blocking
// exchange between ranks (ring attention's last dK/dV, the MoE all-to-all).
std::vector<Interval> compute_busy(const ProfileData& d) {
  std::vector<Interval> ops, waits;
  for (const RangeRecord& r : d.ranges) {
    if (r.thread != 0 || r.end_ns <= r.start_ns) continue;
    if (r.kind == kOp || r.kind == kBackward) ops.push_back({r.start_ns, r.end_ns});
    if (r.kind == kWait || r.kind == kComm) waits.push_back({r.start_ns, r.end_ns});
  }
  const std::vector<Interval> busy = union_of(std::move(ops)), idle = union_of(std::move(waits));
  std::vector<Interval> out;
  size_t w = 0;
  for (Interval b : busy) {
    while (w < idle.size() && idle[w].b <= b.a) ++w;
    for (size_t k = w; k < idle.size() && idle[k].a < b.b; ++k) {
      if (idle[k].a > b.a) out.push_back({b.a, idle[k].a});
      b.a = std::max(b.a, idle[k].b);
    }
    if (b.a < b.b) out.push_back(b);
  }
  return out;
}

int64_t covered(const std::vector<Interval>& u, int64_t a, int64_t b) {
  int64_t sum = 0;
  auto it = std::upper_bound(u.begin(), u.end(), a, [](int64_t x, const Interval& i) { return x < i.b; });
  for (; it != u.end() && it->a < b; ++it) sum += std::max<int64_t>(0, std::min(b, it->b) - std::max(a, it->a));
  return sum;
}

struct BlockInfo {
  MemoryCategory category;
  int layer;
  std::string module;
  int64_t bytes;
};

}  // namespace

std::vector<CategoryBytes> replay_states(const CategoryBytes& start, const std::vector<MemEvent>& events) {
  std::vector<CategoryBytes> out;
  out.reserve(events.size());
  CategoryBytes cur = start;
  for (const MemEvent& e : events) {
    if (!e.failed()) cur[size_t(e.category)] += e.delta;
    out.push_back(cur);
  }
  return out;
}

int64_t peak_event(const ProfileData& d) {
  int64_t best = -1;
  for (size_t i = 0; i < d.device.size(); ++i)
    if (d.device[i].settled() && (best < 0 || d.device[i].allocated > d.device[size_t(best)].allocated))
      best = int64_t(i);
  return best;
}

int64_t failed_event(const ProfileData& d) {
  for (size_t i = 0; i < d.device.size(); ++i)
    if (d.device[i].failed()) return int64_t(i);
  return -1;
}

int64_t step_at(const ProfileData& d, int64_t t) {
  if (d.steps.empty()) return -1;
  for (const StepSpan& s : d.steps)
    if (t >= s.start_ns && t <= s.end_ns) return s.step;
  for (const StepSpan& s : d.steps)
    if (t < s.start_ns) return s.step;
  return d.steps.back().step;
}

std::string phase_at(const ProfileData& d, int64_t t) {
  const RangeRecord* best = nullptr;
  for (const RangeRecord& r : d.ranges)
    if (r.kind == kPhase && t >= r.start_ns && t <= r.end_ns &&
        (best == nullptr || r.end_ns - r.start_ns < best->end_ns - best->start_ns))
      best = &r;
  return best ? best->name : "";
}

bool is_recompute(const std::string& name) { return name == "checkpoint_replay" || name == "recompute_output"; }

namespace {

// Each step's time, phases and peak.
nlohmann::json step_table(const ProfileData& d) {
  nlohmann::json steps = nlohmann::json::array();
  for (const StepSpan& st : d.steps) {
    nlohmann::json j;
    j["step"] = st.step;
    j["ms"] = ms(st.end_ns - st.start_ns);
    std::map<std::string, int64_t> phases;
    for (const RangeRecord& r : d.ranges)
      if (r.kind == kPhase && r.start_ns >= st.start_ns && r.end_ns <= st.end_ns)
        phases[r.name] += r.end_ns - r.start_ns;
    j["phases_ms"] = nlohmann::json::object();
    for (const auto& [name, ns] : phases) j["phases_ms"][name] = ms(ns);
    int64_t peak = 0;
    for (const MemEvent& e : d.device)
      if (e.settled() && e.time_ns >= st.start_ns && e.time_ns <= st.end_ns) peak = std::max(peak, e.allocated);
    j["peak_bytes"] = peak;
    steps.push_back(j);
  }
  return steps;
}

// Where event i happened and what memory held then (device by category, host).
nlohmann::json memory_at(const ProfileData& d, const std::vector<CategoryBytes>& dev,
                         const std::vector<CategoryBytes>& host, size_t i) {
  const MemEvent& e = d.device[i];
  const int64_t step = step_at(d, e.time_ns);
  int64_t into = 0;
  for (const StepSpan& st : d.steps)
    if (st.step == step) into = e.time_ns - st.start_ns;
  nlohmann::json j;
  j["step"] = step;
  j["ms_into_step"] = ms(into);
  j["phase"] = phase_at(d, e.time_ns);
  j["op"] = e.op;
  j["layer"] = e.layer;
  j["module"] = e.module;
  j["category"] = std::string(category_name(e.category));
  j["allocated"] = e.allocated;
  j["reserved"] = e.reserved;
  j["reserved_unallocated"] = e.reserved - e.allocated;  // the cache's free blocks and rounding
  j["by_category"] = by_category(dev[i]);                // a failed request changed nothing: the state at the failure
  const CategoryBytes h = state_at(d.host_start, d.host, host, e.time_ns);
  int64_t host_total = 0;
  for (int64_t b : h) host_total += b;
  j["host_allocated"] = host_total;
  j["host_by_category"] = by_category(h);
  return j;
}

// Activations live at the peak event p, by the layer and module that saved them.
nlohmann::json activations_at(const ProfileData& d, const std::vector<CategoryBytes>& dev, int64_t p) {
  nlohmann::json act;
  if (p >= 0) {
    std::unordered_map<uintptr_t, BlockInfo> live;
    for (size_t i = 0; i <= size_t(p); ++i) {
      const MemEvent& e = d.device[i];
      if (e.failed()) continue;
      if (e.delta > 0)
        live[e.block] = {e.category, e.layer, e.module, e.delta};
      else
        live.erase(e.block);
    }
    std::map<int, int64_t> layer;
    std::map<std::pair<std::string, int>, int64_t> module;
    int64_t total = 0;
    for (const auto& [block, b] : live) {
      if (b.category != MemoryCategory::activation) continue;
      layer[b.layer] += b.bytes;
      module[{b.module, b.layer}] += b.bytes;
      total += b.bytes;
    }
    act["total"] = dev[size_t(p)][size_t(MemoryCategory::activation)];
    act["unattributed"] = dev[size_t(p)][size_t(MemoryCategory::activation)] - total;  // saved before the window
    act["by_layer"] = nlohmann::json::array();
    for (const auto& [l, bytes] : layer) act["by_layer"].push_back({{"layer", l}, {"bytes", bytes}});
    std::vector<std::pair<int64_t, std::pair<std::string, int>>> mods;
    for (const auto& [key, bytes] : module) mods.push_back({bytes, key});
    std::stable_sort(mods.begin(), mods.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    act["by_module"] = nlohmann::json::array();
    for (const auto& [bytes, key] : mods)
      act["by_module"].push_back({{"module", key.first}, {"layer", key.second}, {"bytes", bytes}});
  }
  return act;
}

// The saved-tensor table, by layer, policy and op.
nlohmann::json saved_tensor_table(const ProfileData& d) {
  nlohmann::json saved;
  saved["step"] = d.saved_tensors_step;
  saved["count"] = d.saved_tensors.size();
  int64_t kept_act = 0, kept_logits = 0;
  std::map<int, std::map<std::string, int64_t>> per_layer;
  std::map<std::string, int64_t> per_policy;
  for (const autograd::SavedTensorRecord& r : d.saved_tensors) {
    if (r.policy == "kept" && r.category == "activation") kept_act += r.bytes;
    if (r.policy == "kept" && r.category == "logits") kept_logits += r.bytes;
    const std::string key = r.category == "logits" ? r.policy + " (logits)" : r.policy;
    per_layer[r.layer][key] += r.bytes;
    per_policy[key] += r.bytes;
  }
  std::map<std::string, std::pair<int64_t, int64_t>> by_op;  // op -> kept bytes, tensors
  for (const autograd::SavedTensorRecord& r : d.saved_tensors)
    if (r.policy == "kept") {
      auto& v = by_op[r.op.empty() ? std::string("(no op)") : r.op];
      v.first += r.bytes;
      ++v.second;
    }
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> ops_sorted(by_op.begin(), by_op.end());
  std::stable_sort(ops_sorted.begin(), ops_sorted.end(),
                   [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  saved["kept_by_op"] = nlohmann::json::array();
  for (const auto& [op, v] : ops_sorted)
    saved["kept_by_op"].push_back({{"op", op}, {"bytes", v.first}, {"tensors", v.second}});
  saved["kept_activation_bytes"] = kept_act;
  saved["kept_logits_bytes"] = kept_logits;
  saved["by_policy"] = per_policy;
  saved["by_layer"] = nlohmann::json::array();
  for (const auto& [l, by] : per_layer) {
    nlohmann::json row = {{"layer", l}};
    for (const auto& [policy, bytes] : by) row[policy] = bytes;
    saved["by_layer"].push_back(row);
  }
  return saved;
}

// Self time per op on the compute lane, recompute replays and compute waits, into s.
void op_times(const ProfileData& d, nlohmann::json& s) {
  // Time: self time per op on the compute lane (nested ranges subtract from their parent).
  std::vector<const RangeRecord*> lane;
  for (const RangeRecord& r : d.ranges)
    if (r.thread == 0 && r.kind != kPhase) lane.push_back(&r);
  std::sort(lane.begin(), lane.end(), [](const RangeRecord* a, const RangeRecord* b) {
    return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
  });
  struct OpTime {
    std::string kind;
    int64_t calls = 0, self = 0, total = 0;
  };
  std::map<std::string, OpTime> ops;
  std::vector<std::pair<const RangeRecord*, int64_t>> stack;  // range, its self time so far
  auto close = [&](const RangeRecord* r, int64_t self) {
    OpTime& o = ops[r->name];
    o.kind = r->kind;
    ++o.calls;
    o.self += self;
    o.total += r->end_ns - r->start_ns;
  };
  int64_t recompute_ns = 0, recompute_n = 0, wait_ns = 0, comm_ns = 0;
  for (const RangeRecord* r : lane) {
    while (!stack.empty() && stack.back().first->end_ns <= r->start_ns) {
      close(stack.back().first, stack.back().second);
      stack.pop_back();
    }
    const int64_t dur = r->end_ns - r->start_ns;
    if (!stack.empty()) stack.back().second -= dur;
    stack.push_back({r, dur});
    if (is_recompute(r->name)) recompute_ns += dur, ++recompute_n;
    if (r->kind == kWait) wait_ns += dur;
    if (r->kind == kComm) comm_ns += dur;
  }
  for (; !stack.empty(); stack.pop_back()) close(stack.back().first, stack.back().second);
  std::vector<std::pair<std::string, OpTime>> sorted(ops.begin(), ops.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second.self > b.second.self; });
  s["ops"] = nlohmann::json::array();
  for (const auto& [name, o] : sorted)
    s["ops"].push_back(
        {{"name", name}, {"kind", o.kind}, {"calls", o.calls}, {"self_ms", ms(o.self)}, {"total_ms", ms(o.total)}});
  s["recompute"] = {{"ranges", recompute_n}, {"ms", ms(recompute_ns)}};
  s["compute_wait_ms"] = ms(wait_ns);
  s["compute_comm_ms"] = ms(comm_ns);  // blocking exchanges between ranks on the compute thread
}

// Side streams: busy time and how much of it compute hid.
nlohmann::json stream_overlap(const ProfileData& d) {
  const std::vector<Interval> busy = compute_busy(d);
  std::map<std::string, std::array<int64_t, 3>> streams;  // tasks, busy, overlapped
  for (const StreamTaskEvent& t : d.tasks) {
    auto& v = streams[t.stream];
    ++v[0];
    v[1] += t.end_ns - t.start_ns;
    v[2] += covered(busy, t.start_ns, t.end_ns);
  }
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, v] : streams)
    out.push_back({{"stream", name},
                   {"tasks", v[0]},
                   {"busy_ms", ms(v[1])},
                   {"overlap_ms", ms(v[2])},
                   {"overlap_fraction", v[1] > 0 ? double(v[2]) / double(v[1]) : 1.0}});
  return out;
}

}  // namespace

nlohmann::json summarize(const ProfileData& d) {
  nlohmann::json s;
  s["version"] = 1;
  s["info"] = d.info;
  s["stopped"] = d.stopped;
  s["duration_ms"] = ms(d.end_ns - d.start_ns);
  s["limit"] = d.device_limit;
  s["steps"] = step_table(d);

  const std::vector<CategoryBytes> dev = replay_states(d.device_start, d.device);
  const std::vector<CategoryBytes> host = replay_states(d.host_start, d.host);
  const int64_t p = peak_event(d);
  s["peak"] = p >= 0 ? memory_at(d, dev, host, size_t(p)) : nlohmann::json(nullptr);
  const int64_t f = failed_event(d);
  if (f >= 0) {
    nlohmann::json j = memory_at(d, dev, host, size_t(f));
    j["requested"] = d.device[size_t(f)].delta;
    s["out_of_memory"] = j;
  } else {
    s["out_of_memory"] = nullptr;
  }
  s["activations_at_peak"] = activations_at(d, dev, p);
  s["saved_tensors"] = saved_tensor_table(d);
  op_times(d, s);
  s["streams"] = stream_overlap(d);
  return s;
}

}  // namespace tidal::profile
