#include "tidal/memory/savings.h"

#include <algorithm>

#include "tidal/base/error.h"

namespace tidal::memory {

int64_t chunked_loss_logits_bytes(int64_t batch, int64_t seq, int64_t vocab, int64_t chunk, int64_t element_size) {
  const int64_t n = batch * seq;
  return (chunk > 0 ? std::min(chunk, n) : n) * vocab * element_size;
}

LossHeadMemory loss_head_memory(int64_t batch, int64_t seq, int64_t hidden, int64_t vocab, int64_t chunk, DType dtype) {
  const int64_t n = batch * seq, c = hidden, v = vocab;
  const int64_t p = dtype_size(dtype), acc = dtype == DType::f64 ? 8 : 4;  // the model's, the loss's
  LossHeadMemory m;
  if (chunk <= 0) {
    // Forward keeps the head input, the logits, the log-sum-exp and a contiguous copy of the targets.
    // Backward: the logits' gradient joins them; then the input and weight gradients join it.
    m.logits = chunked_loss_logits_bytes(batch, seq, vocab, 0, p);
    m.saved = p * n * c + acc * n + 8 * n;
    m.peak = std::max(p * n * c + 2 * p * n * v + (acc + 8) * n, 2 * p * n * c + p * n * v + p * v * c);
  } else {
    // Forward holds the input (and its and the weight's f32 copies when the model is not in the
    // loss's dtype), both f32 gradients, one chunk of logits, the row losses and the targets' copy;
    // it keeps the two gradients in the model's dtype. Backward allocates nothing.
    m.logits = chunked_loss_logits_bytes(batch, seq, vocab, chunk, acc);
    const int64_t copies = p == acc ? 0 : acc * (n * c + v * c);
    m.saved = p * n * c + p * v * c;
    m.peak = p * n * c + copies + acc * (n * c + v * c) + m.logits + (acc + 8) * n;
  }
  return m;
}

int64_t chunked_loss_savings(int64_t batch, int64_t seq, int64_t hidden, int64_t vocab, int64_t chunk, DType dtype) {
  return loss_head_memory(batch, seq, hidden, vocab, 0, dtype).peak -
         loss_head_memory(batch, seq, hidden, vocab, chunk, dtype).peak;
}

// ---- Swap optimizer

namespace {

constexpr int64_t kCutElements = 64;  // window cuts inside a parameter fall on multiples of this
constexpr int64_t kAlign = 64;        // bytes: each state piece starts 64-byte aligned in a window buffer

int64_t state_itemsize(DType d) { return d == DType::f64 ? 8 : 4; }
int64_t state_count(DType d) { return d == DType::bf16 ? 3 : 2; }
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Positions in the flattened element sequence of all parameters where a window may end: every
// parameter boundary, and every multiple of kCutElements inside a parameter.
class Cuts {
 public:
  explicit Cuts(const std::vector<SwapParam>& p) : params_(p) {
    int64_t pos = 0, bytes = 0;
    start_.reserve(p.size() + 1);
    bytes_.reserve(p.size() + 1);
    for (const SwapParam& x : p) {
      start_.push_back(pos);
      bytes_.push_back(bytes);
      pos += x.numel;
      bytes += x.numel * swap_state_bytes_per_element(x.dtype);
    }
    start_.push_back(pos);
    bytes_.push_back(bytes);
  }
  int64_t total() const { return start_.back(); }
  // The parameter holding element x (skips empty parameters).
  size_t holding(int64_t x) const {
    return size_t(std::upper_bound(start_.begin(), start_.end(), x) - start_.begin()) - 1;
  }
  // Smallest allowed position > x (x < total).
  int64_t next(int64_t x) const {
    const size_t p = holding(x);
    const int64_t s = start_[p], e = start_[p + 1];
    return std::min(s + ((x - s) / kCutElements + 1) * kCutElements, e);
  }
  // Largest allowed position < x (x > 0).
  int64_t prev(int64_t x) const {
    const size_t p = holding(x - 1);
    const int64_t s = start_[p];
    return s + (x - 1 - s) / kCutElements * kCutElements;
  }
  // The allowed position nearest to `bytes` of state from the start (rounding inside a parameter).
  int64_t at_bytes(int64_t bytes) const {
    // The first parameter whose state ends past `bytes` (empty ones end where they start).
    const size_t p = size_t(std::upper_bound(bytes_.begin() + 1, bytes_.end(), bytes) - bytes_.begin()) - 1;
    if (p >= params_.size()) return total();
    const int64_t per = swap_state_bytes_per_element(params_[p].dtype);
    const int64_t elems = (bytes - bytes_[p]) / per;
    const int64_t off = std::min((elems + kCutElements / 2) / kCutElements * kCutElements, params_[p].numel);
    return start_[p] + off;
  }
  int64_t start(size_t p) const { return start_[p]; }

 private:
  std::vector<int64_t> start_;
  std::vector<int64_t> bytes_;            // state bytes before each parameter, then the total
  const std::vector<SwapParam>& params_;  // outlives the Cuts (one call of swap_windows)
};

}  // namespace

int64_t swap_state_bytes_per_element(DType param_dtype) {
  return state_count(param_dtype) * state_itemsize(param_dtype);
}

namespace {

// plan_swap_windows; with `pieces` false only each window's device bytes (what the planner asks for
// every candidate, over tens of thousands of expert parameters).
std::vector<SwapWindow> swap_windows(const std::vector<SwapParam>& params, int64_t K, bool pieces) {
  int64_t nonempty = 0, total_bytes = 0;
  for (const SwapParam& p : params) {
    TIDAL_CHECK(p.numel >= 0, "[swap_optimizer] a parameter with ", p.numel, " elements");
    nonempty += p.numel > 0;
    total_bytes += p.numel * swap_state_bytes_per_element(p.dtype);
  }
  TIDAL_CHECK(K >= 1 && K <= nonempty, "[swap_optimizer] ", K, " windows over ", nonempty,
              " parameters: the number of windows must be between 1 and the number of parameters");
  const Cuts cuts(params);
  // K - 1 cuts, strictly increasing allowed positions in (0, total). Cut w lies between the w-th
  // allowed position from the start and the (K - w)-th from the end, so the rest always fit.
  std::vector<int64_t> lo(size_t(K), 0), hi(size_t(K), cuts.total());
  for (int64_t w = 1; w < K; ++w) lo[size_t(w)] = cuts.next(lo[size_t(w - 1)]);
  for (int64_t w = K - 1; w >= 1; --w) hi[size_t(w)] = cuts.prev(w + 1 < K ? hi[size_t(w + 1)] : cuts.total());
  std::vector<int64_t> cut(size_t(K + 1), 0);
  cut[size_t(K)] = cuts.total();
  for (int64_t w = 1; w < K; ++w) {
    // Balanced by bytes: the w-th K-quantile of the state.
    const int64_t ideal = cuts.at_bytes(total_bytes * w / K);
    int64_t c = std::clamp(ideal, lo[size_t(w)], hi[size_t(w)]);
    if (w > 1) c = std::max(c, cuts.next(cut[size_t(w - 1)]));
    cut[size_t(w)] = c;
  }
  std::vector<SwapWindow> windows(static_cast<size_t>(K));
  for (int64_t w = 0; w < K; ++w) {
    SwapWindow& win = windows[size_t(w)];
    const int64_t b = cut[size_t(w)], e = cut[size_t(w + 1)];
    TIDAL_ASSERT(b < e, "swap window ", w, " is empty: [", b, ", ", e, ")");
    // Parameters before the one holding b end at or before b; those from e on start at or after e.
    for (size_t p = cuts.holding(b); p < params.size() && cuts.start(p) < e; ++p) {
      const int64_t ps = cuts.start(p), pe = ps + params[p].numel;
      const int64_t lo_e = std::max(b, ps), hi_e = std::min(e, pe);
      if (lo_e >= hi_e) continue;
      if (pieces) win.pieces.push_back({p, lo_e - ps, hi_e - ps});
      const int64_t n = hi_e - lo_e, item = state_itemsize(params[p].dtype);
      win.device_bytes += state_count(params[p].dtype) * round_up(n * item, kAlign);
    }
  }
  return windows;
}

}  // namespace

std::vector<SwapWindow> plan_swap_windows(const std::vector<SwapParam>& params, int64_t K) {
  return swap_windows(params, K, true);
}

int64_t swap_optimizer_device_bytes(const std::vector<SwapParam>& params, int64_t K) {
  int64_t largest = 0;
  for (const SwapWindow& w : swap_windows(params, K, false)) largest = std::max(largest, w.device_bytes);
  return (K == 1 ? 1 : 2) * largest;
}

int64_t swap_optimizer_device_bytes(int64_t state_bytes, int64_t K) {
  TIDAL_CHECK(K >= 1, "[swap_optimizer] the number of windows must be >= 1, got ", K);
  return K == 1 ? state_bytes : 2 * ((state_bytes + K - 1) / K);
}

}  // namespace tidal::memory
