#pragma once
// Asynchronous activation offload (docs/offload.md). Saved activations leave the device on a copy
// stream during forward and come back, prefetched on another stream, before backward needs them.
// Built on saved-tensor hooks: inside a model's block loop,
//
//   memory::Offloader offloader(options);            // once: streams, host pool, spill file
//   offloader.begin_micro_batch();                   // every micro-batch
//   for (int i = 0; i < layers; ++i) {
//     memory::AsyncOffload guard(offloader, {.block_idx = i, .depth = layers, .check = check});
//     x = layer(i, x);
//   }
//
// See Note [Offload lifetime] in offload.cpp for when bytes move and when they are released.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "tidal/autograd/saved_tensor.h"
#include "tidal/memory/memory_config.h"
#include "tidal/tensor.h"

namespace tidal::memory {

struct OffloadOptions {
  OffloadTarget target = OffloadTarget::host;
  std::string dir;                   // disk: where the spill file lives (it is unlinked at once)
  int prefetch_depth = 1;            // unpacking block b prefetches blocks b-1 ... b-depth
  int64_t host_limit = 0;            // host bytes the offloaded copies may hold (0: no cap)
  int64_t staging_bytes = 16 << 20;  // disk: the bounded staging buffer between device and file
  // The device the activations live on: its copy streams and its host memory (host_allocator(device)).
  // On meta (a dry run) the host bytes and spill-file regions are counted, and nothing is copied,
  // touched or written: no spill file is made.
  Device device = Device::cpu();
};

// Which saved tensors a block offloads. Parameters, views of parameters, empty storages and outputs
// that output-discarding recompute will free and rebuild are never offloaded; for the others the check
// decides. It runs at save time, on the compute thread, so it may read memory_context() (op, module,
// layer of the op that saves).
using OffloadCheck = std::function<bool(const Tensor&)>;

struct OffloadStats {
  int64_t offloaded_bytes = 0;  // device bytes sent away (one copy per storage)
  int64_t kept_bytes = 0;       // accepted by the check but kept on the device: the host cap was reached
  int64_t in_use_bytes = 0;     // copied, then kept on the device: a live tensor still referred to them
  int64_t offloaded_tensors = 0;
  int64_t d2h_ns = 0, h2d_ns = 0;   // time the copy streams spent copying (disk: including file I/O)
  int64_t exposed_wait_ns = 0;      // time compute waited on copies
  double overlap_fraction() const;  // 1 - exposed wait / copy time (1 when nothing was copied)
};

class Offloader {
 public:
  explicit Offloader(OffloadOptions options = {});
  ~Offloader();  // waits for its copies; removes nothing on disk because the spill file is anonymous
  Offloader(const Offloader&) = delete;
  Offloader& operator=(const Offloader&) = delete;

  // Starts a micro-batch: entries are keyed by (micro-batch, block, index).
  void begin_micro_batch();
  const OffloadOptions& options() const { return options_; }
  // Accumulated since the last reset.
  OffloadStats stats() const;
  void reset_stats();
  // The stats as per-step averages over `steps` steps (copy times in total) with the host peak, for
  // --metrics-json's "offload" summary.
  nlohmann::json stats_json(int64_t steps) const;
  // "offload: 12 MiB per step to host, copies 30 ms, compute waited 2 ms (overlap 0.93)", and what
  // stayed on the device when the host cap was reached.
  std::string describe_stats(int64_t steps) const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  OffloadOptions options_;
  std::unique_ptr<Impl> impl_;
};

struct OffloadBlock {
  int64_t block_idx = 0;
  int64_t depth = 1;   // number of blocks; the last one (depth - 1) is not offloaded
  OffloadCheck check;  // nullptr: offload everything eligible
};

// RAII: saved tensors of the block go through the offloader while it is alive. Starting block b
// releases the device bytes of block b-1 (their copies are done by then, or waited for).
class AsyncOffload {
 public:
  AsyncOffload(Offloader& offloader, OffloadBlock block);
  ~AsyncOffload();
  AsyncOffload(const AsyncOffload&) = delete;
  AsyncOffload& operator=(const AsyncOffload&) = delete;

 private:
  std::unique_ptr<autograd::SavedTensorHooksGuard> guard_;
};

// The options of --activation-offload's flags for activations on `device` (the staging buffer keeps
// its default).
OffloadOptions offload_options(const OffloadConfig& c, Device device = Device::cpu());

// The check of a policy (memory_config.h): all (nullptr), layer-input (the block's input only: pass
// it), core-attn (tensors saved by the attention core: probabilities, masks, q/k/v and, for flash,
// the output and log-sum-exp), min-bytes=N.
OffloadCheck offload_check(const OffloadPolicy& policy, const Tensor& block_input = Tensor());

}  // namespace tidal::memory
