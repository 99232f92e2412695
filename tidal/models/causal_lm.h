#pragma once
// A decoder-only language model: token ids (B, T) -> logits (B, T, V). GPT-2 and the Llama family
// (llama, qwen3, qwen3_moe) implement it with Hugging Face parameter names, so their safetensors
// checkpoints load. Layers run through a LayerRunner, which recompute policies replace.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tidal/models/config.h"
#include "tidal/models/core_attention.h"
#include "tidal/models/layer_recompute.h"
#include "tidal/nn/layers.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/documents.h"

namespace tidal::models {

class Router;

struct ModelOutput {
  Tensor hidden;    // (B, T, C) final normalized hidden states (the LM head's input)
  Tensor logits;    // (B, T, V), undefined from forward_hidden()
  Tensor aux_loss;  // MoE load-balancing loss (0-dim), undefined for dense models
  // Multi-token prediction (models/mtp.h), when the forward was given its ids: depth k's output h_k (B, T, C)
  // after its shared_head.norm, the LM head's input for the token k + 1 places ahead.
  std::vector<Tensor> mtp_hidden;
};

// The input ids of each multi-token-prediction depth k = 1..D: the ids rolled left by k along the sequence, 0
// rolled in (Megatron's roll_tensor), each (B, T) i64 like the ids (under context parallelism this rank's rows).
using MtpIds = std::vector<Tensor>;

// One transformer layer as a function of its inputs ({hidden} for dense layers).
using LayerFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
// Runs layer `index`: the default calls fn(inputs); a recompute policy may wrap it in a checkpoint.
using LayerRunner =
    std::function<std::vector<Tensor>(int64_t index, const LayerFn& fn, const std::vector<Tensor>& inputs)>;

// Called around every layer's forward, also when a recompute replays it: ZeRO-3 gathers a layer's
// parameters before its forward and frees them after (parallel/param_gather.h).
class LayerParamHooks {
 public:
  virtual ~LayerParamHooks() = default;
  virtual void before_layers(const Tensor& input) = 0;  // input (B, T, C) enters layer 0
  virtual void before_layer(int64_t layer) = 0;
  virtual void after_layer(int64_t layer, const Tensor& output) = 0;
};

class CausalLM : public nn::Module {
 public:
  explicit CausalLM(ModelConfig config, std::shared_ptr<dist::Communicator> experts = nullptr)
      : config_(std::move(config)), experts_(std::move(experts)) {}
  const ModelConfig& config() const { return config_; }
  // Expert parallelism: the ranks the MoE layers divide their experts among (create_model's
  // `experts`); null: every expert is here.
  dist::Communicator* expert_parallel() const { return experts_.get(); }

  // ids (B, T) i64 -> hidden states after the final norm, and the MoE auxiliary loss. docs: packed
  // sequences (ops/documents.h): starts (B, T) i32 keep attention within each document
  // (--reset-attention-mask), positions (B, T) i32 restart RoPE or learned positions at each document
  // (--reset-position-ids); either may be undefined. Under context parallelism both hold this rank's
  // tokens (document_layout's rows), the starts in global positions.
  // mtp: the ids of the model's mtp_num_layers depths (train/mtp_batch.h), or none to run the main model alone.
  ModelOutput forward_hidden(const Tensor& ids, const DocumentLayout& docs = {}, const MtpIds& mtp = {}) const;
  // The LM head weight (V, C) (the embedding when tied).
  virtual const Tensor& lm_head_weight() const = 0;
  // The routers of the MoE layers, in layer order (none for a dense model).
  virtual std::vector<Router*> routers() const { return {}; }
  // The expert-bias update (--moe-router-enable-expert-bias) of every MoE layer's correction bias from the loads
  // its forwards counted, summed over `group` (models/moe.h update_expert_biases). Default: the routers'.
  virtual void update_expert_biases(dist::Communicator& group) const;
  // forward_hidden + the LM head: logits (B, T, V), accounted as MemoryCategory::logits (the MTP depths'
  // hidden states are left to the loss).
  ModelOutput forward(const Tensor& ids, const DocumentLayout& docs = {}, const MtpIds& mtp = {}) const;

  // Loads a Hugging Face state dict, accepting the naming variants of published checkpoints
  // (GPT-2 without the "transformer." prefix, attention-mask buffers, a tied lm_head copy, a multimodal
  // Gemma 3's language_model.* names). Returns what it left out on purpose.
  struct LoadReport {
    int64_t vision_tensors = 0;  // a multimodal Gemma 3's vision tower and projector
    int64_t mtp_tensors = 0;     // DeepSeek-V3's multi-token-prediction layers the model does not build
  };
  LoadReport load_hf_state_dict(std::map<std::string, Tensor> state);

  void set_layer_runner(LayerRunner runner) { runner_ = std::move(runner); }
  // nullptr removes them; the hooks must outlive the forwards and backwards that use them.
  void set_layer_param_hooks(LayerParamHooks* hooks) { param_hooks_ = hooks; }
  // The decoder layer a parameter (by its name in named_parameters) belongs to; -1 for those outside
  // the layers (embeddings, final norm, LM head).
  int64_t layer_of_parameter(const std::string& name) const;
  // Activation recompute, one entry per layer (layer_recompute.h; memory/recompute.h computes it); empty:
  // keep every activation.
  void set_recompute(std::vector<LayerRecompute> plan);
  const std::vector<LayerRecompute>& recompute_plan() const { return plan_; }
  void set_attention_kernel(AttentionKernel k) { attention_kernel_ = k; }
  AttentionKernel attention_kernel() const { return attention_kernel_; }
  // Context parallelism: every sample's tokens given to forward are this rank's two chunks of the
  // sequence (parallel/context.h) and attention runs around the ring of `cp`, which must
  // outlive the forwards and backwards, as `overlap`, a duplicate of it over which the K/V blocks
  // move while attention computes (null: blocking exchanges); cp nullptr: the whole sequence.
  void set_context_parallel(dist::Communicator* cp, dist::Communicator* overlap = nullptr) {
    cp_ = cp;
    cp_overlap_ = overlap;
  }
  dist::Communicator* context_parallel() const { return cp_; }
  CoreAttention core_attention(const Tensor& documents = Tensor()) const {
    return {attention_kernel_, cp_, cp_overlap_, documents};
  }

 protected:
  // forward_hidden of the family, after its inputs are checked.
  virtual ModelOutput hidden_states(const Tensor& ids, const DocumentLayout& docs, const MtpIds& mtp) const = 0;
  // The whole sequence's length for ids (batch, seq) of this rank (attn: context parallelism's chunks),
  // checked against max_position_embeddings (GPT-2's n_positions).
  int64_t checked_sequence_length(const Tensor& ids, const CoreAttention& attn) const;
  std::vector<Tensor> run_layer(int64_t index, const LayerFn& fn, const std::vector<Tensor>& inputs) const;
  // Runs every layer on x (B, T, C): layer_fn(l, {h}) returns {h', extras...}. Layers under full
  // recompute run in checkpointed groups. Returns the final h; the extras of each layer are appended
  // to `extras` in layer order.
  using IndexedLayerFn = std::function<std::vector<Tensor>(int64_t, const std::vector<Tensor>&)>;
  Tensor run_layers(Tensor x, const IndexedLayerFn& layer_fn, std::vector<std::vector<Tensor>>* extras) const;
  // The plan entry of layer l (a default, all-off entry when there is no plan).
  const LayerRecompute& recompute_of(int64_t l) const;
  ModelConfig config_;
  std::vector<LayerRecompute> plan_;

 private:
  std::shared_ptr<dist::Communicator> experts_;
  LayerRunner runner_;
  LayerParamHooks* param_hooks_ = nullptr;
  AttentionKernel attention_kernel_ = AttentionKernel::flash;
  dist::Communicator* cp_ = nullptr;
  dist::Communicator* cp_overlap_ = nullptr;
};

// Builds the model of config.model_type with freshly initialized parameters (HF's init: normal
// with initializer_range, GPT-2's residual projections scaled by 1/sqrt(2 * layers), norms at 1).
// Parameters are created with init.dtype on init.device (meta: shapes and accounting only).
// `experts` (expert parallelism, parallel/groups.h): the ranks each MoE layer divides its experts
// among; this rank builds its block of them (models/moe.h). Null: every expert, as one process.
std::unique_ptr<CausalLM> create_model(const ModelConfig& config, const nn::Init& init = {},
                                       std::shared_ptr<dist::Communicator> experts = nullptr);

// Mean cross-entropy of next-token prediction: logits (B, T, V) against targets (B, T) (ignore_index
// -100), plus coef * aux_loss when the model produced one.
Tensor causal_lm_loss(const ModelOutput& out, const Tensor& targets, double aux_coef);

}  // namespace tidal::models
