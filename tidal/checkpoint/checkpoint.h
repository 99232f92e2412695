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
// does the tracker file move to it (atomically): a crash leaves the previous checkpoint intact. With
// the distributed optimizer every rank writes its own shard file into rank 0's temporary directory,
// so DIR must be one directory that every rank sees (a shared filesystem, as Megatron-LM assumes);
// rank 0 writes the rest once every rank's file is in, and a resume on another number of ranks
// assembles each rank's pieces from the files that hold them (docs/distributed.md). Under expert
// parallelism (any sharding strategy) a checkpoint is one process's files, which rank 0 assembles
// from every rank's pieces (save_gathered_checkpoint), so it resumes under any E and any layout.
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/ops/random.h"
#include "tidal/optim/shard_layout.h"
#include "tidal/optim/shard_state.h"
#include "tidal/tensor.h"

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
// Most ranks a checkpoint may have (file names hold five digits).
inline constexpr int kMaxCheckpointRanks = 99999;
// "optimizer.rank00001-of-00004.safetensors"
std::string optimizer_shard_file(int rank, int ranks);

struct Checkpoint {
  TrainingState state;
  std::map<std::string, Tensor> model;
  std::map<std::string, Tensor> optimizer;  // one process's form; empty when shards.ranks > 0
  OptimizerShards shards;                   // read a rank's file with load_optimizer_shard
  nlohmann::json config;
  std::string path;            // the iter_* directory it came from
  std::string tokenizer_path;  // its tokenizer.json, or "" when it has none
  nlohmann::json files;        // state.json's record of every file's size and CRC-32
};

// Writes a checkpoint of `state.iteration` under `dir` (created if needed). Refuses (tidal::Error
// naming the tensor) when a model or optimizer tensor holds a NaN or an infinity.
void save_checkpoint(const std::string& dir, const TrainingState& state, const std::map<std::string, Tensor>& model,
                     const std::map<std::string, Tensor>& optimizer, const nlohmann::json& config,
                     const std::string& tokenizer_path = "");
// The distributed optimizer's save: every rank of `comm` calls it with its local AdamW's state_dict
// (`shard`, the states of its pieces) and the layout; `model`, `config` and `tokenizer_path` are used
// on rank 0 only. Every rank writes and fsyncs its optimizer shard file; rank 0 writes the rest,
// verifies every rank's file is in and publishes the checkpoint. Returns on every rank once it is
// complete; a failure on any rank (a NaN, an unwritable or full disk, a directory it does not see)
// throws tidal::Error on every rank naming the rank, and leaves the previous checkpoint current.
void save_sharded_checkpoint(dist::Communicator& comm, const std::string& dir, const TrainingState& state,
                             const std::map<std::string, Tensor>& model, const OptimizerShards& shards,
                             const std::map<std::string, Tensor>& shard, const nlohmann::json& config,
                             const std::string& tokenizer_path = "");
// Expert parallel without a sharded optimizer: every rank of the expert-parallel group `experts` that
// holds rank 0 of the run calls it with its model and AdamW state_dict (its experts, by their global
// names, and the rest, which every rank holds alike). Rank 0 writes one process's checkpoint (every
// expert, every expert's moments: it loads with any --expert-model-parallel-size and any number of
// ranks), receiving each other rank's expert tensor as it writes it, so no rank ever holds the
// others' experts; `config` and `tokenizer_path` are rank 0's. Returns on every rank of the group
// once the checkpoint is published; a failure on any rank (a NaN, an unwritable disk) throws
// tidal::Error on every rank of the group and leaves the previous checkpoint current.
void save_expert_parallel_checkpoint(dist::Communicator& experts, const std::string& dir, const TrainingState& state,
                                     const std::map<std::string, Tensor>& model,
                                     const std::map<std::string, Tensor>& optimizer, const nlohmann::json& config,
                                     const std::string& tokenizer_path = "");
// Expert parallel with a sharded optimizer (and the above, which calls it): one process's checkpoint
// gathered from pieces. Every rank of `comm` calls it with the pieces of one process's model and
// optimizer files it contributes (together they cover each tensor once; optim::TensorPiece,
// DistributedAdamW::state_pieces); `config` and `tokenizer_path` are rank 0's. Rank 0 writes the
// files, assembling each tensor from its own pieces and those it receives from their ranks as it
// writes it, so no rank ever holds more than one tensor of the others' states. It loads with any
// --expert-model-parallel-size, any sharding strategy and any number of ranks. Returns on every rank
// of `comm` once the checkpoint is published; a failure on any rank (a NaN, an unwritable disk)
// throws tidal::Error on every rank naming the rank, and leaves the previous checkpoint current.
void save_gathered_checkpoint(dist::Communicator& comm, const std::string& dir, const TrainingState& state,
                              const std::vector<optim::TensorPiece>& model,
                              const std::vector<optim::TensorPiece>& optimizer, const nlohmann::json& config,
                              const std::string& tokenizer_path = "");
// What rank `rank` of an expert-parallel group contributes of a whole file's tensors `all` (its model
// or its one-process AdamW's state_dict): everything on rank 0, each other rank its experts (the rest
// is rank 0's too), each tensor whole.
std::vector<optim::TensorPiece> expert_contribution(const std::map<std::string, Tensor>& all, int rank);
// Reads the latest complete checkpoint under `dir`, verifying every file's size and CRC-32 (a
// sharded optimizer's files: their presence and sizes; load_optimizer_shard checks the CRC-32 of
// those it reads); throws tidal::Error naming the file and what is wrong. `keep`, when given: only
// the model's and the optimizer's tensors it accepts are read (expert parallel: models::held_here).
Checkpoint load_checkpoint(const std::string& dir, const std::function<bool(const std::string&)>& keep = {});
// Saved rank `rank`'s optimizer shard of `c` (shards.ranks > 0): its AdamW state_dict, after
// checking the file's CRC-32 and that it is the shard the layout says.
std::map<std::string, Tensor> load_optimizer_shard(const Checkpoint& c, int rank);
// --save DIR before the first step: created if needed, its writability probed (a file created and
// removed), and what a killed save left removed: partial iter_N.tmp-* directories and tracker
// temporaries (nothing else is touched). Returns the names removed, for the log; throws naming --save.
std::vector<std::string> prepare_save_dir(const std::string& dir);
// The iteration the tracker file names, or -1 when `dir` has no checkpoint.
int64_t latest_iteration(const std::string& dir);

}  // namespace tidal::checkpoint
