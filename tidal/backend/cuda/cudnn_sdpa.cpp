// cuDNN's fused attention: eligibility, plans (one per shape, layout and direction, kept for the
// process), execution (cudnn_sdpa.h; the graphs are cudnn_sdpa_graph.cpp's).
#include "tidal/backend/cuda/cudnn_sdpa.h"

#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "tidal/backend/cuda/cudnn_sdpa_graph.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/memory_scope.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

using cudnn::Desc;
using cudnn::Dims;

constexpr int64_t kMaxHeadDim = 128;

int64_t round64(int64_t n) { return (n + 63) / 64 * 64; }

// The backward's planned workspace past its row sums, in bytes (sdpa_backward_workspace), as cuDNN 9.19's
// deterministic engines asked for it on an H200 (B, Hq, Hkv, T, S, D from (2, 4, 4, 32, 32, 16) to
// (1, 16, 8, 4096, 4096, 128), the second engine offered, to the byte): dP, B * Hq * T * S bf16 with T
// and S rounded up to 64-row tiles; under grouped-query attention (Hq != Hkv) an f32 (B, Hq, S, D)
// buffer, the key/value gradients per query head before their groups are summed; and 128 bytes, of
// which this plans 256.
constexpr int64_t kSdpaBackwardSlack = 64;  // f32 elements
int64_t sdpa_dp_elements(int64_t b, int64_t hq, int64_t hk, int64_t t, int64_t s, int64_t d) {
  return round64(b * hq * round64(t) * round64(s) / 2) + (hq != hk ? b * hq * s * d : 0) + kSdpaBackwardSlack;
}
int64_t planned_dp_bytes(const cudnn::SdpaShape& s) { return 4 * sdpa_dp_elements(s.b, s.hq, s.hk, s.t, s.s, s.d); }

Dims strides_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)}; }

// Why cuDNN cannot read or write `t` in place, or "".
std::string layout_refusal(const char* name, const Tensor& t) {
  if (t.stride(3) != 1 && t.size(3) > 1) return detail::str_cat(name, "'s head dim is not contiguous");
  for (int i = 0; i < 3; ++i)
    if (t.stride(i) % 8 != 0 && t.size(i) > 1) return detail::str_cat(name, "'s strides are not multiples of 8");
  // A meta tensor (a dry run planning for cuda) by its offset: tidal's allocators align every block.
  const uintptr_t at = t.is_meta() ? uintptr_t(t.offset() * t.itemsize()) : reinterpret_cast<uintptr_t>(t.raw_data());
  if (at % 16 != 0) return detail::str_cat(name, " is not 16-byte aligned");
  return "";
}

struct Plan {
  cudnn::Graph graph;
  Desc op_graph, plan;
  int64_t workspace = 0;  // bytes
  std::string failure;    // why there is no plan ("" when there is)
};

struct State {
  std::mutex mutex;
  std::map<int, cudnnHandle_t> handles;  // never destroyed: kept for the process
  std::map<std::pair<int, std::vector<int64_t>>, std::unique_ptr<Plan>> plans;
  std::string last_path = "none yet";
};
State& state() {
  static State* s = new State;  // outlives every static destructor that might still attend
  return *s;
}

cudnnHandle_t handle_for(State& st, int device) {
  auto it = st.handles.find(device);
  if (it != st.handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  TIDAL_CUDNN_CHECK(cudnnCreate(&h));
  st.handles.emplace(device, h);
  return h;
}

// Whether the engine of `config` is free of cuDNN's nondeterministic note.
bool deterministic(const Desc& config) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw) !=
      CUDNN_STATUS_SUCCESS)
    return false;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes) != CUDNN_STATUS_SUCCESS)
    return false;
  for (int64_t i = 0; i < n; ++i)
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return false;
  return true;
}

// The first deterministic engine cuDNN's heuristic offers that finalizes into a plan with a workspace
// of at most `budget` bytes, the workspace tidal plans for (flash_*_workspace: what dry runs count);
// when none fits, the first that finalizes (its workspace then a temporary of its own, said once).
void build(Plan& p, cudnnHandle_t handle, int64_t budget, const char* what) {
  p.op_graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  p.op_graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "the graph's handle");
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const Desc& d : p.graph.ops()) ops.push_back(d.get());
  p.op_graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops.size()), ops.data(),
                 "the graph's operations");
  p.op_graph.finalize("the attention's operation graph");
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, p.op_graph, "the heuristic's graph");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "the heuristic's mode");
  heur.finalize("the engine heuristic");
  int64_t count = 0;
  TIDAL_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                             0, &count, nullptr));
  std::vector<Desc> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) raw.push_back(configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
  int64_t got = 0;
  if (count > 0)
    TIDAL_CUDNN_CHECK(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                               count, &got, raw.data()));
  int skipped = 0;
  std::string last = "no engine offered";
  std::vector<int64_t> sizes;  // the workspaces of the plans that did not fit
  Desc first;                  // the first plan that finalized, and its workspace
  int64_t first_workspace = 0;
  for (int64_t i = 0; i < got; ++i) {
    if (!deterministic(configs[size_t(i)])) {
      ++skipped;
      continue;
    }
    Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "the plan's handle");
    plan.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[size_t(i)], "the plan's engine");
    const cudnnStatus_t s = cudnnBackendFinalize(plan.get());
    if (s != CUDNN_STATUS_SUCCESS) {
      last = cudnn::status_message(s, "cudnnBackendFinalize(execution plan)");
      continue;
    }
    int64_t n = 0, workspace = 0;
    TIDAL_CUDNN_CHECK(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                               1, &n, &workspace));
    if (workspace <= budget) {
      p.workspace = workspace;
      p.plan = std::move(plan);
      return;
    }
    sizes.push_back(workspace);
    if (!first.get()) {
      first = std::move(plan);
      first_workspace = workspace;
    }
  }
  if (first.get()) {
    std::string all;
    for (int64_t b : sizes) all += detail::str_cat(all.empty() ? "" : ", ", b);
    std::fprintf(stderr,
                 "[cuda] no deterministic cuDNN attention %s engine fits the planned workspace of %lld B (theirs: %s "
                 "B): the first runs with its own temporary, which dry runs do not count\n",
                 what, (long long)budget, all.c_str());
    p.workspace = first_workspace;
    p.plan = std::move(first);
    return;
  }
  p.failure = detail::str_cat(got, " engine configs offered, ", skipped, " nondeterministic; last: ", last);
}

// The cached plan for this shape (built on first use); nullptr when cuDNN has none, said once.
Plan* plan_for(State& st, int device, const cudnn::SdpaShape& s, bool backward) {
  auto key = std::make_pair(device, s.key(backward));
  auto it = st.plans.find(key);
  if (it == st.plans.end()) {
    auto p = std::make_unique<Plan>();
    try {
      p->graph = backward ? cudnn::sdpa_backward_graph(s) : cudnn::sdpa_forward_graph(s);
      build(*p, handle_for(st, device), backward ? planned_dp_bytes(s) : 0, backward ? "backward" : "forward");
    } catch (const std::exception& e) {
      p->failure = e.what();
    }
    if (!p->failure.empty())
      std::fprintf(stderr,
                   "[cuda] cuDNN has no fused attention %s for B=%lld Hq=%lld Hkv=%lld T=%lld D=%lld%s: %s; the eager "
                   "attention runs instead\n",
                   backward ? "backward" : "forward", (long long)s.b, (long long)s.hq, (long long)s.hk, (long long)s.t,
                   (long long)s.d, s.causal ? " causal" : "", p->failure.c_str());
    it = st.plans.emplace(std::move(key), std::move(p)).first;
  }
  return it->second->failure.empty() ? it->second.get() : nullptr;
}

cudnn::SdpaShape shape_of(const FlashArgs& cfg, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o) {
  cudnn::SdpaShape s;
  s.b = q.size(0);
  s.hq = q.size(1);
  s.hk = k.size(1);
  s.t = q.size(2);
  s.s = k.size(2);
  s.d = q.size(3);
  s.causal = cfg.causal;
  s.q = strides_of(q);
  s.k = strides_of(k);
  s.v = strides_of(v);
  s.o = strides_of(o);
  return s;
}

// Bind the plan's tensors and run it on `stream`.
void execute(State& st, int device, cudaStream_t stream, const Plan& p, const std::vector<int64_t>& uids,
             const std::vector<void*>& ptrs, void* workspace) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data(), "the ids");
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data(),
           "the pointers");
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace, "the workspace");
  pack.finalize("the attention's variant pack");
  const cudnnHandle_t h = handle_for(st, device);
  TIDAL_CUDNN_CHECK(cudnnSetStream(h, stream));
  TIDAL_CUDNN_CHECK(cudnnBackendExecute(h, p.plan.get(), pack.get()));
}

// `bytes` of the workspace from `at` on, or a temporary when it is short.
struct Scratch {
  Tensor extra;
  void* p = nullptr;
  Scratch(const Tensor& workspace, int64_t at, int64_t bytes, Device device) {
    if (bytes == 0) return;
    if (workspace.defined() && workspace.nbytes() - at >= bytes) {
      p = static_cast<char*>(workspace.raw_data()) + at;
      return;
    }
    MemoryScope scope(MemoryCategory::temporary);
    extra = empty({(bytes + 3) / 4}, DType::f32, device);
    p = extra.raw_data();
  }
};

// The by-value scalars a graph binds: the scale, the mask's -inf where there is a mask, 1 for the backward.
struct Scalars {
  float scale, neg_inf = -std::numeric_limits<float>::infinity(), one = 1.0f;
  void bind(bool causal, bool backward, std::vector<int64_t>& uids, std::vector<void*>& ptrs) {
    uids.push_back(cudnn::kSdpaScale);
    ptrs.push_back(&scale);
    if (causal) {
      uids.push_back(cudnn::kSdpaNegInf);
      ptrs.push_back(&neg_inf);
    }
    if (backward) {
      uids.push_back(cudnn::kSdpaOne);
      ptrs.push_back(&one);
    }
  }
};

}  // namespace

std::string sdpa_refusal(const FlashArgs& cfg, const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.dtype() != DType::bf16) return detail::str_cat("cuDNN's fused attention is bf16 only, got ", q.dtype());
  if (cfg.dropout_p != 0) return "attention dropout draws tidal's Philox mask (the eager path)";
  const int64_t d = q.size(3);
  if (v.size(3) != d) return "q and v head dims differ";
  if (d % 8 != 0 || d < 8 || d > kMaxHeadDim) return detail::str_cat("head dim ", d, " (needs a multiple of 8 to 128)");
  if (q.size(0) == 0 || q.size(1) == 0 || q.size(2) == 0 || k.size(2) == 0) return "empty attention";
  if (k.size(1) == 0 || q.size(1) % k.size(1) != 0) return "query heads not a multiple of key heads";
  if (cfg.causal && q.size(2) != k.size(2)) return "causal attention with T != S (a KV cache or a context block)";
  // A window as long as the keys is plain causal attention, which the graph computes.
  if (cfg.causal && cfg.window > 0 && cfg.window < k.size(2))
    return detail::str_cat("a sliding window of ", cfg.window,
                           " keys (not in the cuDNN graph: the eager path masks it)");
  if (cfg.documents.any()) return "packed documents (--reset-attention-mask)";
  // DeepSeek-V4's attention (attention_with_lse): not in the graph, the eager path's row kernels take both.
  if (cfg.key_rate > 0) return detail::str_cat("compressed keys (key_rate ", cfg.key_rate, ")");
  if (cfg.lse_grad != nullptr) return "a differentiated log-sum-exp (the backward's delta takes its gradient)";
  if (cfg.causal && cfg.diagonal != 0) return "a shifted diagonal (a context-parallel block under a sliding window)";
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"k", &k}, {"v", &v}}) {
    std::string why = layout_refusal(name, *t);
    if (!why.empty()) return why;
  }
  return "";
}

int64_t sdpa_backward_workspace(const Tensor& q, const Tensor& k) {
  const int64_t b = q.size(0), hq = q.size(1), t = q.size(2), s = k.size(2);
  return round64(b * hq * t) + sdpa_dp_elements(b, hq, k.size(1), t, s, q.size(3));
}

bool sdpa_forward(cudaStream_t stream, const FlashArgs& cfg, const Tensor& out, const Tensor& lse, const Tensor& q,
                  const Tensor& k, const Tensor& v, const Tensor& workspace) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  std::string why = layout_refusal("out", out);
  const int device = q.device().index;
  Plan* p = why.empty() ? plan_for(st, device, shape_of(cfg, q, k, v, out), false) : nullptr;
  if (p == nullptr) {
    st.last_path = why.empty() ? "no cuDNN plan" : why;
    return false;
  }
  Tensor stats = lse;
  if (!stats.defined()) {
    MemoryScope scope(MemoryCategory::temporary);
    stats = empty({q.size(0), q.size(1), q.size(2)}, DType::f32, q.device());
  }
  const Scratch ws(workspace, 0, p->workspace, q.device());
  std::vector<int64_t> uids = {cudnn::kSdpaQ, cudnn::kSdpaK, cudnn::kSdpaV, cudnn::kSdpaO, cudnn::kSdpaStats};
  std::vector<void*> ptrs = {device_data(q), device_data(k), device_data(v), device_data(out), device_data(stats)};
  Scalars scalars{float(cfg.scale)};
  scalars.bind(cfg.causal, false, uids, ptrs);
  execute(st, device, stream, *p, uids, ptrs, ws.p);
  st.last_path = "cudnn";
  return true;
}

bool sdpa_backward(cudaStream_t stream, const FlashArgs& cfg, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                   const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, const Tensor& workspace) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  // Undefined gradients into temporaries (the fused kernel writes all three).
  MemoryScope scope(MemoryCategory::temporary);
  const Tensor gq = dq.defined() ? dq : empty(q.shape(), q.dtype(), q.device());
  const Tensor gk = dk.defined() ? dk : empty(k.shape(), k.dtype(), k.device());
  const Tensor gv = dv.defined() ? dv : empty(v.shape(), v.dtype(), v.device());
  std::string why;
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor*>{"out", &out}, {"dout", &dout}, {"dq", &gq}, {"dk", &gk}, {"dv", &gv}})
    if (why.empty()) why = layout_refusal(name, *t);
  if (why.empty() && (!lse.defined() || !lse.is_contiguous() || lse.dtype() != DType::f32))
    why = "no f32 contiguous log-sum-exp";
  cudnn::SdpaShape s = shape_of(cfg, q, k, v, out);
  s.dout = strides_of(dout);
  s.dq = strides_of(gq);
  s.dk = strides_of(gk);
  s.dv = strides_of(gv);
  const int device = q.device().index;
  Plan* p = why.empty() ? plan_for(st, device, s, true) : nullptr;
  if (p == nullptr) {
    st.last_path = why.empty() ? "no cuDNN plan" : why;
    return false;
  }
  const int64_t sum_bytes = round64(s.b * s.hq * s.t) * 4;  // rowsum(dO * O) first, then the plan's
  const Scratch sums(workspace, 0, sum_bytes, q.device());
  const Scratch ws(sums.extra.defined() ? Tensor() : workspace, sum_bytes, p->workspace, q.device());
  std::vector<int64_t> uids = {cudnn::kSdpaQ,    cudnn::kSdpaK,         cudnn::kSdpaV,  cudnn::kSdpaO,
                               cudnn::kSdpaDout, cudnn::kSdpaStats,     cudnn::kSdpaDq, cudnn::kSdpaDk,
                               cudnn::kSdpaDv,   cudnn::kSdpaSoftmaxSum};
  std::vector<void*> ptrs = {device_data(q),   device_data(k),  device_data(v),  device_data(out), device_data(dout),
                             device_data(lse), device_data(gq), device_data(gk), device_data(gv),  sums.p};
  Scalars scalars{float(cfg.scale)};
  scalars.bind(cfg.causal, true, uids, ptrs);
  execute(st, device, stream, *p, uids, ptrs, ws.p);
  st.last_path = "cudnn";
  return true;
}

std::string sdpa_last_path() {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mutex);
  return st.last_path;
}

}  // namespace tidal::cuda
