// What the copy lanes of a profile look like (docs/profiling.md, "Checking an offload"): a small
// GPT-2 trains two steps while a toy offload, written here with saved-tensor hooks and copy_async,
// sends every large saved tensor to host memory on a "d2h" stream during forward and brings it back
// on an "h2d" stream when backward needs it. It does not prefetch: each copy back starts when its
// tensor is needed and the compute lane waits for it. The profile of step 2 goes to OUT_DIR (see
// `tidal report OUT_DIR`). tidal's real offload (memory/offload, with prefetch) is another issue;
// this shows its lanes.
//
//   build/profile_copy_lanes OUT_DIR
#include <cstdio>
#include <memory>
#include <optional>

#include "tidal/autograd/saved_tensor.h"
#include "tidal/autograd/saved_tensor_log.h"
#include "tidal/base/error.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/random.h"
#include "tidal/optim/adamw.h"
#include "tidal/profile/profiler.h"
#include "tidal/stream.h"

using namespace tidal;

namespace {

class ToyOffload : public autograd::SavedTensorHooks {
 public:
  struct Packed {
    Tensor kept;    // small tensors stay on the device
    Tensor host;    // large ones wait here
    Event on_host;  // the d2h copy finished
  };

  std::shared_ptr<void> pack(const Tensor& t) override {
    auto p = std::make_shared<Packed>();
    if (t.nbytes() < (int64_t(256) << 10) || !t.is_contiguous()) {
      p->kept = t;
      return p;
    }
    p->host = empty_host(t.shape(), t.dtype());
    Event produced;
    produced.record(Stream::compute());
    d2h_.wait(produced);
    copy_async(p->host, t, d2h_);  // keeps t's bytes alive until the copy ran, then lets them go
    p->on_host.record(d2h_);
    return p;
  }

  Tensor unpack(const std::shared_ptr<void>& packed) override {
    auto p = std::static_pointer_cast<Packed>(packed);
    if (p->kept.defined()) return p->kept;
    Tensor device = empty(p->host.shape(), p->host.dtype());
    h2d_.wait(p->on_host);
    copy_async(device, p->host, h2d_);
    Event on_device;
    on_device.record(h2d_);
    p->host = Tensor();  // the copy keeps the host bytes until it ran
    Stream::compute().wait(on_device);  // a "wait" range on the compute lane when it blocks
    return device;
  }

  const char* policy() const override { return "offloaded"; }

 private:
  Stream d2h_{"d2h"}, h2d_{"h2d"};
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    manual_seed(1);
    auto model = models::create_model(models::preset("small-gpt2"));
    optim::AdamW optimizer(model->named_parameters(), {});
    profile::Profiler profiler({argv[1], 2, 2}, {{"model", "small-gpt2 (examples/profile_copy_lanes)"},
                                                 {"micro_batch", "4 x 128 tokens"},
                                                 {"offload", "toy (examples/profile_copy_lanes.cpp), no prefetch"}});
    for (int64_t step = 1; step <= 2; ++step) {
      profiler.begin_step(step);
      Tensor tokens = randint(0, model->config().vocab_size, {4, 129});
      Tensor loss;
      {
        profile::Range phase("forward", profile::kPhase);
        std::optional<autograd::SavedTensorLog> log;  // the report's table of saved tensors
        if (profiler.wants_saved_tensors(step, 0)) log.emplace();
        autograd::SavedTensorHooksGuard hooks(std::make_shared<ToyOffload>());
        models::ModelOutput o = model->forward(tokens.narrow(1, 0, 128));
        loss = models::causal_lm_loss(o, tokens.narrow(1, 1, 128), 0.0);
        if (log) profiler.set_saved_tensors(step, log->snapshot());
      }
      {
        profile::Range phase("backward", profile::kPhase);
        loss.backward();
      }
      {
        profile::Range phase("optimizer", profile::kPhase);
        optimizer.step();
        optimizer.zero_grad();
      }
      std::printf("step %lld: loss %.4f\n", (long long)step, loss.item<double>());
      profiler.end_step(step, stdout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
