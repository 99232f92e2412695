#pragma once
// Swap optimizer (MindSpeed-LLM's --swap-optimizer, --swap-optimizer-times K): AdamW whose states
// (exp_avg, exp_avg_sq, and the f32 master weight of a bf16 parameter) live in host memory. A step
// runs in K windows over the parameters (memory/savings.h: plan_swap_windows), pipelined on two
// copy streams: while window i is updated on the device, window i - 1 is copied out of the other
// device buffer and then window i + 1 copied into it. Device optimizer_state peaks at two windows
// (swap_optimizer_device_bytes), about 2/K of the states, and is free between steps (its blocks stay
// cached for activations). The update is AdamW's own kernel on the same values: parameters are
// bitwise identical to the in-device AdamW. See Note [Swap pipeline] in swap_optimizer.cpp.
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "tidal/memory/memory_config.h"
#include "tidal/memory/savings.h"
#include "tidal/optim/adamw.h"
#include "tidal/stream.h"

namespace tidal::memory {

struct SwapStats {
  int64_t steps = 0;
  int64_t bytes_to_device = 0;  // host -> device, all steps
  int64_t bytes_to_host = 0;    // device -> host
  double wait_ms = 0;           // time the step spent waiting for copies
  double step_ms = 0;           // time in step()
};

class SwapAdamW : public optim::AdamW {
 public:
  // `windows` = K, between 1 and the number of non-empty parameters (all on one device).
  SwapAdamW(optim::NamedParameters params, int64_t windows, optim::AdamWOptions options = {},
            const optim::DecayRule& decay = optim::default_weight_decay);
  ~SwapAdamW() override;

  void step(double lr) override;
  using AdamW::step;

  int64_t windows() const { return int64_t(windows_.size()); }
  // The device optimizer_state bytes a step holds at its peak: swap_optimizer_device_bytes.
  int64_t device_bytes() const;
  const SwapStats& stats() const { return stats_; }
  // "in host memory (X), swapped through the device in K windows (device peak Y)"
  std::string describe() const override;
  // The stats, K, the device peak and the host bytes, for --metrics-json.
  nlohmann::json stats_json() const override;

 protected:
  // In host memory (host_allocator(device), category host_offload); on meta in the meta host
  // allocator, counted as the real host memory is.
  void init_state(Slot& s) const override;

 private:
  struct Piece;  // a window's piece: its parameter range and its states' device and host views
  using WindowPieces = std::vector<std::vector<Piece>>;  // [window][piece]
  // The device views of each updated piece's states in its window's buffer (buffer w % 2), laid out as
  // plan_swap_windows planned; pieces without a gradient are left out.
  WindowPieces window_pieces(const std::shared_ptr<Storage> (&buffers)[2], const std::vector<Tensor>& grads) const;
  // Copies the windows in, updates them and copies them out on the two copy streams (Note [Swap pipeline]).
  void swap_through(const WindowPieces& pieces, Device dev, double lr);

  std::vector<SwapWindow> windows_;
  int64_t buffer_bytes_ = 0;  // the largest window
  std::unique_ptr<Stream> h2d_, d2h_;
  SwapStats stats_;
};

// AdamW, swapped or not as configured (SwapOptimizerConfig: K defaults to 16, MindSpeed's, capped at
// the number of parameters when not given); checks K against the model's parameters (the flag's name
// in errors). `model_parameters`: the whole model's count when `params` are a rank's shard pieces
// (-1: `params` are the model's); a rank with fewer pieces than K runs one window per piece.
std::unique_ptr<optim::AdamW> make_adamw(optim::NamedParameters params, const optim::AdamWOptions& options,
                                         const SwapOptimizerConfig& swap,
                                         const optim::DecayRule& decay = optim::default_weight_decay,
                                         int64_t model_parameters = -1);

}  // namespace tidal::memory
