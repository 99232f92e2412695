#include "tidal/models/config_fields.h"

#include <nlohmann/json.hpp>

namespace tidal::models {
namespace {

using json = nlohmann::json;
using detail::FieldReader;

const std::vector<HarmlessField> kCommon = {
    {"transformers_version", "the version of transformers that wrote the file"},
    {"architectures", "the head class's name; tidal builds the causal LM of model_type"},
    {"_name_or_path", "where transformers loaded the model from"},
    {"output_hidden_states", "what transformers' forward returns, not what it computes"},
    {"output_attentions", "what transformers' forward returns, not what it computes"},
    {"return_dict", "what transformers' forward returns, not what it computes"},
    {"use_cache", "the key/value cache of generation: the same logits"},
    {"bos_token_id", "a token id for generation and data preparation, not the model's math"},
    {"eos_token_id", "a token id for generation and data preparation, not the model's math"},
    {"id2label", "labels of sequence-classification heads, which tidal does not build"},
    {"label2id", "labels of sequence-classification heads, which tidal does not build"},
    {"problem_type", "the loss of sequence-classification heads, which tidal does not build"},
    {"chunk_size_feed_forward", "computes the feed-forward in chunks of tokens: the same values"},
    {"is_decoder", "marks the decoder of an encoder-decoder pair; tidal's models are decoders"},
    {"cross_attention_hidden_size", "encoder-decoder only (is_encoder_decoder and add_cross_attention are refused)"},
    {"tie_encoder_decoder", "encoder-decoder only (is_encoder_decoder and add_cross_attention are refused)"},
    {"torchscript", "clones tied weights for TorchScript export: the same values"},
    {"use_bfloat16", "an old TensorFlow/Flax dtype hint; tidal's precision comes from its flags (as for dtype)"},
    {"tf_legacy_loss", "a TensorFlow loss option"},
    {"finetuning_task", "a note of what the model was fine-tuned for"},
    {"task_specific_params", "generation settings per task"},
    {"prefix", "a text prefix for generation prompts"},
    {"tokenizer_class", "the tokenizer's class name (tidal reads tokenizer.json)"},
    {"sep_token_id", "a token id for generation and data preparation, not the model's math"},
    {"decoder_start_token_id", "a token id for generation and data preparation, not the model's math"},
    // 4.x kept generation settings in the model config (5.x: generation_config.json); none is the model's math.
    {"max_length", "a generation setting"},
    {"min_length", "a generation setting"},
    {"do_sample", "a generation setting"},
    {"early_stopping", "a generation setting"},
    {"num_beams", "a generation setting"},
    {"num_beam_groups", "a generation setting"},
    {"diversity_penalty", "a generation setting"},
    {"temperature", "a generation setting"},
    {"top_k", "a generation setting"},
    {"top_p", "a generation setting"},
    {"typical_p", "a generation setting"},
    {"repetition_penalty", "a generation setting"},
    {"length_penalty", "a generation setting"},
    {"no_repeat_ngram_size", "a generation setting"},
    {"encoder_no_repeat_ngram_size", "a generation setting"},
    {"bad_words_ids", "a generation setting"},
    {"num_return_sequences", "a generation setting"},
    {"output_scores", "a generation setting"},
    {"return_dict_in_generate", "a generation setting"},
    {"forced_bos_token_id", "a generation setting"},
    {"forced_eos_token_id", "a generation setting"},
    {"remove_invalid_values", "a generation setting"},
    {"exponential_decay_length_penalty", "a generation setting"},
    {"suppress_tokens", "a generation setting"},
    {"begin_suppress_tokens", "a generation setting"},
};

const std::vector<HarmlessField> kLlama = {
    {"pretraining_tp", "4.x splits each projection into pretraining_tp slices and sums them: the same product"},
};

const std::vector<HarmlessField> kGpt2 = {
    {"pad_token_id", "a token id for generation and data preparation: GPT-2's wte has no padding_idx"},
    {"summary_type", "GPT2DoubleHeadsModel's multiple-choice head, not part of the language model"},
    {"summary_use_proj", "GPT2DoubleHeadsModel's multiple-choice head, not part of the language model"},
    {"summary_activation", "GPT2DoubleHeadsModel's multiple-choice head, not part of the language model"},
    {"summary_proj_to_labels", "GPT2DoubleHeadsModel's multiple-choice head, not part of the language model"},
    {"summary_first_dropout", "GPT2DoubleHeadsModel's multiple-choice head, not part of the language model"},
    {"reorder_and_upcast_attn", "computes the attention scores in f32, as tidal's attention kernels always do"},
    {"n_ctx", "an old copy of n_positions that transformers no longer reads"},
};

// A multimodal Gemma 3's fields beside its text_config (config_gemma3.h read_gemma3_multimodal), listed with
// gemma3_text's since the model read is its language model.
constexpr const char* kImageOnly =
    "an image input's token or the vision tower: text-only training has none (tidal builds the language model)";
const std::vector<HarmlessField> kGemma3 = {
    {"boi_token_index", kImageOnly},
    {"eoi_token_index", kImageOnly},
    {"image_token_index", kImageOnly},
    {"boi_token_id", kImageOnly},
    {"eoi_token_id", kImageOnly},
    {"image_token_id", kImageOnly},
    {"mm_tokens_per_image", kImageOnly},
    {"vision_config", kImageOnly},
    {"_sliding_window_pattern",
     "the layer pattern transformers saved layer_types from; transformers 5 reloads layer_types (and reads "
     "sliding_window_pattern, not this, when they are absent), as tidal does"},
};

const std::vector<HarmlessField> kMoe = {
    {"output_router_logits",
     "whether transformers returns router logits and adds the aux loss to its loss; tidal adds "
     "router_aux_loss_coef x the aux loss in training whatever it says (coefficient 0: none)"},
};

const std::vector<HarmlessField> kDeepseekV3 = {
    {"pretraining_tp", "4.x splits each projection into pretraining_tp slices and sums them: the same product"},
    {"output_router_logits",
     "whether transformers returns the router logits; its DeepseekV3ForCausalLM adds no auxiliary loss either way"},
    {"aux_loss_alpha",
     "DeepSeek's own training code's sequence-wise balance loss weight: transformers' causal LM adds no auxiliary "
     "loss, nor does tidal's (the correction bias balances the experts)"},
    {"seq_aux",
     "switches DeepSeek's own training code's sequence-wise balance loss, which transformers does not compute"},
    {"ep_size", "the expert-parallel size DeepSeek's own code ran with: a layout, not the model's math"},
};

const std::vector<HarmlessField> kDeepseekV4 = {
    {"norm_topk_prob",
     "transformers' DeepseekV4 routers renormalize the chosen weights whatever it says, as tidal's do"},
    {"router_aux_loss_coef",
     "weighs the load-balancing loss transformers adds only with output_router_logits, which tidal refuses"},
};

bool truthy(const json* v) { return v != nullptr && v->is_boolean() && v->get<bool>(); }

}  // namespace

std::vector<HarmlessField> harmless_config_fields(const std::string& model_type) {
  std::vector<HarmlessField> out = kCommon;
  const std::vector<HarmlessField> none;
  const auto& extra = model_type == "gpt2"          ? kGpt2
                      : model_type == "qwen3_moe"   ? kMoe
                      : model_type == "llama"       ? kLlama
                      : model_type == "gemma3_text" ? kGemma3
                      : model_type == "deepseek_v3" ? kDeepseekV3
                      : model_type == "deepseek_v4" ? kDeepseekV4
                                                    : none;
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

namespace detail {

void check_unsupported_fields(const FieldReader& f, const ModelConfig& c) {
  if (truthy(f.find("is_encoder_decoder")))
    f.refuse("is_encoder_decoder", "true", "tidal builds decoder-only causal language models");
  if (truthy(f.find("add_cross_attention")))
    f.refuse("add_cross_attention", "true", "cross-attention to an encoder is not implemented");
  if (const json* p = f.find("pruned_heads"); p != nullptr && !p->empty())
    f.refuse("pruned_heads", p->dump(), "pruned attention heads are not supported (only {})");
  if (const json* q = f.find("quantization_config"))
    f.refuse("quantization_config", q->dump(), "quantized weights are not read: load the unquantized model");
  if (c.is_gpt2()) {
    if (!f.get("scale_attn_weights", true))
      f.refuse("scale_attn_weights", "false", "tidal scales attention scores by 1/sqrt(head_dim) (only true)");
    if (f.get("scale_attn_by_inverse_layer_idx", false))
      f.refuse("scale_attn_by_inverse_layer_idx", "true",
               "scaling each layer's scores by 1/(layer index + 1) is not implemented (only false)");
    const double embd = f.get("embd_pdrop", 0.1);
    if (embd != c.hidden_dropout)
      f.refuse("embd_pdrop", json(embd).dump(),
               tidal::detail::str_cat("tidal's gpt2 drops the embeddings with resid_pdrop (", c.hidden_dropout,
                                      "): make the two equal"));
    if (!c.tie_word_embeddings)
      f.refuse("tie_word_embeddings", "false", "tidal's gpt2 always ties its head to wte (only true)");
    return;
  }
  if (f.get("mlp_bias", false)) f.refuse("mlp_bias", "true", "biases on the MLP projections are not implemented");
}

}  // namespace detail
}  // namespace tidal::models
