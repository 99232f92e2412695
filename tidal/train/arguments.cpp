#include "tidal/train/arguments.h"

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "tidal/base/error.h"
#include "tidal/memory/estimator.h"
#include "tidal/memory_stats.h"
#include "tidal/profile/profiler.h"
#include "tidal/train/memory_flags.h"

namespace tidal::train {

namespace {

// The model: a preset, a config or a pretrained directory, and its shape.
Flags& add_model_flags(Flags& f) {
  return f.option("model", "a built-in model preset (tidal presets lists them)", "NAME")
      .option(
          "config",
          "a Hugging Face config.json (model_type gpt2, llama, mistral, qwen2, qwen3, qwen3_moe, gemma3_text, gemma3, "
          "deepseek_v3, deepseek_v4)",
          "FILE")
      .option("pretrained", "start from a Hugging Face model directory (config.json + safetensors weights)", "DIR")
      .option("num-layers", "number of transformer layers", "N")
      .option("hidden-size", "hidden size", "N")
      .option("ffn-hidden-size", "MLP hidden size (with --hidden-size: 4 x hidden, or Megatron's 8/3 rule for SwiGLU)",
              "N")
      .option("moe-ffn-hidden-size", "expert MLP hidden size of MoE models (default with --ffn-hidden-size: it)", "N")
      .option("moe-expert-capacity-factor",
              "MoE token dropping: each expert takes at most ceil(tokens x top-k / experts x F) slots (default: no "
              "capacity, nothing dropped)",
              "F")
      .option("moe-token-drop-policy",
              "which slots an expert over capacity keeps: probs (the highest weights, "
              "default) or position (the earliest)",
              "probs|position")
      .flag("moe-pad-expert-input-to-capacity", "every expert runs exactly its capacity of rows (zero-weight padding)")
      .flag("moe-router-enable-expert-bias",
            "after each step move every router's correction bias towards balance (DeepSeek-V3's aux-loss-free "
            "balancing; default: the bias stays as loaded)")
      .option("moe-router-bias-update-rate", "the bias's step with --moe-router-enable-expert-bias (default 1e-3)", "R")
      .option("mtp-num-layers",
              "multi-token prediction (deepseek_v3): train N MTP depths, depth k predicting the token k + 1 ahead "
              "(default 0; a checkpoint's own MTP layers load when N covers them)",
              "N")
      .option("mtp-loss-scaling-factor", "the MTP losses' weight: factor / N x their sum (default 0.1)", "F")
      .option("num-attention-heads", "attention heads", "N")
      .option("num-query-groups", "key/value heads (grouped-query attention)", "N")
      .option("kv-channels", "head dimension (default with --hidden-size or --num-attention-heads: hidden / heads)",
              "N")
      .flag("group-query-attention", "accepted for Megatron compatibility (--num-query-groups enables GQA)")
      .option("max-position-embeddings", "maximum sequence length the model supports", "N")
      .option("vocab-size", "vocabulary size (with --mock-data; otherwise the tokenizer's)", "N")
      .option("attention", "attention kernel: flash (default) or eager", "KIND")
      .option("hidden-dropout", "dropout on the residual branches", "P")
      .option("attention-dropout", "dropout on the attention probabilities", "P");
}

// The data and the batch.
Flags& add_data_flags(Flags& f) {
  return f
      .multi("data-path",
             "a Megatron indexed dataset: PREFIX.bin and PREFIX.idx (tidal prepare writes them); several blend: "
             "W1 PREFIX1 W2 PREFIX2 ... (Megatron's weighted blend), or PREFIX1 PREFIX2 ... (weights by size)",
             "PREFIX")
      .option("tokenizer", "tokenizer.json (Hugging Face format)", "FILE")
      .option("split", "train,validation,test weights over documents (default 98,2,0)", "A,B,C")
      .flag("mock-data", "seeded random tokens instead of a corpus (needs --vocab-size or a model preset)")
      .flag("reset-position-ids", "packed documents: positions restart after each EOD token")
      .flag("reset-attention-mask", "packed documents: attention never crosses an EOD token")
      .flag("eod-mask-loss", "no loss on the token after each EOD (the next document's first)")
      .flag("neat-pack",
            "instruction data packed with tidal prepare --neat-pack: the attention-mask file's sample indices, not "
            "EOD tokens, separate the samples of a pack (with --reset-attention-mask)")
      .flag("is-instruction-dataset",
            "--data-path is instruction data: PREFIX_packed_input_ids_document and PREFIX_packed_labels_document "
            "(tidal prepare --handler-name); only the labelled (assistant) tokens are trained")
      .flag("variable-seq-lengths",
            "instruction data: pad each micro-batch to its longest sample (rounded up to a multiple of 32), not "
            "to --seq-length")
      .option("seq-length", "tokens per sample", "N")
      .option("micro-batch-size", "samples per forward/backward", "N")
      .option("global-batch-size",
              "samples per optimizer step, a multiple of --micro-batch-size x data-parallel ranks (default: that "
              "product, no accumulation)",
              "N")
      .option("train-iters", "optimizer steps", "N");
}

// The optimizer, its learning rate schedule, clipping and the NaN guard.
Flags& add_optimizer_flags(Flags& f) {
  return f.option("lr", "peak learning rate", "LR")
      .option("min-lr", "learning rate at the end of the decay", "LR")
      .option("lr-warmup-iters", "linear warmup steps", "N")
      .option("lr-decay-iters", "steps of decay (default: --train-iters)", "N")
      .option("lr-decay-style", "cosine (default), linear or constant", "STYLE")
      .option("weight-decay", "decoupled weight decay (not applied to biases and norms)", "WD")
      .option("adam-beta1", "AdamW beta1", "B1")
      .option("adam-beta2", "AdamW beta2", "B2")
      .option("adam-eps", "AdamW epsilon", "EPS")
      .option("clip-grad", "clip the global gradient norm to this (0: off)", "NORM")
      .flag("check-for-nan-in-loss-and-grad",
            "stop when the loss or the gradient norm is NaN or infinite, before the optimizer step (the default)")
      .flag("no-check-for-nan-in-loss-and-grad", "do not check the loss and the gradients for NaN and infinity")
      .flag("skip-nonfinite-steps",
            "skip (do not apply) a step whose loss or gradient norm is not finite, instead of "
            "stopping; skipped steps are logged and counted");
}

// The run: seed, checkpoints, logging, evaluation, metrics and --auto-memory.
Flags& add_run_flags(Flags& f) {
  return f.option("seed", "random seed (initialization, data order, dropout)", "N")
      .option("save", "directory to save checkpoints to", "DIR")
      .option("load", "directory to resume from (its latest checkpoint; none there: start fresh, with a warning)",
              "DIR")
      .flag("exit-on-missing-checkpoint", "with --load: a directory without a complete checkpoint is an error")
      .option("save-interval", "save every N steps (default: only at the end)", "N")
      .option("log-interval", "print a log line every N steps", "N")
      .option("eval-interval", "evaluate on the validation split every N steps (0: never)", "N")
      .option("eval-iters", "validation batches per evaluation", "N")
      .option("metrics-json", "keep a JSON file of settings, per-step metrics and the summary", "FILE")
      .option("tensorboard-dir",
              "write TensorBoard event files there: loss, learning rate, grad norm, batch size, throughput, "
              "validation (created if missing)",
              "DIR")
      .option("tensorboard-log-interval", "with --tensorboard-dir: every N steps (default 1)", "N")
      .flag("log-memory-to-tensorboard", "with --tensorboard-dir: device memory, and each category's peak")
      .flag("log-validation-ppl-to-tensorboard", "with --tensorboard-dir: the validation perplexity too")
      .flag("log-timers-to-tensorboard", "with --tensorboard-dir: the iteration time too")
      .flag("no-progress", "no progress bar")
      .flag("report-memory", "print the table of tensors saved for backward in the first step")
      .flag("exit-signal-handler",
            "on SIGTERM (a scheduler's notice), save a checkpoint at the end of the current step (with --save) and "
            "stop with exit 0")
      .option("exit-interval",
              "save a checkpoint (with --save) and stop with exit 0 after an iteration that is a multiple of N "
              "(Megatron's; 0: off)",
              "N")
      .option("exit-duration-in-mins",
              "save a checkpoint (with --save) and stop with exit 0 after the first iteration that ends more than M "
              "minutes after the start (Megatron's; every rank agrees; 0: off)",
              "M")
      .flag("auto-memory",
            "train with tidal plan's choice: the memory flags, micro-batch and sharding that fit the device's memory "
            "and train fastest (they replace the given ones; docs/planning.md)")
      .option("auto-memory-budget", "with --auto-memory: the device memory to fit (default: TIDAL_DEVICE_MEMORY)",
              "BYTES")
      .option("device-profile",
              "with --auto-memory: the device profile that times the candidates, a built-in name or a file of "
              "tidal plan --calibrate (default: that file if it exists, else a quick calibration)",
              "NAME|FILE");
}

}  // namespace

Device run_device(const Flags& f, const std::string& command, const std::string& meta_refusal) {
  if (!f.has("device")) return Device::cpu();
  Device device;
  try {
    device = Device::parse(f.str("device"));
  } catch (const Error& e) {
    detail::throw_error(detail::str_cat(command, ": --device: ", e.what()));
  }
  TIDAL_CHECK(!device.is_meta(), command, ": --device meta ", meta_refusal);
  return device;
}

Flags train_flags(const std::string& command) {
  Flags f(command);
  add_model_flags(f);
  add_data_flags(f);
  add_optimizer_flags(f);
  add_run_flags(f);
  // tidal plan's own --device names a device profile (plan_cmd.cpp), and it plans on the meta device.
  if (command != "plan") f.option("device", "where to train: cpu (default), cuda or cuda:N", "cpu|cuda|cuda:N");
  add_memory_flags(f);
  add_precision_flags(f);
  add_lora_flags(f);
  parallel::add_parallel_flags(f)
      .option("sample-prompt", "text to continue with the trained model at the end", "TEXT")
      .option("sample-tokens", "tokens to generate for the sample (default 64 with a prompt)", "N")
      .option("profile",
              "profile some steps into DIR: Chrome trace, memory timeline and report, plots (docs/profiling.md)", "DIR")
      .option("profile-steps", "the iterations to profile, A:B or A (default: the second step of the run)", "A:B");
  return f;
}

namespace {

// The parts of parse_train_args after the model, in the order it calls them; defined below it, so the
// function reads first.
void parse_data(const Flags& f, TrainArgs& a);
void parse_batch_and_schedule(const Flags& f, TrainArgs& a);
void parse_optimizer(const Flags& f, TrainArgs& a);
void parse_outputs(const Flags& f, TrainArgs& a);
void parse_profile(const Flags& f, TrainArgs& a);
void parse_sample(const Flags& f, TrainArgs& a);

int64_t override_int(const Flags& f, const char* name, int64_t current, int64_t lo, int64_t hi) {
  return f.integer(name, current, lo, hi);
}

// Note [Derived sizes]: a size flag replaces the preset's (or config.json's) value; the sizes Megatron-LM derives
// from it are derived again by Megatron's rules, not kept from the preset (megatron/training/arguments.py,
// validate_args: ffn_hidden_size, kv_channels; moe_ffn_hidden_size):
//   ffn-hidden-size      with --hidden-size: 4 * hidden (GPT-2's GELU MLP); SwiGLU (llama, qwen3):
//                        int((4 * hidden * 2 / 3) / 64) * 64, the parameters of a 4 * hidden MLP, a multiple of 64
//   moe-ffn-hidden-size  with a new ffn-hidden-size (given or derived): the same
//   kv-channels          (head_dim) with --hidden-size or --num-attention-heads: hidden / heads
// The key/value heads stay the preset's unless --num-query-groups is given (Megatron derives them from nothing).
// --moe-expert-capacity-factor F (Megatron-LM's; models/moe.h): F > 0 and finite, for MoE models only;
// --moe-token-drop-policy and --moe-pad-expert-input-to-capacity only with it.
void parse_moe_capacity(const Flags& f, models::ModelConfig& m) {
  const bool policy = f.has("moe-token-drop-policy"), pad = f.flag_on("moe-pad-expert-input-to-capacity");
  if (!f.has("moe-expert-capacity-factor")) {
    TIDAL_CHECK(!policy && !pad, "tidal train: --",
                policy ? "moe-token-drop-policy" : "moe-pad-expert-input-to-capacity",
                " needs --moe-expert-capacity-factor (without a capacity no token is dropped)");
    return;
  }
  TIDAL_CHECK(m.is_moe(), "tidal train: --moe-expert-capacity-factor is for MoE models (e.g. --model tiny-qwen3-moe); ",
              "the model (", m.model_type, ") has no experts");
  TIDAL_CHECK(!m.is_deepseek_v4(), "tidal train: --moe-expert-capacity-factor is not supported for deepseek_v4 yet ",
              "(its MoE runs every routed slot, as transformers' does): leave it out");
  m.moe_expert_capacity_factor = f.number("moe-expert-capacity-factor", 0, 0, 1e6);
  TIDAL_CHECK(m.moe_expert_capacity_factor > 0, "tidal train: --moe-expert-capacity-factor must be > 0, got ",
              m.moe_expert_capacity_factor, " (leave it out for no capacity)");
  const std::string name = f.str("moe-token-drop-policy", "probs");
  TIDAL_CHECK(name == "probs" || name == "position", "tidal train: --moe-token-drop-policy must be probs or position, ",
              "got '", name, "'");
  m.moe_token_drop_policy =
      name == "probs" ? models::ModelConfig::DropPolicy::probs : models::ModelConfig::DropPolicy::position;
  m.moe_pad_expert_input_to_capacity = pad;
}

// --moe-router-enable-expert-bias [--moe-router-bias-update-rate R] (Megatron-LM's): for models whose routers
// have a correction bias (deepseek_v3; deepseek_v4's top-k layers); R > 0 and finite, default 1e-3.
void parse_expert_bias(const Flags& f, models::ModelConfig& m) {
  if (!f.flag_on("moe-router-enable-expert-bias")) {
    TIDAL_CHECK(!f.has("moe-router-bias-update-rate"),
                "tidal train: --moe-router-bias-update-rate needs --moe-router-enable-expert-bias");
    return;
  }
  TIDAL_CHECK(m.router_expert_bias, "tidal train: --moe-router-enable-expert-bias is for models whose routers have ",
              "a correction bias (deepseek_v3 and deepseek_v4, e.g. --model tiny-deepseek-v3); ", m.model_type,
              "'s have none");
  m.moe_router_bias_update_rate = f.number("moe-router-bias-update-rate", 1e-3, 0, 1e6);
  TIDAL_CHECK(m.moe_router_bias_update_rate > 0, "tidal train: --moe-router-bias-update-rate must be > 0, got ",
              m.moe_router_bias_update_rate, " (leave out --moe-router-enable-expert-bias to keep the bias)");
}

void derive_sizes(const Flags& f, models::ModelConfig& m) {
  constexpr int64_t kBig = int64_t(1) << 40;
  int64_t ffn = m.intermediate_size;
  if (f.has("hidden-size")) ffn = m.is_gpt2() ? 4 * m.hidden_size : 4 * m.hidden_size * 2 / 3 / 64 * 64;
  TIDAL_CHECK(ffn > 0 || f.has("ffn-hidden-size"), "tidal train: --hidden-size ", m.hidden_size, " leaves no SwiGLU ",
              "width by Megatron's rule (8/3 x hidden, rounded down to a multiple of 64): give --ffn-hidden-size");
  m.intermediate_size = override_int(f, "ffn-hidden-size", ffn, 1, kBig);
  if (m.is_moe() && (f.has("hidden-size") || f.has("ffn-hidden-size"))) m.moe_intermediate_size = m.intermediate_size;
  m.moe_intermediate_size = override_int(f, "moe-ffn-hidden-size", m.moe_intermediate_size, 1, kBig);
  TIDAL_CHECK(m.is_moe() || !f.has("moe-ffn-hidden-size"), "tidal train: --moe-ffn-hidden-size is for MoE models");
  TIDAL_CHECK(!m.is_mla() || !f.has("kv-channels"), "tidal train: --kv-channels is not for ", m.model_type,
              ": multi-head latent attention's heads are qk_nope_head_dim + qk_rope_head_dim wide (its config.json)");
  if (!m.is_mla() && (f.has("hidden-size") || f.has("num-attention-heads"))) m.head_dim = 0;  // hidden / heads
  m.head_dim = override_int(f, "kv-channels", m.head_dim, 1, kBig);
  TIDAL_CHECK(!m.is_gpt2() || !f.has("kv-channels") || m.head_dim * m.num_attention_heads == m.hidden_size,
              "tidal train: gpt2's heads split the hidden size: --kv-channels must be hidden / heads");
  // Heads that do not divide the hidden size or are no multiple of the key/value heads are the model's
  // validate()'s to report, when training builds it.
}

// Every value given goes into JSON (checkpoints' state.json, --metrics-json), which holds UTF-8 only:
// a path that is not valid UTF-8 is refused now, not at the first save after hours of training.
void check_encodable(const Flags& f) {
  for (const std::string& name : f.given())
    for (const std::string& value : f.strs(name)) {
      bool ok = true;
      try {
        (void)nlohmann::json(value).dump();
      } catch (const nlohmann::json::type_error&) {
        ok = false;
      }
      TIDAL_CHECK(ok, "tidal train: --", name, " is not valid UTF-8: tidal records its settings in JSON ",
                  "(checkpoints, --metrics-json), which cannot hold it; rename the path");
    }
}

// "12 layers, hidden 768, ffn 3072, 12 heads of 64 (4 key/value)": the shape the size flags gave.
std::string shape_of(const models::ModelConfig& m) {
  return detail::str_cat(m.num_hidden_layers, " layers, hidden ", m.hidden_size, ", ffn ", m.intermediate_size,
                         m.is_moe() ? detail::str_cat(" (experts ", m.moe_intermediate_size, ")") : std::string(), ", ",
                         m.num_attention_heads, " heads of ", m.head_size(), " (", m.kv_heads(), " key/value)");
}

}  // namespace

TrainArgs parse_train_args(const std::vector<std::string>& argv) {
  Flags f = train_flags();
  f.parse(argv);
  return train_args(f);
}

TrainArgs train_args(const Flags& f) {
  check_encodable(f);
  TrainArgs a;
  TIDAL_CHECK(int(f.has("model")) + int(f.has("config")) + int(f.has("pretrained")) <= 1,
              "tidal train: --model, --config and --pretrained conflict: give one of them");
  if (f.has("pretrained")) {
    a.pretrained = f.str("pretrained");
    a.model = models::load_config(a.pretrained + "/config.json");
    a.model_source = "pretrained " + a.pretrained;
  } else if (f.has("config")) {
    a.model = models::load_config(f.str("config"));
    a.model_source = "config " + f.str("config");
  } else {
    const std::string name = f.str("model", "small-gpt2");
    a.model = models::preset(name);
    a.model_source = "preset " + name;
  }
  models::ModelConfig& m = a.model;
  constexpr int64_t kBig = int64_t(1) << 40;
  m.set_num_layers(override_int(f, "num-layers", m.num_hidden_layers, 1, 100000));
  m.hidden_size = override_int(f, "hidden-size", m.hidden_size, 1, kBig);
  m.num_attention_heads = override_int(f, "num-attention-heads", m.num_attention_heads, 1, 100000);
  m.num_key_value_heads = override_int(f, "num-query-groups", m.kv_heads(), 1, 100000);
  derive_sizes(f, m);  // ffn, moe ffn and head sizes (Note [Derived sizes])
  parse_moe_capacity(f, m);
  parse_expert_bias(f, m);
  m.mtp_num_layers = f.integer("mtp-num-layers", 0, 0, 64);
  TIDAL_CHECK(m.mtp_num_layers > 0 || !f.has("mtp-loss-scaling-factor"),
              "tidal train: --mtp-loss-scaling-factor needs --mtp-num-layers");
  a.mtp_loss_scaling_factor = f.number("mtp-loss-scaling-factor", 0.1, 0.0, 1e6);
  for (const char* size : {"num-layers", "hidden-size", "ffn-hidden-size", "moe-ffn-hidden-size", "num-attention-heads",
                           "num-query-groups", "kv-channels"})
    if (f.has(size)) {
      a.model_source += ": " + shape_of(m);  // tidal train prints it beside the parameter count
      break;
    }
  m.max_position_embeddings = override_int(f, "max-position-embeddings", m.max_position_embeddings, 1, kBig);
  m.hidden_dropout = f.number("hidden-dropout", m.hidden_dropout, 0.0, 0.99);
  m.attention_dropout = f.number("attention-dropout", m.attention_dropout, 0.0, 0.99);

  parse_data(f, a);
  parse_batch_and_schedule(f, a);
  parse_optimizer(f, a);
  a.seed = uint64_t(f.integer("seed", int64_t(a.seed), 0, int64_t(1) << 62));
  const std::string attention = f.str("attention", "flash");
  TIDAL_CHECK(attention == "flash" || attention == "eager", "tidal train: --attention must be flash or eager, got '",
              attention, "'");
  a.attention = attention == "eager" ? AttentionKernel::eager : AttentionKernel::flash;
  parse_outputs(f, a);
  a.memory = parse_memory_config(f, m);
  a.parallel = parallel::parse_parallel_layout(f);
  a.precision = parse_precision(f);
  a.lora = parse_lora_args(f);
  TIDAL_CHECK(!a.lora.enabled() || a.lora.config.dropout == 0 || a.parallel.context == 1,
              "tidal train: --lora-dropout with --context-parallel-size ", a.parallel.context,
              " is not supported (each rank would draw its own mask): use --lora-dropout 0");
  TIDAL_CHECK(
      m.mtp_num_layers == 0 || !a.packing.any(),
      "tidal train: --mtp-num-layers with --reset-position-ids, --reset-attention-mask or --eod-mask-loss is not "
      "supported yet (the MTP depths' rolls would cross the documents of a packed sequence)");
  m.torch_dtype = a.precision.torch_dtype();  // what the checkpoint's config.json says its weights are
  a.progress = !f.flag_on("no-progress");
  parse_profile(f, a);
  parse_sample(f, a);
  // Sizes from flags that overflow 64-bit byte counts are an error now, not a wrapped allocation later.
  memory::check_step_sizes(a.model, a.micro_batch_size, a.seq_length, a.attention);
  parallel::check_context_parallel(a.parallel, a.seq_length);
  // A variable-length batch's T is a multiple of 32 (or --seq-length): each CP rank still needs two equal chunks.
  TIDAL_CHECK(!a.variable_seq_lengths || kVariableSeqMultiple % (2 * a.parallel.context) == 0,
              "tidal train: --variable-seq-lengths rounds T to a multiple of ", kVariableSeqMultiple,
              ", which 2 x --context-parallel-size ", a.parallel.context, " does not divide");
  return a;
}

namespace {

// The bound of sizes and counts that have none of their own.
constexpr int64_t kMaxSize = int64_t(1) << 40;

// Megatron's --data-path forms: PREFIX; W1 PREFIX1 W2 PREFIX2 ... (a weighted blend); PREFIX1 PREFIX2 ... (a
// blend weighted by the datasets' sizes).
void parse_data_paths(const std::vector<std::string>& v, TrainArgs& a) {
  a.data_path.clear();
  a.data_weights.clear();
  if (v.size() <= 1) {
    a.data_path = v;
    return;
  }
  const auto number = [](const std::string& t, double& out) {
    char* end = nullptr;
    out = std::strtod(t.c_str(), &end);
    return !t.empty() && end == t.c_str() + t.size();
  };
  double w = 0;
  if (!number(v[0], w)) {  // prefixes only: weights by size
    for (const std::string& p : v)
      TIDAL_CHECK(!number(p, w), "tidal train: --data-path mixes prefixes and weights ('", p, "'): give W1 PREFIX1 ",
                  "W2 PREFIX2 ... or PREFIX1 PREFIX2 ...");
    a.data_path = v;
    return;
  }
  TIDAL_CHECK(v.size() % 2 == 0, "tidal train: --data-path with weights takes pairs W1 PREFIX1 W2 PREFIX2 ..., got ",
              v.size(), " values");
  for (size_t i = 0; i < v.size(); i += 2) {
    TIDAL_CHECK(number(v[i], w) && w > 0 && std::isfinite(w), "tidal train: --data-path weight '", v[i], "' (before ",
                v[i + 1], ") must be a positive number");
    a.data_weights.push_back(w);
    a.data_path.push_back(v[i + 1]);
  }
}

// --data-path, --tokenizer, --split, --mock-data (with --vocab-size), else the built-in corpus.
void parse_data(const Flags& f, TrainArgs& a) {
  parse_data_paths(f.strs("data-path"), a);
  a.tokenizer = f.str("tokenizer");
  a.split = f.str("split", a.split);
  a.mock_data = f.flag_on("mock-data");
  TIDAL_CHECK(!(a.mock_data && !a.data_path.empty()), "tidal train: --mock-data and --data-path conflict: give one");
  TIDAL_CHECK(a.data_path.empty() || !a.tokenizer.empty(), "tidal train: --data-path needs --tokenizer FILE (the ",
              "tokenizer.json the data was prepared with)");
  if (f.has("vocab-size")) {
    TIDAL_CHECK(a.mock_data, "tidal train: --vocab-size is only for --mock-data (otherwise the tokenizer decides)");
    a.model.vocab_size = f.integer("vocab-size", a.model.vocab_size, 2, kMaxSize);
  }
  a.builtin_corpus = !a.mock_data && a.data_path.empty();
  a.packing = {f.flag_on("reset-position-ids"), f.flag_on("reset-attention-mask"), f.flag_on("eod-mask-loss"),
               f.flag_on("neat-pack")};
  a.is_instruction_dataset = f.flag_on("is-instruction-dataset");
  a.variable_seq_lengths = f.flag_on("variable-seq-lengths");
  TIDAL_CHECK(!a.is_instruction_dataset || !a.data_path.empty(), "tidal train: --is-instruction-dataset needs ",
              "--data-path PREFIX (the --output-prefix of tidal prepare --handler-name)");
  TIDAL_CHECK(!a.variable_seq_lengths || a.is_instruction_dataset, "tidal train: --variable-seq-lengths is for ",
              "instruction data (--is-instruction-dataset): pretraining samples are all --seq-length long");
  TIDAL_CHECK(!(a.is_instruction_dataset && a.packing.eod_mask_loss), "tidal train: --eod-mask-loss is for ",
              "pretraining data; instruction data's labels already say which tokens are trained");
  TIDAL_CHECK(!a.packing.neat_pack || a.is_instruction_dataset, "tidal train: --neat-pack is for instruction data ",
              "packed by tidal prepare --pack --neat-pack: add --is-instruction-dataset");
  TIDAL_CHECK(!a.packing.neat_pack || a.packing.reset_attention_mask, "tidal train: --neat-pack needs ",
              "--reset-attention-mask (as MindSpeed-LLM: the pack's sample indices separate attention), and ",
              "--reset-position-ids to restart positions at each sample");
  TIDAL_CHECK(!(a.builtin_corpus && !a.tokenizer.empty()), "tidal train: --tokenizer needs --data-path (the data it",
              " tokenized); without --data-path tidal trains on its built-in corpus with its own tokenizer");
}

// Sequence length, micro and global batch, iterations and the learning-rate schedule.
void parse_batch_and_schedule(const Flags& f, TrainArgs& a) {
  a.seq_length = f.integer("seq-length", a.seq_length, 1, kMaxSize);
  a.micro_batch_size = f.integer("micro-batch-size", a.micro_batch_size, 1, kMaxSize);
  // Default: no accumulation, micro-batch x data-parallel ranks once the world is bound (default_global_batch).
  a.global_batch_given = f.has("global-batch-size");
  a.global_batch_size = f.integer("global-batch-size", a.micro_batch_size, 1, kMaxSize);
  TIDAL_CHECK(a.global_batch_size % a.micro_batch_size == 0, "tidal train: --global-batch-size ", a.global_batch_size,
              " must be a multiple of --micro-batch-size ", a.micro_batch_size);
  TIDAL_CHECK(a.seq_length <= a.model.max_position_embeddings, "tidal train: --seq-length ", a.seq_length,
              " exceeds the model's max position embeddings ", a.model.max_position_embeddings,
              " (raise --max-position-embeddings)");
  a.train_iters = f.integer("train-iters", a.train_iters, 0, kMaxSize);
  optim::LrSchedule& s = a.schedule;
  s.train_iters = a.train_iters;
  s.lr = f.number("lr", s.lr, 0.0, 10.0);
  s.min_lr = f.number("min-lr", std::min(s.min_lr, s.lr), 0.0, 10.0);
  TIDAL_CHECK(s.min_lr <= s.lr, "tidal train: --min-lr ", s.min_lr, " is above --lr ", s.lr);
  s.warmup_iters = f.integer("lr-warmup-iters", std::min(s.warmup_iters, a.train_iters / 10), 0, kMaxSize);
  s.decay_iters = f.integer("lr-decay-iters", s.decay_iters, 0, kMaxSize);
  const int64_t decay = s.decay_iters > 0 ? s.decay_iters : a.train_iters;
  TIDAL_CHECK(s.warmup_iters == 0 || s.warmup_iters < decay, "tidal train: --lr-warmup-iters ", s.warmup_iters,
              " must be below the decay length ", decay, " (--lr-decay-iters, else --train-iters)");
  const std::string style = f.str("lr-decay-style", "cosine");
  TIDAL_CHECK(style == "cosine" || style == "linear" || style == "constant",
              "tidal train: --lr-decay-style must be cosine, linear or constant, got '", style, "'");
  s.style = optim::parse_lr_decay_style(style);
  a.adamw.lr = s.lr;  // what AdamW::step() without an argument would use; training passes lr_at's
}

// AdamW's weight decay, betas and epsilon, and gradient clipping.
void parse_optimizer(const Flags& f, TrainArgs& a) {
  optim::AdamWOptions& o = a.adamw;
  o.weight_decay = f.number("weight-decay", o.weight_decay, 0.0, 10.0);
  o.beta1 = f.number("adam-beta1", o.beta1, 0.0, 0.999999);
  o.beta2 = f.number("adam-beta2", o.beta2, 0.0, 0.999999);
  o.eps = f.number("adam-eps", o.eps, 0.0, 1.0);
  // eps 0 divides by sqrt(v) = 0 wherever a gradient is 0 (an unused embedding row): NaN weights.
  TIDAL_CHECK(o.eps > 0, "tidal train: --adam-eps must be > 0, got ", o.eps,
              ": AdamW divides by sqrt(v) + eps, and a parameter whose gradient is 0 would become NaN (Megatron's "
              "default is 1e-8)");
  a.clip_grad = f.number("clip-grad", a.clip_grad, 0.0, 1e9);
  TIDAL_CHECK(!(f.flag_on("check-for-nan-in-loss-and-grad") && f.flag_on("no-check-for-nan-in-loss-and-grad")),
              "tidal train: --check-for-nan-in-loss-and-grad and --no-check-for-nan-in-loss-and-grad conflict");
  a.check_for_nan = !f.flag_on("no-check-for-nan-in-loss-and-grad");
  a.skip_nonfinite_steps = f.flag_on("skip-nonfinite-steps");
  TIDAL_CHECK(a.check_for_nan || !a.skip_nonfinite_steps, "tidal train: --skip-nonfinite-steps needs the check that ",
              "finds them: drop --no-check-for-nan-in-loss-and-grad");
}

// Checkpoints, logging, evaluation, --metrics-json and --report-memory.
void parse_outputs(const Flags& f, TrainArgs& a) {
  checkpoint::CheckpointOptions& c = a.checkpoint;
  c.save = f.str("save");
  c.load = f.str("load");
  c.exit_on_missing = f.flag_on("exit-on-missing-checkpoint");
  TIDAL_CHECK(!c.exit_on_missing || !c.load.empty(), "tidal train: --exit-on-missing-checkpoint needs --load DIR");
  c.save_interval = f.integer("save-interval", c.save_interval, 0, kMaxSize);
  TIDAL_CHECK(c.save_interval == 0 || !c.save.empty(), "tidal train: --save-interval needs --save DIR");
  a.log_interval = f.integer("log-interval", a.log_interval, 1, kMaxSize);
  a.eval_interval = f.integer("eval-interval", a.eval_interval, 0, kMaxSize);
  a.eval_iters = f.integer("eval-iters", a.eval_iters, 1, kMaxSize);
  a.metrics_json = f.str("metrics-json");
  TrainArgs::Tensorboard& tb = a.tensorboard;
  tb.dir = f.str("tensorboard-dir");
  tb.log_interval = f.integer("tensorboard-log-interval", tb.log_interval, 1, kMaxSize);
  tb.memory = f.flag_on("log-memory-to-tensorboard");
  tb.validation_ppl = f.flag_on("log-validation-ppl-to-tensorboard");
  tb.timers = f.flag_on("log-timers-to-tensorboard");
  for (const char* flag : {"tensorboard-log-interval", "log-memory-to-tensorboard", "log-validation-ppl-to-tensorboard",
                           "log-timers-to-tensorboard"})
    TIDAL_CHECK(!f.has(flag) || !tb.dir.empty(), "tidal train: --", flag, " needs --tensorboard-dir DIR");
  a.report_memory = f.flag_on("report-memory");
  a.exit_signal_handler = f.flag_on("exit-signal-handler");
  a.exit_interval = f.integer("exit-interval", a.exit_interval, 0, kMaxSize);
  a.exit_duration_minutes = f.number("exit-duration-in-mins", a.exit_duration_minutes, 0, 1e9);
  a.auto_memory = f.flag_on("auto-memory");
  if (f.has("auto-memory-budget")) {
    TIDAL_CHECK(a.auto_memory, "tidal train: --auto-memory-budget needs --auto-memory");
    a.auto_memory_budget = parse_bytes(f.str("auto-memory-budget"));
    TIDAL_CHECK(a.auto_memory_budget > 0, "tidal train: --auto-memory-budget must be positive, got '",
                f.str("auto-memory-budget"), "'");
  }
  a.device = run_device(f, "tidal train",
                        "has no values to train: the meta device is tidal plan --dry-run's; give cpu, cuda or cuda:N");
  a.device_profile = f.str("device-profile");
  TIDAL_CHECK(a.auto_memory || a.device_profile.empty(), "tidal train: --device-profile needs --auto-memory");
}

// --profile DIR [--profile-steps A:B] (after --train-iters, which the window must not start past).
void parse_profile(const Flags& f, TrainArgs& a) {
  a.profile.dir = f.str("profile");
  if (!f.has("profile-steps")) return;
  TIDAL_CHECK(!a.profile.dir.empty(), "tidal train: --profile-steps needs --profile DIR");
  std::tie(a.profile.first_step, a.profile.last_step) = profile::parse_step_range(f.str("profile-steps"));
  TIDAL_CHECK(a.profile.first_step <= a.train_iters, "tidal train: --profile-steps ", f.str("profile-steps"),
              " starts after the last iteration (--train-iters ", a.train_iters, ")");
}

// --sample-prompt and --sample-tokens; the built-in corpus samples after "The" unless told otherwise.
void parse_sample(const Flags& f, TrainArgs& a) {
  a.sample_prompt = f.str("sample-prompt");
  a.sample_tokens = f.integer("sample-tokens", a.sample_prompt.empty() ? 0 : 64, 0, 100000);
  if (a.builtin_corpus && !f.has("sample-prompt")) {
    a.sample_prompt = "The";
    a.sample_tokens = f.integer("sample-tokens", 64, 0, 100000);
  }
}

}  // namespace

nlohmann::json TrainArgs::to_json() const {
  nlohmann::json j;
  j["model"] = models::config_to_json(model);
  j["model_source"] = model_source;
  if (model.moe_expert_capacity_factor > 0)
    j["moe_capacity"] = {
        {"factor", model.moe_expert_capacity_factor},
        {"drop_policy", model.moe_token_drop_policy == models::ModelConfig::DropPolicy::probs ? "probs" : "position"},
        {"pad_to_capacity", model.moe_pad_expert_input_to_capacity}};
  j["pretrained"] = pretrained;
  j["data_path"] = data_path;
  if (!data_weights.empty()) j["data_weights"] = data_weights;
  j["tokenizer"] = tokenizer;
  j["split"] = split;
  j["mock_data"] = mock_data;
  j["reset_position_ids"] = packing.reset_position_ids;
  j["reset_attention_mask"] = packing.reset_attention_mask;
  j["eod_mask_loss"] = packing.eod_mask_loss;
  j["neat_pack"] = packing.neat_pack;
  j["builtin_corpus"] = builtin_corpus;
  j["is_instruction_dataset"] = is_instruction_dataset;
  j["variable_seq_lengths"] = variable_seq_lengths;
  j["seq_length"] = seq_length;
  j["micro_batch_size"] = micro_batch_size;
  j["global_batch_size"] = global_batch_size;
  j["grad_accumulation_steps"] = grad_accumulation_steps();
  j["train_iters"] = train_iters;
  j["lr"] = schedule.lr;
  j["min_lr"] = schedule.min_lr;
  j["lr_warmup_iters"] = schedule.warmup_iters;
  j["lr_decay_iters"] = schedule.decay_iters > 0 ? schedule.decay_iters : train_iters;
  j["lr_decay_style"] = optim::lr_decay_style_name(schedule.style);
  j["weight_decay"] = adamw.weight_decay;
  j["adam_beta1"] = adamw.beta1;
  j["adam_beta2"] = adamw.beta2;
  j["adam_eps"] = adamw.eps;
  j["clip_grad"] = clip_grad;
  parallel::to_json(j, parallel);
  j["bf16"] = precision.bf16;
  if (lora.enabled())
    j["lora"] = {{"target_modules", lora.config.target_modules},
                 {"r", lora.config.r},
                 {"alpha", lora.config.alpha},
                 {"dropout", lora.config.dropout},
                 {"use_rslora", lora.config.use_rslora},
                 {"load", lora.load}};
  j["check_for_nan_in_loss_and_grad"] = check_for_nan;
  j["skip_nonfinite_steps"] = skip_nonfinite_steps;
  j["seed"] = seed;
  j["device"] = device.str();
  j["attention"] = name(attention);
  j["auto_memory"] = auto_memory;
  j["save"] = checkpoint.save;
  j["load"] = checkpoint.load;
  j["exit_on_missing_checkpoint"] = checkpoint.exit_on_missing;
  j["save_interval"] = checkpoint.save_interval;
  j["log_interval"] = log_interval;
  j["eval_interval"] = eval_interval;
  j["eval_iters"] = eval_iters;
  j["exit_signal_handler"] = exit_signal_handler;
  j["exit_interval"] = exit_interval;
  j["exit_duration_in_mins"] = exit_duration_minutes;
  const memory::OffloadConfig& offload = memory.offload;
  j["recompute"] = memory.recompute.to_json();
  j["offload"] = {{"enabled", offload.enabled},
                  {"policy", memory::name(offload.policy)},
                  {"target", memory::name(offload.target)},
                  {"dir", offload.dir},
                  {"prefetch_depth", offload.prefetch_depth},
                  {"host_limit", offload.host_limit}};
  j["loss_compute_mode"] = memory.loss.chunked ? "chunk" : "default";
  j["loss_chunk_size"] = memory.loss.chunk_size;
  j["swap_optimizer"] = memory.swap_optimizer.on;
  j["swap_optimizer_times"] = memory.swap_optimizer.times;
  j["profile"] = {{"dir", profile.dir}, {"first_step", profile.first_step}, {"last_step", profile.last_step}};
  return j;
}

}  // namespace tidal::train
