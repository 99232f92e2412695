#pragma once
// `tidal train` settings, with Megatron-LM's flag names (docs/training.md lists them all). The model
// comes from --model PRESET or --config config.json, and any architecture flag overrides a field.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tidal/base/flags.h"
#include "tidal/checkpoint/format.h"
#include "tidal/device.h"
#include "tidal/memory/memory_config.h"
#include "tidal/models/config.h"
#include "tidal/ops/attention.h"
#include "tidal/optim/adamw.h"
#include "tidal/optim/lr_schedule.h"
#include "tidal/parallel/layout.h"
#include "tidal/profile/profiler.h"
#include "tidal/train/lora_args.h"
#include "tidal/train/packed_batch.h"
#include "tidal/train/precision.h"

namespace tidal::train {

// MindSpeed-LLM pads a --variable-seq-lengths batch to a multiple of 32 (DataCollatorForSeq2Seq's
// pad_to_multiple_of); tidal rounds the trained length T to it.
inline constexpr int64_t kVariableSeqMultiple = 32;

struct TrainArgs {
  models::ModelConfig model;  // resolved: preset/config + overrides (vocab from the tokenizer)
  // Megatron-LM's --mtp-loss-scaling-factor: the multi-token-prediction depths' losses (model.mtp_num_layers,
  // --mtp-num-layers) are added to the main loss as this factor / depths x their sum.
  double mtp_loss_scaling_factor = 0.1;
  std::string model_source;  // "preset NAME", "config PATH" or "pretrained DIR" [": SHAPE" after size flags]
  std::string pretrained;    // a Hugging Face model directory to start from (config and weights)
  // data
  std::vector<std::string> data_path;  // Megatron indexed-dataset prefixes (several: a blend)
  std::vector<double> data_weights;    // the blend's weights as given; empty: one prefix, or weights by size
  std::string tokenizer;               // tokenizer.json
  std::string split = "98,2,0";        // train, validation, test weights (by document)
  bool mock_data = false;
  // --reset-position-ids, --reset-attention-mask, --eod-mask-loss: packed documents (train/packed_batch.h)
  PackedSequences packing;
  bool builtin_corpus = false;  // no data given: the fortunes corpus of the main job
  // --is-instruction-dataset: --data-path is PREFIX of PREFIX_packed_{input_ids,labels}_document (MindSpeed's
  // instruction data, data/instruction_dataset.h); --variable-seq-lengths pads each micro-batch only to its
  // longest sample, rounded up to a multiple of 32 (kVariableSeqMultiple).
  bool is_instruction_dataset = false;
  bool variable_seq_lengths = false;
  // batch and schedule
  int64_t seq_length = 256;
  int64_t micro_batch_size = 8;
  int64_t global_batch_size = 8;
  bool global_batch_given = false;  // --global-batch-size was given (else default_global_batch decides)
  int64_t train_iters = 600;
  // --lr, --min-lr, --lr-warmup-iters, --lr-decay-iters (0: --train-iters), --lr-decay-style; its
  // train_iters is --train-iters.
  optim::LrSchedule schedule{2e-3, 2e-4, 0, 60, 0, 600, optim::LrDecayStyle::cosine};
  // --lr, --weight-decay (not on biases and norms), --adam-beta1, --adam-beta2, --adam-eps.
  optim::AdamWOptions adamw{2e-3, 0.9, 0.95, 1e-8, 0.1};
  double clip_grad = 1.0;
  // the NaN/Inf guard (train/nan_guard.h): --no-check-for-nan-in-loss-and-grad, --skip-nonfinite-steps
  bool check_for_nan = true;
  bool skip_nonfinite_steps = false;
  uint64_t seed = 1234;
  // --device cpu|cuda|cuda:N: where the model, its batches, gradients and optimizer states live (the
  // trainer selects it before building anything: DeviceRuntime::select). tidal plan has no such flag
  // (its --device names a device profile) and plans on the meta device.
  Device device = Device::cpu();
  AttentionKernel attention = AttentionKernel::flash;  // --attention
  // --save, --save-interval, --load, --exit-on-missing-checkpoint (checkpoint/format.h)
  checkpoint::CheckpointOptions checkpoint;
  // logging, evaluation
  int64_t log_interval = 20;
  int64_t eval_interval = 200;
  int64_t eval_iters = 10;
  std::string metrics_json;
  // --tensorboard-dir DIR (Megatron-LM's TensorBoard flags; io/tensorboard.h): rank 0 writes an event file of
  // the step log's scalars every tensorboard_log_interval steps, the validation loss, and with the
  // --log-*-to-tensorboard switches memory, validation perplexity and the iteration time.
  struct Tensorboard {
    std::string dir;  // "": none
    int64_t log_interval = 1;
    bool memory = false, validation_ppl = false, timers = false;
  } tensorboard;
  bool progress = true;        // a progress bar when stdout is a terminal
  bool report_memory = false;  // print the saved-tensor table of the first step
  // --exit-signal-handler (Megatron-LM's): on SIGTERM, save (with --save) at the end of the step and stop.
  bool exit_signal_handler = false;
  // --exit-interval N and --exit-duration-in-mins M (Megatron-LM's; train/graceful_stop.h): save (with --save)
  // and stop with exit 0 after an iteration that is a multiple of N, or once M minutes have passed since the
  // run started (every rank agreeing). 0: off.
  int64_t exit_interval = 0;
  double exit_duration_minutes = 0;
  // --auto-memory [--auto-memory-budget BYTES] [--device-profile NAME|FILE]: train with tidal plan's
  // choice (plan/auto_memory.h); the budget 0: the device's limit.
  bool auto_memory = false;
  int64_t auto_memory_budget = 0;
  std::string device_profile;
  // --recompute-*, --activation-offload / --offload-*, --loss-compute-mode / --loss-chunk-size,
  // --swap-optimizer[-times] (train/memory_flags.h; validated against the model)
  memory::MemoryConfig memory;
  // --use-distributed-optimizer / --data-parallel-sharding-strategy / --overlap-grad-reduce /
  // --ddp-bucket-size / --overlap-param-gather / --expert-model-parallel-size / --context-parallel-size
  // (parallel/layout.h). Its world is the ranks the run is for: run_training binds it to the
  // communicator's, tidal plan to --data-parallel-size.
  parallel::ParallelLayout parallel;
  // --lora-*: LoRA fine-tuning (train/lora_args.h, nn/lora.h)
  LoraArgs lora;
  // --bf16: mixed precision (train/precision.h)
  PrecisionConfig precision;
  std::string sample_prompt;  // printed sample at the end ("" : none)
  int64_t sample_tokens = 0;
  // --profile DIR [--profile-steps A:B] (docs/profiling.md); steps 0: the default window (train/profiling.h)
  profile::ProfileOptions profile;

  int64_t grad_accumulation_steps() const { return global_batch_size / micro_batch_size; }
  // Without --global-batch-size, Megatron's default for the ranks `parallel` is bound to: micro-batch x
  // data-parallel ranks (no accumulation). Called wherever the world is bound (on(), the trainer, tidal plan).
  void default_global_batch() {
    if (!global_batch_given) global_batch_size = micro_batch_size * parallel.data();
  }
  // These settings on `ranks` ranks (parallel::ParallelLayout::on: C must divide them).
  TrainArgs on(int ranks) const {
    TrainArgs a = *this;
    a.parallel = parallel.on(ranks);
    a.default_global_batch();
    return a;
  }
  // Every resolved setting, for metrics and checkpoints.
  nlohmann::json to_json() const;
};

// --device of `command` ("tidal train", "tidal generate") as a Device, cpu when absent: a bad name is
// an error naming the command, and meta is refused with `meta_refusal` (what the command needs values for).
Device run_device(const Flags& f, const std::string& command, const std::string& meta_refusal);

// The flag table of `tidal train` (for parsing and help); `command` names it in errors (tidal plan
// declares its own flags on the same table).
Flags train_flags(const std::string& command = "train");
// Parses and validates; throws tidal::Error naming the flag and what is wrong.
TrainArgs parse_train_args(const std::vector<std::string>& argv);
// The same from a table parsed already (train_flags, with a caller's flags taken out: Flags::take).
TrainArgs train_args(const Flags& parsed);

}  // namespace tidal::train
