#pragma once
// The distributed optimizer (optim/distributed_adamw.h) against one AdamW, on any device and over any
// communicator: a few steps of each from the same parameters, where rank r's gradient of step s is a
// function of (parameter, s, r, element) that every rank and the reference compute alike. The
// reference adds the ranks' gradients in rank order, as the reduce-scatter does, and clips by the
// whole norm: the two must agree bit for bit on every number of ranks.
#include <string>
#include <vector>

#include "tidal/device.h"
#include "tidal/dist/communicator.h"
#include "tidal/dtype.h"

namespace tidal::testing {

struct ShardedRunOptions {
  Device device = Device::cpu();
  DType dtype = DType::f32;       // f32, or bf16 (f32 gradient sums and master weights)
  bool shard_parameters = false;  // ZeRO-3: the parameters sharded too, gathered after each step
  bool in_place = false;          // the sums in the whole gradients (DistributedAdamW::set_in_place)
  int steps = 3;
};

struct AdamWRun {
  std::vector<std::vector<double>> params;  // every parameter's values after the steps
  std::vector<double> norms;                // the gradient norm of every step, before clipping
};

// The steps by DistributedAdamW over `comm` (every rank of it calls this), the gradients reduced in
// two buckets as --overlap-grad-reduce does.
AdamWRun sharded_adamw_run(dist::Communicator& comm, const ShardedRunOptions& options);
// The same steps by one AdamW whose gradients are the sums of `ranks` ranks', in rank order.
AdamWRun plain_adamw_run(int ranks, const ShardedRunOptions& options);
// Equal bit for bit (gtest failures naming `what`, the first differing element and both values).
void expect_same_run(const AdamWRun& got, const AdamWRun& want, const std::string& what);

}  // namespace tidal::testing
