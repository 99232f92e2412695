#pragma once
// What `tidal train` builds before its first step (trainer.h): the data, the model with its memory
// features applied, AdamW (swapped or not) and its schedule, the data loader, and the state a --load
// resumes. The step is step.h, what the run prints and writes is report.h.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tidal/checkpoint/rank_state.h"
#include "tidal/data/gpt_dataset.h"
#include "tidal/data/tokenizer.h"
#include "tidal/dist/communicator.h"
#include "tidal/memory/offload.h"
#include "tidal/models/causal_lm.h"
#include "tidal/optim/adamw.h"
#include "tidal/optim/distributed_adamw.h"
#include "tidal/optim/lr_schedule.h"
#include "tidal/parallel/grad_sync.h"
#include "tidal/parallel/groups.h"
#include "tidal/parallel/param_gather.h"
#include "tidal/train/arguments.h"
#include "tidal/train/main_grads.h"
#include "tidal/train/update.h"

namespace tidal::train {

struct TrainingData {
  std::shared_ptr<const data::TokenDataset> train, valid;  // valid: null without a validation split
  std::optional<data::Tokenizer> tokenizer;                // none with --mock-data
  std::string tokenizer_path;
  std::string description;        // "PREFIX (N documents, M tokens; split 98,2,0)", for the log and the metrics
  int64_t variable_multiple = 0;  // --variable-seq-lengths: batches padded to their longest sample (DataLoader)
};

// Members are made in this order and unmade in reverse: the groups outlive everything that
// communicates; the offloader, whose runner the model calls, finishes its copies before the model goes.
struct Setup {
  // Reads the training split from its first sample.
  Setup(std::unique_ptr<parallel::ParallelGroups> groups, TrainingData data, int64_t micro_batches, Device device);

  // The run's parallel layout on its ranks, and their communicators (parallel/groups.h).
  std::unique_ptr<parallel::ParallelGroups> groups;
  TrainingData data;
  std::unique_ptr<models::CausalLM> model;
  std::unique_ptr<memory::Offloader> offloader;  // null without --activation-offload
  std::unique_ptr<optim::AdamW> optimizer;       // the swap optimizer with --swap-optimizer
  optim::LrSchedule schedule;
  data::DataLoader loader;
  int64_t start = 0;  // the iteration a --load resumed from (0 without one)
  // Every setting with the resolved model and the data, as --metrics-json and checkpoints record them.
  nlohmann::json settings;
  int64_t micro_batches = 1;  // per rank and step: global batch / (micro-batch × data-parallel ranks)
  // --use-distributed-optimizer: the gradient buffer, shards and collectives; `optimizer` then
  // updates this rank's shard only. Null without sharding.
  std::unique_ptr<optim::DistributedAdamW> sharded;
  // ZeRO-3 with LoRA: the frozen base's shards (a DistributedAdamW that never steps: no gradients, no AdamW
  // states); null otherwise.
  std::unique_ptr<optim::DistributedAdamW> frozen;
  // Sums the gradients over the ranks (parallel/grad_sync.h); after `sharded`, so it goes first (its
  // hooks and stream refer to the model's parameters and `sharded`).
  std::unique_ptr<parallel::GradSync> grad_sync;
  // ZeRO-3: gathers each layer's parameters when it computes (parallel/param_gather.h); null otherwise.
  std::unique_ptr<parallel::ParamGather> param_gather;
  // --bf16: the f32 sums of the bf16 gradients (train/main_grads.h); null otherwise.
  std::unique_ptr<MainGrads> main_grads;
  // The step's norm, clipping, AdamW update and cleared gradients for this layout (train/update.h).
  std::unique_ptr<OptimizerStep> update;
  // What this rank saves of a checkpoint and reads back from one (checkpoint/rank_state.h).
  std::unique_ptr<checkpoint::RankState> checkpoint;
  // LoRA (--lora-*): adapter_config.json's document, written with each checkpoint; null without LoRA.
  nlohmann::json adapter_config;
  // Where the model lives: cpu, or meta for a dry run (dry_run.h), whose step feeds meta batches.
  Device device = Device::cpu();

  const parallel::ParallelLayout& layout() const { return groups->layout(); }
  // All the ranks (one without mpirun): the gradients are summed over them.
  dist::Communicator& comm() const { return groups->world(); }
  // The end-of-document id packed sequences split at: the tokenizer's, or with --mock-data the last id
  // of the vocabulary (Megatron's mock tokenizer's EOD), which random tokens hit at a rate of 1/V.
  int64_t eod() const { return data.tokenizer ? data.tokenizer->eod_id() : model->config().vocab_size - 1; }
};

// Loads the data (the tokenizer's vocabulary goes into `config`), validates `config`, resets the
// allocators' peaks, builds everything seeded with --seed and resumes from --load. Prints the
// built-in corpus's and the resume's lines to `out`. Every rank of `comm` runs it alike. `device`
// meta builds the model without values and resets the meta allocator's peaks instead (dry_run.h).
Setup setup_training(const TrainArgs& args, models::ModelConfig& config, std::FILE* out, dist::Communicator& comm,
                     Device device = Device::cpu());

}  // namespace tidal::train
