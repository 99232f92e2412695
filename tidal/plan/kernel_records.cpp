#include "tidal/plan/kernel_records.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>

#include "tidal/base/clock.h"
#include "tidal/base/error.h"
#include "tidal/dist/collectives.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/matmul.h"
#include "tidal/range_recorder.h"

namespace tidal::plan {
namespace {

struct Span {
  int64_t start = 0, end = 0;
  StepPhase phase = StepPhase::other;
};

bool named(const char* name, std::initializer_list<const char*> names) {
  if (name == nullptr) return false;
  for (const char* n : names)
    if (std::strcmp(name, n) == 0) return true;
  return false;
}

// Sorted by start; overlapping spans merged (membership is all that is asked of them).
std::vector<Span> merged(std::vector<Span> s) {
  std::sort(s.begin(), s.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  std::vector<Span> out;
  for (const Span& x : s) {
    if (!out.empty() && x.start <= out.back().end) {
      out.back().end = std::max(out.back().end, x.end);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

// The span of sorted, disjoint `spans` that holds time t, or nullptr. A kernel runs inside the ranges
// that enclose it, and a range's ends are read from the same clock before and after, so
// start <= t <= end.
const Span* holding(const std::vector<Span>& spans, int64_t t) {
  auto it = std::upper_bound(spans.begin(), spans.end(), t, [](int64_t v, const Span& s) { return v < s.start; });
  if (it == spans.begin()) return nullptr;
  --it;
  return t <= it->end ? &*it : nullptr;
}

}  // namespace

const char* step_phase_name(StepPhase p) {
  switch (p) {
    case StepPhase::forward: return "forward";
    case StepPhase::backward: return "backward";
    case StepPhase::recompute: return "recompute";
    case StepPhase::loss: return "loss";
    case StepPhase::optimizer: return "optimizer";
    case StepPhase::collective: return "collective";
    case StepPhase::other: return "other";
  }
  return "?";
}

// merge_identical's records, one added at a time (names dropped).
class Merger {
 public:
  void add(const KernelCost& cost, StepPhase phase, int layer, bool head, int64_t count) {
    const Key key{name_id(cost.kernel), cost.kind, cost.dtype, cost.flops, cost.bytes, phase, layer, head};
    const auto [it, fresh] = at_.emplace(key, merged_.size());
    if (!fresh) {
      merged_[it->second].count += count;
      return;
    }
    StepKernel m;
    m.cost = cost;
    m.phase = phase;
    m.layer = layer;
    m.head = head;
    m.count = count;
    merged_.push_back(m);
  }
  std::vector<StepKernel> take() { return std::move(merged_); }

 private:
  // A kernel's name by content (the same name may sit at two addresses, one per translation unit), looked up by
  // its address once: a step's million records compare numbers, not strings.
  int name_id(const char* name) {
    const auto [it, fresh] = by_address_.emplace(name, 0);
    if (fresh) it->second = by_content_.emplace(std::string_view(name), int(by_content_.size())).first->second;
    return it->second;
  }
  using Key = std::tuple<int, CostKind, DType, int64_t, int64_t, StepPhase, int, bool>;
  std::map<Key, size_t> at_;
  std::unordered_map<const char*, int> by_address_;
  std::unordered_map<std::string_view, int> by_content_;
  std::vector<StepKernel> merged_;
};

// kept_for_timing's order: the head's records after the others'.
std::vector<StepKernel> body_then_head(Merger& body, Merger& head) {
  std::vector<StepKernel> out = body.take();
  for (StepKernel& k : head.take()) out.push_back(std::move(k));
  return out;
}

std::vector<StepKernel> merge_identical(std::vector<StepKernel> kernels) {
  Merger m;
  for (const StepKernel& k : kernels) m.add(k.cost, k.phase, k.layer, k.head, k.count);
  return m.take();
}

std::vector<StepKernel> kept_for_timing(std::vector<StepKernel> kernels) {
  Merger body, head;
  for (const StepKernel& k : kernels) (k.head ? head : body).add(k.cost, k.phase, k.layer, k.head, k.count);
  return body_then_head(body, head);
}

std::vector<StepKernel> with_head_of(const std::vector<StepKernel>& body, const std::vector<StepKernel>& head) {
  std::vector<StepKernel> out;
  for (const StepKernel& k : body)
    if (!k.head) out.push_back(k);
  for (const StepKernel& k : head)
    if (k.head) out.push_back(k);
  return out;
}

KernelRecorder::KernelRecorder() {
  TIDAL_ASSERT(!cost_sink_installed() && !profile::recording(),
               "a kernel recorder needs the cost sink and the range recorder to itself");
  set_cost_sink([this](const KernelCost& c) {
    const MemoryContext& ctx = memory_context();
    raw_.push_back({c, ctx.module, ctx.op, now_ns(), ctx.layer});
  });
  raw_.reserve(recorded_hint());
  profile::start_recording();
  active_ = true;
}

KernelRecorder::~KernelRecorder() {
  if (!active_) return;
  set_cost_sink(nullptr);
  profile::stop_recording();
  profile::take_ranges();
  profile::take_stream_tasks();
}

std::vector<StepKernel> KernelRecorder::finish() {
  std::vector<StepKernel> out;
  out.reserve(raw_.size());
  tag([&out](const Raw& r, StepPhase phase, bool head) {
    StepKernel k;
    k.cost = r.cost;
    k.phase = phase;
    k.layer = r.layer;
    if (r.module != nullptr) k.module = r.module;
    if (r.op != nullptr) k.op = r.op;
    k.head = head;
    out.push_back(std::move(k));
  });
  return out;
}

std::vector<StepKernel> KernelRecorder::finish_kept() {
  Merger body, head;
  tag([&](const Raw& r, StepPhase phase, bool in_head) {
    (in_head ? head : body).add(r.cost, phase, r.layer, in_head, 1);
  });
  return body_then_head(body, head);
}

size_t& KernelRecorder::recorded_hint() {
  static size_t hint = 0;  // the last recording's size: the next one's reserve (a dry run after another)
  return hint;
}

template <class F>
void KernelRecorder::tag(F&& each) {
  TIDAL_ASSERT(active_, "KernelRecorder::finish called twice");
  set_cost_sink(nullptr);
  profile::stop_recording();
  active_ = false;
  std::vector<Span> phases, recompute, loss, collective, head;
  for (const profile::RangeEvent& r : profile::take_ranges()) {
    if (r.thread != 0) continue;
    const Span s{r.start_ns, r.end_ns, StepPhase::other};
    const bool phase = r.kind != nullptr && std::strcmp(r.kind, profile::kPhase) == 0;
    const bool loss_op =
        !phase && named(r.name, {"cross_entropy", "chunked_lm_loss", "CrossEntropyBackward", "ChunkedLmLossBackward"});
    if (phase) {
      if (named(r.name, {"forward"})) phases.push_back({s.start, s.end, StepPhase::forward});
      if (named(r.name, {"backward"})) phases.push_back({s.start, s.end, StepPhase::backward});
      if (named(r.name, {"optimizer"})) phases.push_back({s.start, s.end, StepPhase::optimizer});
    } else if (named(r.name, {dist::kReductionRange})) {
      collective.push_back(s);
    } else if (named(r.name, {"checkpoint_replay", "recompute_output"})) {
      recompute.push_back(s);
    } else if (loss_op) {
      loss.push_back(s);
    }
    if (loss_op || (!phase && named(r.name, {"lm_head", "loss", kLmHeadBackward}))) head.push_back(s);
  }
  profile::take_stream_tasks();
  std::sort(phases.begin(), phases.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  recompute = merged(std::move(recompute));
  loss = merged(std::move(loss));
  collective = merged(std::move(collective));
  head = merged(std::move(head));
  for (const Raw& r : raw_) {
    StepPhase phase = StepPhase::other;
    if (holding(collective, r.time_ns)) {
      phase = StepPhase::collective;
    } else if (holding(recompute, r.time_ns)) {
      phase = StepPhase::recompute;
    } else if (holding(loss, r.time_ns)) {
      phase = StepPhase::loss;
    } else if (const Span* p = holding(phases, r.time_ns)) {
      phase = p->phase;
    }
    each(r, phase, holding(head, r.time_ns) != nullptr);
  }
  recorded_hint() = std::max(recorded_hint(), raw_.size());
  raw_ = {};
}

}  // namespace tidal::plan
