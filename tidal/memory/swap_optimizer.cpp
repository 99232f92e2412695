// Note [Swap pipeline]
// Two device buffers, each the size of the largest window (plan_swap_windows). Window w lives in
// buffer w % 2. On the h2d stream: copy in windows 0 and 1, then window w + 2 as soon as the d2h
// stream has copied window w out of its buffer (a stream-side wait, the host never blocks on it).
// On the compute stream: for each w, wait for its copy-in, run AdamW's kernel on its pieces, then
// queue its copy-out on the d2h stream. So while window w is updated, w - 1 goes out of the other
// buffer and w + 1 comes into it behind it: copies in both directions overlap the update.
//   device optimizer_state = 2 x the largest window (1 x for K = 1) — exactly, no more: the buffers
//   are allocated at the start of the step and released once the last copy-out completed, so
//   between steps the blocks are cached by the allocator and the forward pass can reuse them.
// A third buffer would let w + 1 come in while w - 1 goes out (3/K, more overlap on a device with
// one copy engine per direction); on the CPU backend both copies share the memory bus anyway.
// The pieces of a window are element ranges cut at multiples of 64 elements, each state piece
// 64-byte aligned in the buffer, so the kernel sees the same alignment as for a whole parameter.
#include "tidal/memory/swap_optimizer.h"

#include <nlohmann/json.hpp>

#include "tidal/autograd/grad_mode.h"
#include "tidal/base/clock.h"
#include "tidal/memory_scope.h"

namespace tidal::memory {
namespace {

constexpr int64_t kAlign = 64;
int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
double ms_since(int64_t t0) { return double(now_ns() - t0) / 1e6; }

std::vector<SwapParam> swap_params(const optim::NamedParameters& params) {
  std::vector<SwapParam> v;
  for (const auto& [name, p] : params) v.push_back({p.defined() ? p.numel() : 0, p.defined() ? p.dtype() : DType::f32});
  return v;
}

struct Copy {
  void* dst;
  const void* src;
  size_t bytes;
};

// Waits for a stream's queued work when the step leaves early (an error): the copies still read and
// write the buffers this step owns.
struct Drain {
  Stream& a;
  Stream& b;
  ~Drain() {
    for (Stream* s : {&a, &b}) try {
        s->synchronize();
      } catch (...) {  // the step is already failing with its own error
      }
  }
};

}  // namespace

SwapAdamW::SwapAdamW(optim::NamedParameters params, int64_t windows, optim::AdamWOptions options,
                     const optim::DecayRule& decay)
    : AdamW(params, options, decay) {
  for (const auto& [name, p] : params)
    TIDAL_CHECK(p.device() == params.front().second.device(), "[swap_optimizer] parameter '", name, "' is on ",
                p.device(), " but '", params.front().first, "' on ", params.front().second.device(),
                ": one device per optimizer");
  windows_ = plan_swap_windows(swap_params(params), windows);
  for (const SwapWindow& w : windows_) buffer_bytes_ = std::max(buffer_bytes_, w.device_bytes);
  // The copy streams of the parameters' device (the constructor's check above made it one).
  const Device dev = params.empty() ? Device::cpu() : params.front().second.device();
  h2d_ = std::make_unique<Stream>("swap_h2d", dev);
  d2h_ = std::make_unique<Stream>("swap_d2h", dev);
}

SwapAdamW::~SwapAdamW() = default;

int64_t SwapAdamW::device_bytes() const { return (windows_.size() == 1 ? 1 : 2) * buffer_bytes_; }

void SwapAdamW::init_state(Slot& s) const {
  const DType state_dtype = s.param.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Device dev = s.param.device();
  s.exp_avg = empty_host(s.param.shape(), state_dtype, dev);
  s.exp_avg.zero_();
  s.exp_avg_sq = empty_host(s.param.shape(), state_dtype, dev);
  s.exp_avg_sq.zero_();
  if (s.param.dtype() == DType::bf16) {
    s.master = empty_host(s.param.shape(), DType::f32, dev);
    s.master.copy_(s.param.detach());  // exact: bf16 is a prefix of f32
  }
}

struct SwapAdamW::Piece {
  const Slot* slot;
  const Tensor* grad;
  int64_t begin, n;
  Tensor dev[3], host[3];  // exp_avg, exp_avg_sq, master (bf16 parameters)
};

void SwapAdamW::step(double lr) {
  check_lr(lr);
  OpScope op("swap_optimizer");
  NoGradGuard no_grad;
  const int64_t t0 = now_ns();
  std::vector<Tensor> grads(slots_.size());
  bool any = false;
  for (size_t i = 0; i < slots_.size(); ++i) {
    grads[i] = begin_update(slots_[i]);
    any = any || grads[i].defined();
  }
  ++steps_;
  ++stats_.steps;
  if (!any) return;
  const Device dev = slots_.front().param.device();
  const int64_t K = windows();
  std::shared_ptr<Storage> buf[2];
  {
    MemoryScope scope(MemoryCategory::optimizer_state);
    // The h2d copies write the buffers first: blocks freed on the compute stream are handed to the h2d
    // stream behind the kernels that may still use them (allocator_streams.h, Note [Cross-stream reuse]).
    StreamGuard first_used_on(*h2d_);
    buf[0] = Storage::make(buffer_bytes_, dev);
    if (K > 1) buf[1] = Storage::make(buffer_bytes_, dev);
  }
  if (dev.is_meta()) return;  // accounted; nothing to move
  swap_through(window_pieces(buf, grads), dev, lr);
  stats_.step_ms += ms_since(t0);
}

SwapAdamW::WindowPieces SwapAdamW::window_pieces(const std::shared_ptr<Storage> (&buf)[2],
                                                 const std::vector<Tensor>& grads) const {
  const int64_t K = windows();
  WindowPieces pieces(static_cast<size_t>(K));
  for (int64_t w = 0; w < K; ++w) {
    int64_t offset = 0;
    for (const SwapPiece& sp : windows_[size_t(w)].pieces) {
      const Slot& s = slots_[sp.param];
      const int64_t n = sp.end - sp.begin;
      Piece p{&s, &grads[sp.param], sp.begin, n, {}, {}};
      const Tensor* states[3] = {&s.exp_avg, &s.exp_avg_sq, &s.master};
      for (int j = 0; j < 3; ++j) {
        if (j == 2 && s.param.dtype() != DType::bf16) break;
        const DType sd = s.param.dtype() == DType::f64 ? DType::f64 : DType::f32;
        const int64_t item = dtype_size(sd);
        if (p.grad->defined()) {
          p.dev[j] = Tensor(buf[w % 2], Shape{n}, Shape{1}, offset / item, sd);
          p.host[j] = states[j]->view({-1}).narrow(0, sp.begin, n);
        }
        offset += round_up(n * item, kAlign);
      }
      if (p.grad->defined()) pieces[size_t(w)].push_back(std::move(p));
    }
    TIDAL_ASSERT(offset == windows_[size_t(w)].device_bytes, "swap window layout differs from the plan");
  }
  return pieces;
}

void SwapAdamW::swap_through(const WindowPieces& pieces, Device dev, double lr) {
  const int64_t K = windows();
  auto copies = [&](int64_t w, bool in, int64_t& bytes) {
    std::vector<Copy> v;
    for (const Piece& p : pieces[size_t(w)])
      for (int j = 0; j < 3 && p.dev[j].defined(); ++j) {
        const Tensor &d = in ? p.dev[j] : p.host[j], &s = in ? p.host[j] : p.dev[j];
        v.push_back({d.raw_data(), s.raw_data(), size_t(d.nbytes())});
        bytes += d.nbytes();
      }
    return v;
  };
  // The pieces' tensors outlive the copies: drain (below) waits for both streams before they go.
  auto enqueue = [](Stream& stream, const std::vector<Copy>& v, const char* label) {
    for (const Copy& c : v) stream.copy(c.dst, c.src, int64_t(c.bytes), label);
  };
  std::vector<Event> in(static_cast<size_t>(K)), out(static_cast<size_t>(K));
  Drain drain{*h2d_, *d2h_};
  auto copy_in = [&](int64_t w) {
    if (w >= 2) h2d_->wait(out[size_t(w - 2)]);  // its buffer is free once window w - 2 went out
    enqueue(*h2d_, copies(w, true, stats_.bytes_to_device), "swap in");
    in[size_t(w)].record(*h2d_);
  };
  copy_in(0);
  if (K > 1) copy_in(1);
  for (int64_t w = 0; w < K; ++w) {
    const int64_t wait0 = now_ns();
    in[size_t(w)].synchronize();
    stats_.wait_ms += ms_since(wait0);
    std::vector<Update> updates;  // the window's pieces, in one multi-tensor update
    for (const Piece& p : pieces[size_t(w)])
      updates.push_back({p.slot, p.slot->param.detach().view({-1}).narrow(0, p.begin, p.n),
                         p.grad->view({-1}).narrow(0, p.begin, p.n), p.dev[0], p.dev[1], p.dev[2]});
    update(updates, lr);
    Event updated;
    updated.record(Stream::compute(dev));
    d2h_->wait(updated);
    enqueue(*d2h_, copies(w, false, stats_.bytes_to_host), "swap out");
    out[size_t(w)].record(*d2h_);
    if (w + 2 < K) copy_in(w + 2);
  }
  const int64_t wait0 = now_ns();
  out[size_t(K - 1)].synchronize();  // the d2h stream is in order: every window is back in host memory
  stats_.wait_ms += ms_since(wait0);
}

std::string SwapAdamW::describe() const {
  int64_t params = 0;
  for (const Slot& s : slots_) params += s.param.numel() * swap_state_bytes_per_element(s.param.dtype());
  return "in host memory (" + format_bytes(params) + "), swapped through the device in " + std::to_string(windows()) +
         " windows (device peak " + format_bytes(device_bytes()) + ")";
}

nlohmann::json SwapAdamW::stats_json() const {
  const double steps = double(std::max<int64_t>(stats_.steps, 1));
  return {{"windows", windows()},
          {"device_peak_bytes", device_bytes()},
          {"host_state_bytes", state_bytes()},
          {"bytes_to_device", stats_.bytes_to_device},
          {"bytes_to_host", stats_.bytes_to_host},
          {"steps", stats_.steps},
          {"step_ms", stats_.step_ms / steps},
          {"wait_ms", stats_.wait_ms / steps}};
}

std::unique_ptr<optim::AdamW> make_adamw(optim::NamedParameters params, const optim::AdamWOptions& options,
                                         const SwapOptimizerConfig& swap, const optim::DecayRule& decay,
                                         int64_t model_parameters) {
  if (!swap.on) return std::make_unique<optim::AdamW>(std::move(params), options, decay);
  int64_t nonempty = 0;
  for (const auto& [name, p] : params) nonempty += p.defined() && p.numel() > 0;
  const int64_t whole = model_parameters >= 0 ? model_parameters : nonempty;
  const int64_t k = swap.times < 0 ? std::min<int64_t>(kSwapOptimizerDefaultTimes, whole) : swap.times;
  TIDAL_CHECK(k <= whole, "tidal train: --swap-optimizer-times ", k, " exceeds the model's ", whole,
              " parameters: the step runs in K windows over the parameters, so K must be at most ", whole);
  // A shard may hold fewer pieces than K (the last ranks' shards of a small model): a window each.
  if (nonempty == 0) return std::make_unique<optim::AdamW>(std::move(params), options, decay);
  return std::make_unique<SwapAdamW>(std::move(params), std::min(k, nonempty), options, decay);
}

}  // namespace tidal::memory
