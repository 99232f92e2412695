#include "tidal/plan/kernel_records.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string_view>
#include <tuple>

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

std::vector<StepKernel> merge_identical(std::vector<StepKernel> kernels) {
  using Key = std::tuple<std::string_view, CostKind, DType, int64_t, int64_t, StepPhase, int, bool>;
  std::map<Key, size_t> at;
  std::vector<StepKernel> merged;
  for (StepKernel& k : kernels) {
    const Key key{k.cost.kernel, k.cost.kind, k.cost.dtype, k.cost.flops, k.cost.bytes, k.phase, k.layer, k.head};
    const auto [it, fresh] = at.emplace(key, merged.size());
    if (!fresh) {
      merged[it->second].count += k.count;
      continue;
    }
    StepKernel m;
    m.cost = k.cost;
    m.phase = k.phase;
    m.layer = k.layer;
    m.head = k.head;
    m.count = k.count;
    merged.push_back(m);
  }
  return merged;
}

std::vector<StepKernel> kept_for_timing(std::vector<StepKernel> kernels) {
  std::vector<StepKernel> body, head;
  for (StepKernel& k : kernels) (k.head ? head : body).push_back(std::move(k));
  std::vector<StepKernel> out = merge_identical(std::move(body));
  for (StepKernel& k : merge_identical(std::move(head))) out.push_back(std::move(k));
  return out;
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
    Raw r;
    r.kernel.cost = c;
    r.kernel.layer = ctx.layer;
    if (ctx.module != nullptr) r.kernel.module = ctx.module;
    if (ctx.op != nullptr) r.kernel.op = ctx.op;
    r.time_ns = now_ns();
    raw_.push_back(std::move(r));
  });
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
  TIDAL_ASSERT(active_, "KernelRecorder::finish called twice");
  set_cost_sink(nullptr);
  profile::stop_recording();
  active_ = false;
  std::vector<Span> phases, recompute, loss, collective, head;
  for (const profile::RangeEvent& r : profile::take_ranges()) {
    if (r.thread != 0) continue;
    const Span s{r.start_ns, r.end_ns, StepPhase::other};
    if (r.kind != nullptr && std::strcmp(r.kind, profile::kPhase) == 0) {
      if (named(r.name, {"forward"})) phases.push_back({s.start, s.end, StepPhase::forward});
      if (named(r.name, {"backward"})) phases.push_back({s.start, s.end, StepPhase::backward});
      if (named(r.name, {"optimizer"})) phases.push_back({s.start, s.end, StepPhase::optimizer});
    } else if (named(r.name, {dist::kReductionRange})) {
      collective.push_back(s);
    } else if (named(r.name, {"checkpoint_replay", "recompute_output"})) {
      recompute.push_back(s);
    } else if (named(r.name, {"cross_entropy", "chunked_lm_loss", "CrossEntropyBackward", "ChunkedLmLossBackward"})) {
      loss.push_back(s);
    }
    if (r.kind != nullptr && std::strcmp(r.kind, profile::kPhase) != 0 &&
        named(r.name, {"lm_head", "loss", kLmHeadBackward, "cross_entropy", "chunked_lm_loss", "CrossEntropyBackward",
                       "ChunkedLmLossBackward"}))
      head.push_back(s);
  }
  profile::take_stream_tasks();
  std::sort(phases.begin(), phases.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  recompute = merged(std::move(recompute));
  loss = merged(std::move(loss));
  collective = merged(std::move(collective));
  head = merged(std::move(head));
  std::vector<StepKernel> out;
  out.reserve(raw_.size());
  for (Raw& r : raw_) {
    if (holding(collective, r.time_ns)) {
      r.kernel.phase = StepPhase::collective;
    } else if (holding(recompute, r.time_ns)) {
      r.kernel.phase = StepPhase::recompute;
    } else if (holding(loss, r.time_ns)) {
      r.kernel.phase = StepPhase::loss;
    } else if (const Span* p = holding(phases, r.time_ns)) {
      r.kernel.phase = p->phase;
    }
    r.kernel.head = holding(head, r.time_ns) != nullptr;
    out.push_back(std::move(r.kernel));
  }
  raw_.clear();
  return out;
}

}  // namespace tidal::plan
