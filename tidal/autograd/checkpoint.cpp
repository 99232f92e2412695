// Note [Checkpoint]
// The first run of fn happens under CheckpointHooks: each save becomes an index (k for the k-th
// save) and the tensor is not kept, so everything fn computes is freed as soon as nothing else
// holds it; the frame keeps only the region's inputs (saved through the hooks that were active
// outside the region, so an offload hook can move them off the device). The backward graph is the
// normal one. When a node of the region first unpacks index k, the frame replays fn on detached
// copies of the inputs (same requires_grad flags, so the ops save the same tensors in the same
// order), with grad mode on, the first run's RNG state and layer scope, under RecomputeHooks that
// collect the replay's saves; the replay's own graph is then dropped. Index k is served from that
// list and dropped from the frame, so recomputed activations die as their consumers finish. A
// second backward (retain_graph) finds an index already served and replays again.
//
// Early stop (as PyTorch's non-reentrant checkpoint): the replay ends as soon as it has saved as
// many tensors as the first run did — what fn computes after its last save is discarded anyway.
// Ops save their inputs before computing where they can (matmul, linear), so a region that ends in
// a product (attention's P·V, an MLP's down projection) skips that product on replay. The stop is
// an exception of a private type, not a tidal::Error: RAII scopes unwind, nothing catches it but
// replay().
#include "tidal/autograd/checkpoint.h"

#include <atomic>

#include "tidal/autograd/grad_mode.h"
#include "tidal/autograd/saved_tensor.h"
#include "tidal/base/clock.h"
#include "tidal/memory_scope.h"

namespace tidal::autograd {
namespace {

std::atomic<int64_t> g_replays{0};
std::atomic<int64_t> g_recompute_ns{0};

struct Frame;
// The innermost checkpoint running on this thread: recording its first run or replaying it.
struct ActiveFrame {
  Frame* frame = nullptr;
  bool replay = false;
  size_t cursor = 0;  // next decision to hand back on a replay
};
thread_local ActiveFrame t_active;

class ActiveFrameGuard {
 public:
  ActiveFrameGuard(Frame* f, bool replay) : saved_(t_active) { t_active = {f, replay, 0}; }
  ~ActiveFrameGuard() { t_active = saved_; }
  ActiveFrameGuard(const ActiveFrameGuard&) = delete;
  ActiveFrameGuard& operator=(const ActiveFrameGuard&) = delete;

 private:
  ActiveFrame saved_;
};

struct Frame {
  CheckpointFn fn;
  std::vector<SavedTensor> inputs;
  std::vector<bool> input_requires_grad;
  RngState rng;
  int layer = -1;
  size_t num_saved = 0;            // saves during the first run
  std::vector<Tensor> recomputed;  // saves of the latest replay, served once each
  std::vector<bool> served;
  std::vector<Tensor> decisions;  // checkpoint_decision results of the first run, in order

  void replay();
  ~Frame() {
    for (Tensor& t : recomputed)
      if (t.defined()) t.storage()->unmark_saved();
  }
};

// Thrown by RecomputeHooks once the replay has every save it needs (early stop).
struct ReplayComplete {};

// Collects what the replay saves; stops the replay at the last one.
class RecomputeHooks : public SavedTensorHooks {
 public:
  RecomputeHooks(std::vector<Tensor>& out, size_t needed) : out_(out), needed_(needed) {}
  std::shared_ptr<void> pack(const Tensor& t) override {
    t.storage()->mark_saved();  // a recomputed activation, until its consumer takes it
    out_.push_back(t);
    if (out_.size() == needed_) throw ReplayComplete{};
    return nullptr;
  }
  Tensor unpack(const std::shared_ptr<void>&) override {
    TIDAL_ASSERT(false, "the replay graph of a checkpoint is never differentiated");
    return Tensor();
  }

 private:
  std::vector<Tensor>& out_;
  size_t needed_;
};

class CheckpointHooks : public SavedTensorHooks {
 public:
  explicit CheckpointHooks(std::shared_ptr<Frame> frame) : frame_(std::move(frame)) {}
  std::shared_ptr<void> pack(const Tensor&) override { return std::make_shared<size_t>(frame_->num_saved++); }
  const char* policy(const std::shared_ptr<void>&) const override { return "recomputed"; }
  Tensor unpack(const std::shared_ptr<void>& packed) override {
    const size_t k = *static_cast<const size_t*>(packed.get());
    if (frame_->recomputed.empty() || frame_->served[k]) frame_->replay();
    TIDAL_ASSERT(k < frame_->recomputed.size());
    Tensor t = std::move(frame_->recomputed[k]);
    frame_->recomputed[k] = Tensor();
    frame_->served[k] = true;
    t.storage()->unmark_saved();
    return t;
  }

 private:
  std::shared_ptr<Frame> frame_;
};

void Frame::replay() {
  for (Tensor& t : recomputed)
    if (t.defined()) t.storage()->unmark_saved();
  recomputed.clear();
  recomputed.reserve(num_saved);
  std::vector<Tensor> ins = detail::replay_leaves(inputs, input_requires_grad, "checkpoint");
  const int64_t t0 = now_ns();
  detail::ReplayRng rng_guard(rng);
  {
    GradModeGuard grad(true);
    LayerScope scope(layer);
    OpScope op("checkpoint_replay");
    SavedTensorHooksGuard hooks(std::make_shared<RecomputeHooks>(recomputed, num_saved));
    ActiveFrameGuard active(this, /*replay=*/true);
    bool complete = false;
    try {
      fn(ins);
    } catch (const ReplayComplete&) {
      complete = true;  // stopped at the last save; later decisions are not needed
    }
    TIDAL_CHECK(complete ? t_active.cursor <= decisions.size() : t_active.cursor == decisions.size(),
                "[checkpoint] the replay took ", t_active.cursor, " recorded decisions but the first run recorded ",
                decisions.size());
  }
  ++g_replays;
  g_recompute_ns += now_ns() - t0;
  TIDAL_CHECK(recomputed.size() == num_saved, "[checkpoint] the replay saved ", recomputed.size(),
              " tensors for backward but the first run saved ", num_saved,
              ": the checkpointed function must run the same ops when replayed");
  served.assign(num_saved, false);
}

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return fn(inputs);
  auto frame = std::make_shared<Frame>();
  frame->fn = fn;
  frame->rng = get_rng_state();
  frame->layer = memory_context().layer;
  {
    OpScope op("checkpoint_input");
    for (const Tensor& t : inputs) {
      frame->inputs.emplace_back(t);  // through the hooks active outside the region
      frame->input_requires_grad.push_back(t.defined() && t.requires_grad());
    }
  }
  OpScope no_op(nullptr);
  SavedTensorHooksGuard hooks(std::make_shared<CheckpointHooks>(frame));
  ActiveFrameGuard active(frame.get(), /*replay=*/false);
  return fn(inputs);
}

Tensor checkpoint_decision(const std::function<Tensor()>& compute) {
  Frame* f = t_active.frame;
  if (f == nullptr) return compute();
  if (!t_active.replay) {
    Tensor t = compute();
    f->decisions.push_back(t.detach());
    return t;
  }
  TIDAL_CHECK(t_active.cursor < f->decisions.size(), "[checkpoint] the replay asked for more decisions than the ",
              "first run recorded (", f->decisions.size(), ")");
  return f->decisions[t_active.cursor++];
}

bool in_checkpoint_replay() { return t_active.frame != nullptr && t_active.replay; }
bool recording_decisions() { return t_active.frame != nullptr && !t_active.replay; }

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  return checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; }, {input})[0];
}

namespace detail {

std::vector<Tensor> replay_leaves(std::vector<SavedTensor>& inputs, const std::vector<bool>& requires_grad,
                                  const char* who) {
  std::vector<Tensor> leaves;
  leaves.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor t = inputs[i].unpack(who);
    if (t.defined()) {
      t = t.detach();
      if (requires_grad[i]) t.set_requires_grad(true);
    }
    leaves.push_back(t);
  }
  return leaves;
}

}  // namespace detail

int64_t checkpoint_replay_count() { return g_replays.load(); }
int64_t recompute_time_ns() { return g_recompute_ns.load(); }
void add_recompute_time(int64_t ns) { g_recompute_ns += ns; }

}  // namespace tidal::autograd
