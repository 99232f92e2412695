#pragma once
// What the distributed training tests share: a run of `tidal train` on some ranks, and the
// comparison of N ranks with one process accumulating the same micro-batches (docs/distributed.md).
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/models/causal_lm.h"
#include "tidal/tensor.h"
#include "tidal/train/trainer.h"

namespace tidal::train {

// A directory of this test run's, per number of ranks.
std::string scratch_dir(const std::string& name, int ranks);

// `tidal train` of `model` (a preset, or a config.json path) on mock data (unless `extra` gives --data-path), sequences
// of `seq` tokens, no evaluation and no dropout unless `extra` sets --attention-dropout / --hidden-dropout; saving
// every 2 steps to `save` when it is not empty.
TrainArgs args_for(int64_t micro, int64_t global, const std::string& save, const std::string& model = "tiny-gpt2",
                   const std::vector<std::string>& extra = {}, int64_t iters = 4, int64_t seq = 16);

struct Run {
  TrainResult result;
  std::map<std::string, Tensor> weights;  // the saved model, read back by every rank
};

// Trains on `comm` (rank 0 saves to args.checkpoint.save) and reads the weights back once every rank is done.
Run train_on(dist::Communicator& comm, dist::Communicator& world, const TrainArgs& args);

double max_abs_difference(const Tensor& a, const Tensor& b);

// Losses within `loss_tolerance` and weights within `tolerance` (0: bitwise).
void expect_same(const Run& dp, const Run& one, double tolerance, double loss_tolerance);

// This run's ranks, `micro_per_rank` micro-batches of 2 each with flags `extra`, against one process
// accumulating them all without them; flags `both` go to both runs.
void compare(const std::string& model, int64_t micro_per_rank, double tolerance,
             const std::vector<std::string>& extra = {}, double loss_tolerance = -1,
             const std::vector<std::string>& both = {});

// A run interrupted and resumed, in `dir` (emptied first): `args(save, iters, load, sharded)` gives the
// flags. Trains 4 steps uninterrupted and 2 saved on `world` (sharded), resumes those to 4 on `world`,
// and one process (not sharded) from the same save. Returns the three models after step 4 (a LoRA run's: the
// base and the adapters).
struct ResumedRuns {
  std::map<std::string, Tensor> full, resumed, one;
};
using ResumeArgs =
    std::function<TrainArgs(const std::string& save, int64_t iters, const std::string& load, bool sharded)>;
ResumedRuns resume_runs(dist::Communicator& world, const std::string& dir, const ResumeArgs& args);

// ZeRO-3's peak of parameter elements on `rank` of `ranks` (docs/distributed.md): its shard, the
// parameters outside the layers, and one layer's at a time (with `prefetch`, a layer's and the next's).
int64_t zero3_parameter_peak(const TrainArgs& args, int ranks, int rank, bool prefetch);
// The same for `model` (this rank's, e.g. built on the meta device) and a shard of `shard` elements.
int64_t zero3_parameter_peak(const models::CausalLM& model, int64_t shard, bool prefetch);

}  // namespace tidal::train
