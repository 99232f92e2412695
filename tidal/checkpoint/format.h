#pragma once
// Training checkpoints: everything needed to resume bit for bit. Layout (Megatron's tracker file):
//   DIR/latest_checkpointed_iteration.txt       the iteration of the newest complete checkpoint
//   DIR/iter_0000100/model.safetensors          parameters, Hugging Face names (with config.json, a
//                                               Hugging Face model directory)
//   DIR/iter_0000100/optimizer.safetensors      optimizer states (one process's AdamW), or, from the
//   DIR/iter_0000100/optimizer.rank00000-of-00004.safetensors    distributed optimizer, one file
//   ...                                         per rank: its shard's states (optim/shard_state.h)
//   DIR/iter_0000100/config.json                the model's Hugging Face config
//   DIR/iter_0000100/state.json                 iteration, RNG, data position, settings, the size
//                                               and CRC-32 of every file above, and for a sharded
//                                               optimizer its layout ("optimizer_shards": ranks,
//                                               alignment, every parameter's name and numel)
//   DIR/iter_0000100/tokenizer.json             (when training on a tokenized corpus)
// A checkpoint is written into a temporary directory, fsynced, renamed into place, and only then
// does the tracker file move to it (atomically): a crash leaves the previous checkpoint intact. Its
// files are written by one writer over pieces (save.h: what rank holds which piece of which tensor),
// whatever the run's layout, and read back by one reader over pieces (load.h, rank_state.h), so a
// checkpoint resumes under any number of ranks, sharding strategy and expert-parallel size.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tidal/optim/shard_layout.h"
#include "tidal/rng.h"

namespace tidal::checkpoint {

struct TrainingState {
  int64_t iteration = 0;      // optimizer steps completed
  RngState rng;               // the generator after that step
  int64_t data_position = 0;  // training samples consumed
  nlohmann::json settings;    // resolved training settings (for a mismatch check and the record)
  nlohmann::json extra;       // anything else the trainer keeps (e.g. the tokenizer's origin)
};

// How a distributed optimizer's states were split over the ranks that saved them.
struct OptimizerShards {
  int ranks = 0;      // one file per rank; 0: one process's optimizer.safetensors
  int64_t align = 0;  // cuts inside a parameter fall on multiples of this from its start
  std::vector<std::pair<std::string, int64_t>> parameters;  // every parameter's name and numel, in order
  optim::ShardLayout layout() const;
};
// What a training run saves and resumes: --save DIR, --save-interval N (0: only at the end),
// --load DIR and --exit-on-missing-checkpoint (a --load without a complete checkpoint is an error, not
// a fresh start).
struct CheckpointOptions {
  std::string save, load;
  int64_t save_interval = 0;
  bool exit_on_missing = false;
};

// Most ranks a checkpoint may have (file names hold five digits).
inline constexpr int kMaxCheckpointRanks = 99999;
// "optimizer.rank00001-of-00004.safetensors"
std::string optimizer_shard_file(int rank, int ranks);

// The run's hold on its --save directory: a lock on DIR/.tidal-save.lock (holding "PID on HOST"; Note [One run
// per --save] in format.cpp), released when the object goes (the file removed then) or the process ends,
// however it ends. Two runs never save to one directory.
class SaveLock {
 public:
  SaveLock() = default;
  SaveLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  SaveLock(SaveLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  SaveLock& operator=(SaveLock&& o) noexcept;
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;
  ~SaveLock();
  // Closes the file (which releases the lock) and leaves it in place.
  void release_without_removing();

 private:
  int fd_ = -1;
  std::string path_;
};

struct PreparedSave {
  SaveLock lock;
  std::vector<std::string> removed;  // the names removed, for the log
};

// --save DIR before the first step: created if needed, locked for this run (another run saving there is an
// error naming its pid and host, and its save in progress is never touched), its writability probed (a file created
// and removed), and what a killed save left removed: partial iter_N.tmp-* directories and tracker
// temporaries (nothing else is touched). Throws naming --save.
PreparedSave prepare_save_dir(const std::string& dir);
// The iteration the tracker file names, or -1 when `dir` has no checkpoint.
int64_t latest_iteration(const std::string& dir);

}  // namespace tidal::checkpoint
