// Checkpoints of the distributed optimizer (docs/distributed.md): every rank writes its own shard of
// the optimizer's states; a resume on the same number of ranks reads each rank's own file, on another
// number the files that hold each rank's pieces; a rank that fails to save or to read fails every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "tests/dist/train_runs.h"
#include "tests/integration/run_command.h"
#include "tests/support/error_of.h"
#include "tidal/allocator.h"
#include "tidal/checkpoint/load.h"
#include "tidal/checkpoint/save.h"
#include "tidal/dist/communicator.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/pretrained.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/shard_layout.h"
#include "tidal/train/trainer.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;

// A directory every rank of this run shares, made empty.
std::string fresh_dir(const std::string& name) {
  dist::Communicator& world = dist::world();
  const std::string dir =
      std::string(TIDAL_BINARY_DIR) + "/dist_test_tmp/checkpoint_" + name + "_np" + std::to_string(world.size());
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  return dir;
}

// `iters` steps of tiny-gpt2 on one micro-batch of 2 per rank, the distributed optimizer, --save every 2.
train::TrainArgs sharded_args(const std::string& save, std::vector<std::string> extra = {}, int iters = 4) {
  extra.push_back("--use-distributed-optimizer");
  return args_for(2, 2 * dist::world().size(), save, "tiny-gpt2", extra, iters);
}

void train_quietly(const train::TrainArgs& args) {
  std::FILE* quiet = std::fopen("/dev/null", "w");
  train::run_training(args, quiet, dist::world());
  std::fclose(quiet);
}

// A directory's entries, without --save's lock file (rank 0 removes it when its run returns, which the
// other ranks' listing may precede).
std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.path().filename() != ".tidal-save.lock") out.insert(e.path().filename().string());
  return out;
}

TEST(ShardedCheckpoint, EveryRankWritesItsOwnShardFile) {
  dist::Communicator& world = dist::world();
  const int ranks = world.size();
  const std::string dir = fresh_dir("files");
  train_quietly(sharded_args(dir));
  EXPECT_EQ(entries(dir), (std::set<std::string>{"iter_0000002", "iter_0000004", "latest_checkpointed_iteration.txt"}));
  std::set<std::string> want = {"config.json", "model.safetensors", "state.json"};
  for (int r = 0; r < ranks; ++r) want.insert(checkpoint::optimizer_shard_file(r, ranks));
  EXPECT_EQ(entries(dir + "/iter_0000004"), want);
  EXPECT_EQ(checkpoint::optimizer_shard_file(1, 4), "optimizer.rank00001-of-00004.safetensors");

  const checkpoint::Checkpoint c = checkpoint::load_checkpoint(dir);
  EXPECT_EQ(c.shards.ranks, ranks);
  EXPECT_EQ(c.shards.align, optim::kGradNormChunk);
  EXPECT_TRUE(c.optimizer.empty());
  auto model = models::create_model(sharded_args("").model);
  const auto params = model->named_parameters();
  ASSERT_EQ(c.shards.parameters.size(), params.size());
  std::vector<int64_t> numels;
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(c.shards.parameters[i].first, params[i].first);
    numels.push_back(params[i].second.numel());
  }
  // My file: my shard's two moments, each piece's step count, the optimizer's, and what it covers.
  const optim::ShardLayout layout = optim::make_shard_layout(numels, ranks, optim::kGradNormChunk);
  const io::Safetensors mine =
      io::load_safetensors(c.path + "/" + checkpoint::optimizer_shard_file(world.rank(), ranks));
  int64_t moments = 0;
  for (const auto& [name, t] : mine.tensors)
    if (name.ends_with(".exp_avg") || name.ends_with(".exp_avg_sq")) moments += t.numel();
  EXPECT_EQ(moments, 2 * layout.shard_size(world.rank()));
  EXPECT_EQ(mine.tensors.size(), 3 * layout.fragments(world.rank()).size() + 1);
  EXPECT_EQ(mine.tensors.at("step").item<int64_t>(), 4);
  EXPECT_EQ(mine.metadata.at("rank"), std::to_string(world.rank()));
  EXPECT_EQ(mine.metadata.at("ranks"), std::to_string(ranks));
  EXPECT_EQ(mine.metadata.at("begin"), std::to_string(layout.shard_begin(world.rank())));
  // The whole model, in Hugging Face's names: the checkpoint is a model directory as it stands.
  auto exported = models::load_pretrained_model(c.path);
  for (const auto& [name, t] : exported->state_dict())
    EXPECT_EQ(t.to_vector<float>(), c.model.at(name).to_vector<float>()) << name;
}

// Saving adds no memory: no rank gathers states, nothing is copied (the peaks of every category are
// those of the same run without --save).
TEST(ShardedCheckpoint, SavingAllocatesNothing) {
  const std::string dir = fresh_dir("memory");
  train_quietly(sharded_args(""));
  const MemoryStats without = device_allocator(Device::cpu()).stats();
  train_quietly(sharded_args(dir));
  const MemoryStats with = device_allocator(Device::cpu()).stats();
  for (MemoryCategory c : {MemoryCategory::parameter, MemoryCategory::gradient, MemoryCategory::optimizer_state,
                           MemoryCategory::temporary})
    EXPECT_EQ(with[c].peak, without[c].peak) << int(c);
  EXPECT_EQ(with.peak_allocated, without.peak_allocated);
}

void flip_byte(const std::string& path, std::streamoff from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c;
  f.get(c);
  f.seekp(-from_end, std::ios::end);
  f.put(char(c ^ 0x5a));
}

// Every rank's resume fails with the same message, naming the rank that met the bad file.
TEST(ShardedCheckpoint, ABadShardFileFailsEveryRank) {
  dist::Communicator& world = dist::world();
  const int ranks = world.size(), last = ranks - 1;
  const std::string dir = fresh_dir("bad");
  train_quietly(sharded_args(dir));
  const std::string iter = dir + "/iter_0000004/";
  const std::string prefix = ranks == 1 ? "" : "[checkpoint] cannot resume from --load " + dir + ", on rank ";
  // A flipped byte in the last rank's file: only that rank reads it.
  if (world.rank() == 0) flip_byte(iter + checkpoint::optimizer_shard_file(last, ranks), 100);
  world.barrier();
  std::string msg = testing::error_of([&] { train_quietly(sharded_args("", {"--load", dir}, 6)); });
  std::string want = "[checkpoint] " + iter + checkpoint::optimizer_shard_file(last, ranks) +
                     " is corrupted: its CRC-32 does not match the one recorded when it was saved";
  if (ranks > 1) want = prefix + std::to_string(last) + " of " + std::to_string(ranks) + ": " + want;
  EXPECT_EQ(msg, want);
  // A missing file: every rank sees it in state.json's list.
  world.barrier();
  if (world.rank() == 0) fs::remove(iter + checkpoint::optimizer_shard_file(0, ranks));
  world.barrier();
  msg = testing::error_of([&] { train_quietly(sharded_args("", {"--load", dir}, 6)); });
  want = "[checkpoint] " + iter + checkpoint::optimizer_shard_file(0, ranks) + " is missing";
  if (ranks > 1)
    want = prefix.substr(0, prefix.size() - 5) + "ranks 0, 1" + (ranks == 3 ? ", 2" : "") + " of " +
           std::to_string(ranks) + ": " + want;
  EXPECT_EQ(msg, want);
}

// Ranks that do not see one --load directory (simulated: rank 0 gets the checkpoint, the others an
// empty directory) all stop, rather than some resuming and some starting afresh.
TEST(ShardedCheckpoint, RanksThatSeeDifferentCheckpointsAllStop) {
  dist::Communicator& world = dist::world();
  if (world.size() == 1) GTEST_SKIP() << "needs several ranks";
  const std::string dir = fresh_dir("unshared");
  train_quietly(sharded_args(dir + "/saved"));
  const std::string mine = world.rank() == 0 ? dir + "/saved" : dir + "/empty_" + std::to_string(world.rank());
  EXPECT_EQ(testing::error_of([&] {
              train_quietly(sharded_args("", {"--load", mine}, 6));
            }),
            "[checkpoint] cannot resume from --load " + mine +
                ": rank 0 finds iteration 4 there, rank 1 no checkpoint: --load must be one directory every rank "
                "sees (a shared filesystem)");
}

// A failure on one rank while saving: every rank throws naming it, the temporary directory is gone
// and the previous checkpoint stays the current one.
TEST(ShardedCheckpoint, AFailedSaveOnOneRankFailsEveryRank) {
  dist::Communicator& world = dist::world();
  const int ranks = world.size(), last = ranks - 1;
  const std::string dir = fresh_dir("save_fails");
  const std::map<std::string, Tensor> model = {{"w", ones({4})}};
  const checkpoint::OptimizerShards shards{ranks, 1, {{"w", 4}}};
  const std::map<std::string, Tensor> mine = {{"step", from_vector_i64({2}, Shape{})}};
  auto save = [&](int64_t iteration, const std::map<std::string, Tensor>& shard) {
    checkpoint::TrainingState st;
    st.iteration = iteration;
    checkpoint::save_checkpoint(
        world, dir, st,
        checkpoint::sharded_files(world.rank() == 0 ? checkpoint::whole_pieces(model)  // rank 0's model
                                                    : std::vector<optim::TensorPiece>(),
                                  shard, shards, world.rank()),
        {{"model_type", "gpt2"}});
  };
  save(2, mine);
  EXPECT_EQ(checkpoint::load_optimizer_shard(checkpoint::load_checkpoint(dir), world.rank()).at("step").item<int64_t>(),
            2);
  const std::string what = ranks == 1 ? ""
                                      : "[checkpoint] iteration 3 was not saved, on rank " + std::to_string(last) +
                                            " of " + std::to_string(ranks) + ": ";
  std::map<std::string, Tensor> bad = mine;
  if (world.rank() == last) bad["w.exp_avg"] = from_vector({1, std::nan(""), 0, 0}, {4});
  EXPECT_EQ(testing::error_of([&] { save(3, bad); }),
            what +
                "[checkpoint] refusing to save iteration 3: optimizer state w.exp_avg holds NaN or infinite "
                "values (training diverged; --check-for-nan-in-loss-and-grad, on by default, stops at the step "
                "that does it)");
  if (world.rank() == last) bad["w.exp_avg"] = empty({4}, DType::f32, Device::meta());  // cannot be written
  EXPECT_EQ(testing::error_of([&] { save(3, bad); }),
            what + "[safetensors] cannot save 'w.exp_avg': a meta tensor has no data");
  world.barrier();
  EXPECT_EQ(checkpoint::latest_iteration(dir), 2);
  EXPECT_EQ(entries(dir), (std::set<std::string>{"iter_0000002", "latest_checkpointed_iteration.txt"}));
}

// Re-sharding through the command line (each run its own mpirun, so from dist1 only): 2 ranks save,
// 3 resume; 3 save, one process without the distributed optimizer resumes; one process with it
// saves a one-file checkpoint, 2 ranks resume. Each ends bit for bit where one process ends that
// trains the same global batch (6) with the same micro-batches and resumes the same way.
TEST(ShardedCheckpoint, ResumesOnAnotherNumberOfRanksBitwise) {
  if (dist::launched_by_mpi_launcher()) GTEST_SKIP() << "launches mpirun itself";
  const std::string dir = fresh_dir("reshard");
  const std::string mpirun =
      "timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "
      "-x TIDAL_NUM_THREADS=1 -np ";
  // `ranks` processes, each one micro-batch of the global batch of 6 (one process: several).
  auto train = [&](int ranks, int64_t micro, bool sharded, int iters, const std::string& save,
                   const std::string& load) {
    std::string cmd = mpirun + std::to_string(ranks) + " " + TIDAL_BINARY_DIR +
                      "/tidal train --model tiny-gpt2 --mock-data --seq-length 16 --global-batch-size 6 "
                      "--attention-dropout 0 --hidden-dropout 0 --eval-interval 0 --lr-decay-iters 4 "
                      "--log-interval 1000 --save-interval 2 --micro-batch-size " +
                      std::to_string(micro) + " --train-iters " + std::to_string(iters) + " --save " + save;
    if (!load.empty()) cmd += " --load " + load;
    if (sharded) cmd += " --use-distributed-optimizer";
    const auto r = testing::run_command(cmd);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.output;
  };
  struct Case {
    int from, to;
    bool sharded_after;
  };
  for (const Case c : {Case{2, 3, true}, Case{3, 1, false}, Case{1, 2, true}}) {
    const std::string tag = dir + "/" + std::to_string(c.from) + "to" + std::to_string(c.to);
    train(c.from, 6 / c.from, true, 2, tag + "/half", "");
    EXPECT_EQ(checkpoint::load_checkpoint(tag + "/half").shards.ranks, c.from) << tag;
    train(c.to, 6 / c.to, c.sharded_after, 4, tag + "/resumed", tag + "/half");
    // One process splitting the global batch as the ranks did, before and after the resume.
    train(1, 6 / c.from, false, 2, tag + "/one_half", "");
    train(1, 6 / c.to, false, 4, tag + "/one_resumed", tag + "/one_half");
    const bool same = io::read_file(tag + "/resumed/iter_0000004/model.safetensors") ==
                      io::read_file(tag + "/one_resumed/iter_0000004/model.safetensors");
    EXPECT_TRUE(same) << tag << ": the weights differ";
  }
}

}  // namespace
}  // namespace tidal::train
