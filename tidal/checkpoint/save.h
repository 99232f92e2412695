#pragma once
// Writing a checkpoint (format.h), one writer whatever the run's layout: a checkpoint is files of
// tensors, each file written by one rank, each tensor assembled from pieces that ranks hold (an
// expert's weight on its owner, a moment's pieces on the ranks that shard it, a whole tensor on one
// rank). Every rank lists the same files in the same order with the pieces it contributes; a file's
// writer assembles each tensor from its own pieces and those it receives from their ranks as it
// writes it, so no rank holds more than one tensor of the others' at a time. What pieces a training
// run contributes is rank_state.h's.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tidal/checkpoint/format.h"
#include "tidal/dist/communicator.h"
#include "tidal/optim/shard_state.h"
#include "tidal/tensor.h"

namespace tidal::checkpoint {

// One file of tensors: its name in the checkpoint's directory, the rank that writes it, its
// safetensors metadata, and this rank's pieces of its tensors (over every rank, each tensor's pieces
// cover it once).
struct FilePieces {
  std::string name;
  int writer = 0;
  std::map<std::string, std::string> metadata;
  std::vector<optim::TensorPiece> pieces;
};

// What a save writes: the files of tensors (the model's first) and state.json's extra fields
// (the sharded optimizer's layout).
struct CheckpointFiles {
  std::vector<FilePieces> files;
  nlohmann::json record = nlohmann::json::object();
  // Small text files rank 0 writes beside config.json (a LoRA run's adapter_config.json): name -> content.
  std::map<std::string, std::string> texts;
};

// One process's files, written by rank 0: model.safetensors (Hugging Face names) and
// optimizer.safetensors (one process's AdamW state_dict), from this rank's pieces of them.
CheckpointFiles one_process_files(std::vector<optim::TensorPiece> model, std::vector<optim::TensorPiece> optimizer);
// The distributed optimizer's files: model.safetensors (rank 0) and one file per rank of `shards`
// with that rank's AdamW state_dict as it is; `state` is this rank's (`rank` of shards.ranks).
CheckpointFiles sharded_files(std::vector<optim::TensorPiece> model, const std::map<std::string, Tensor>& state,
                              const OptimizerShards& shards, int rank);
// Every tensor of `tensors` as one whole piece.
std::vector<optim::TensorPiece> whole_pieces(const std::map<std::string, Tensor>& tensors);

// Writes `files` as the checkpoint of `state.iteration` under `dir` (created if needed), with
// config.json and (when given) a copy of `tokenizer_path`, which rank 0 writes after the model's file.
// Every rank of `comm` calls it. Refuses (tidal::Error naming the tensor) a model or optimizer tensor
// holding a NaN or an infinity. Returns on every rank once the checkpoint is published; a failure on
// any rank (a NaN, an unwritable or full disk, a directory a writer does not see) throws tidal::Error
// on every rank naming the rank (on one rank: the error itself), and leaves the previous checkpoint
// current.
void save_checkpoint(dist::Communicator& comm, const std::string& dir, const TrainingState& state,
                     const CheckpointFiles& files, const nlohmann::json& config,
                     const std::string& tokenizer_path = "");
// One process's checkpoint from whole tensors: the model's and one process's AdamW state_dict.
void save_checkpoint(const std::string& dir, const TrainingState& state, const std::map<std::string, Tensor>& model,
                     const std::map<std::string, Tensor>& optimizer, const nlohmann::json& config,
                     const std::string& tokenizer_path = "");

}  // namespace tidal::checkpoint
