#include "tidal/models/causal_lm.h"

#include <cstring>

#include "tidal/autograd/checkpoint.h"
#include "tidal/memory_scope.h"
#include "tidal/models/deepseek_v4.h"
#include "tidal/models/deepseek_v4_checkpoint.h"
#include "tidal/models/gemma3.h"
#include "tidal/models/gpt2.h"
#include "tidal/models/llama.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/matmul.h"

namespace tidal::models {

ModelOutput CausalLM::forward_hidden(const Tensor& ids, const DocumentLayout& docs, const MtpIds& mtp) const {
  const char* op = config_.model_type.c_str();
  if (docs.starts.defined()) check_documents(op, docs.starts, 0, ids.size(0), ids.size(1), ids);
  const Tensor& pos = docs.positions;
  TIDAL_CHECK(
      !pos.defined() || (pos.shape() == ids.shape() && pos.dtype() == DType::i32 && pos.device() == ids.device()), "[",
      op, "] positions must be (B, T) i32 like the ids ", ids.shape(), " on ", ids.device(), ", got ", pos.shape(), " ",
      pos.dtype(), " on ", pos.device());
  TIDAL_CHECK(mtp.empty() || int64_t(mtp.size()) == config_.mtp_num_layers, "[", op, "] ", mtp.size(),
              " multi-token-prediction inputs for a model of ", config_.mtp_num_layers, " MTP depths");
  for (const Tensor& m : mtp)
    TIDAL_CHECK(m.shape() == ids.shape() && m.dtype() == ids.dtype() && m.device() == ids.device(), "[", op,
                "] each MTP depth's ids must be like the ids ", ids.shape(), " ", ids.dtype(), ", got ", m.shape(), " ",
                m.dtype());
  return hidden_states(ids, docs, mtp);
}

ModelOutput CausalLM::forward(const Tensor& ids, const DocumentLayout& docs, const MtpIds& mtp) const {
  ModelOutput out = forward_hidden(ids, docs, mtp);
  OpScope op("lm_head");
  MemoryScope scope(MemoryCategory::logits);
  out.logits = lm_head(out.hidden, lm_head_weight());  // (B, T, V)
  return out;
}

std::vector<Tensor> CausalLM::run_layer(int64_t index, const LayerFn& fn, const std::vector<Tensor>& inputs) const {
  LayerScope layer(static_cast<int>(index));
  return runner_ ? runner_(index, fn, inputs) : fn(inputs);
}

void CausalLM::set_recompute(std::vector<LayerRecompute> plan) {
  TIDAL_CHECK(plan.empty() || int64_t(plan.size()) == config_.num_hidden_layers, "[recompute] a plan of ", plan.size(),
              " layers for a model of ", config_.num_hidden_layers);
  plan_ = std::move(plan);
}

const LayerRecompute& CausalLM::recompute_of(int64_t l) const {
  static const LayerRecompute none;
  return plan_.empty() ? none : plan_[size_t(l)];
}

Tensor CausalLM::run_layers(Tensor x, const IndexedLayerFn& layer_fn, std::vector<std::vector<Tensor>>* extras) const {
  const int64_t layers = config_.num_hidden_layers;
  // What a layer returns besides h: a sparse MoE layer its router statistics (prob_sum, counts); DeepSeek-V4's
  // layers none (it trains without the auxiliary loss).
  auto extras_of = [this](int64_t j) -> int64_t {
    return config_.is_moe_layer(j) && !config_.is_deepseek_v4() ? 2 : 0;
  };
  LayerParamHooks* hooks = param_hooks_;
  if (hooks != nullptr) hooks->before_layers(x);
  for (int64_t l = 0; l < layers;) {
    const LayerRecompute& rc = recompute_of(l);
    const int64_t group = rc.full && rc.group_start ? rc.group_size : 1;
    // One function for the group: layers [l, l + group) chained; returns {h, extras of each layer...}.
    LayerFn fn = [l, group, layer_fn, extras_of, hooks](const std::vector<Tensor>& in) {  // by value: replayed
      std::vector<Tensor> out = {in[0]};
      for (int64_t j = l; j < l + group; ++j) {
        LayerScope scope(static_cast<int>(j));
        if (hooks != nullptr) hooks->before_layer(j);
        std::vector<Tensor> o = layer_fn(j, {out[0]});
        if (hooks != nullptr) hooks->after_layer(j, o[0]);
        TIDAL_ASSERT(o.size() == size_t(1 + extras_of(j)), "layer ", j, " returned ", o.size(), " tensors");
        out[0] = o[0];
        out.insert(out.end(), o.begin() + 1, o.end());
      }
      return out;
    };
    std::vector<Tensor> out;
    if (rc.full) {
      LayerScope scope(static_cast<int>(l));
      out = runner_ ? runner_(l, [&fn](const std::vector<Tensor>& in) { return autograd::checkpoint(fn, in); }, {x})
                    : autograd::checkpoint(fn, {x});
    } else {
      out = run_layer(l, fn, {x});
    }
    x = out[0];
    size_t pos = 1;
    for (int64_t j = l; j < l + group; ++j) {
      const int64_t n = extras_of(j);
      if (extras != nullptr) extras->emplace_back(out.begin() + long(pos), out.begin() + long(pos) + n);
      pos += size_t(n);
    }
    l += group;
  }
  return x;
}

int64_t CausalLM::layer_of_parameter(const std::string& name) const {
  // GPT-2: transformer.h.<l>.…; Llama, Qwen: model.layers.<l>.…
  for (const char* prefix : {"transformer.h.", "model.layers."}) {
    if (!name.starts_with(prefix)) continue;
    const size_t at = std::string(prefix).size(), dot = name.find('.', at);
    if (dot == std::string::npos || dot == at) return -1;
    int64_t l = 0;
    for (size_t i = at; i < dot; ++i) {
      if (name[i] < '0' || name[i] > '9') return -1;
      l = l * 10 + (name[i] - '0');
      if (l >= config_.num_hidden_layers) return -1;
    }
    return l;
  }
  return -1;
}

namespace {

bool same_values(const Tensor& x, const Tensor& y) {
  if (x.shape() != y.shape()) return false;
  const Tensor a = x.to(DType::f32).to(Device::cpu()).contiguous();
  const Tensor b = y.to(DType::f32).to(Device::cpu()).contiguous();
  return std::memcmp(a.raw_data(), b.raw_data(), size_t(a.nbytes())) == 0;
}

// Under tie_word_embeddings the head is the embedding: a file whose own lm_head.weight differs would
// otherwise lose it without a word.
void check_tied_head(const std::map<std::string, Tensor>& state, const Tensor& head) {
  const char* embed_names[] = {"model.embed_tokens.weight", "transformer.wte.weight", "wte.weight",
                               "language_model.model.embed_tokens.weight"};
  for (const char* name : embed_names) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    const Tensor& e = it->second;
    TIDAL_CHECK(same_values(e, head),
                "[model] tie_word_embeddings is true but the checkpoint has its own lm_head.weight ", head.shape(),
                " that differs from ", name, " ", e.shape(),
                ": set tie_word_embeddings to false in config.json to load the head as it is (llama, qwen3), "
                "or drop lm_head.weight from the file to tie it to the embedding");
    return;
  }
}

// The MTP depth (1-based) of a weight of DeepSeek-V3's multi-token prediction modules, saved as the layers after
// the last (model.layers.<num_hidden_layers + depth - 1>.*); 0 for any other name.
int64_t mtp_depth_of(const ModelConfig& c, const std::string& name) {
  const std::string prefix = "model.layers.";
  const int64_t depths = std::max(c.num_nextn_predict_layers, c.mtp_num_layers);
  if (depths <= 0 || !name.starts_with(prefix)) return 0;
  const size_t dot = name.find('.', prefix.size());
  const std::string index =
      name.substr(prefix.size(), dot == std::string::npos ? std::string::npos : dot - prefix.size());
  if (index.empty() || index.size() > 6 || index.find_first_not_of("0123456789") != std::string::npos) return 0;
  const int64_t layer = std::stoll(index);
  return layer >= c.num_hidden_layers && layer < c.num_hidden_layers + depths ? layer - c.num_hidden_layers + 1 : 0;
}

// DeepSeek's published MTP layers repeat the shared embedding and head (model.layers.<n>.embed_tokens.weight,
// .shared_head.head.weight): copies of the main ones, or the file means something tidal does not build.
struct MtpCopy {
  std::string name;
  Tensor copy;
  std::string main_name;  // what it copies
};
void check_mtp_copy(const MtpCopy& c, const std::map<std::string, Tensor>& loaded) {
  auto it = loaded.find(c.main_name);
  TIDAL_CHECK(it == loaded.end() || same_values(c.copy, it->second), "[model] ", c.name, " ", c.copy.shape(),
              " differs from ", c.main_name, " ", it == loaded.end() ? Shape{} : it->second.shape(),
              ": tidal's multi-token prediction shares the main model's embedding and LM head (as DeepSeek-V3 and "
              "Megatron-LM do), so it cannot load an MTP layer with its own");
}

// A multimodal Gemma 3's vision tower and projector, as published (vision_tower.*, multi_modal_projector.*) or
// as transformers 5 names its modules (model.vision_tower.*, model.multi_modal_projector.*).
bool is_vision_weight(const std::string& name) {
  for (const char* prefix :
       {"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."})
    if (name.starts_with(prefix)) return true;
  return false;
}

// Its language model's names: language_model.model.* (published) or model.language_model.* (transformers 5's
// modules) are the text model's model.*; language_model.lm_head.* its lm_head.*.
std::string language_model_name(const std::string& name) {
  for (const char* prefix : {"language_model.model.", "model.language_model."})
    if (name.starts_with(prefix)) return "model." + name.substr(std::string(prefix).size());
  if (name.starts_with("language_model.lm_head.")) return name.substr(std::string("language_model.").size());
  return name;
}

}  // namespace

CausalLM::LoadReport CausalLM::load_hf_state_dict(std::map<std::string, Tensor> state) {
  LoadReport report;
  // DeepSeek's names; under expert parallelism this rank's experts stacked.
  if (config_.is_deepseek_v4()) state = deepseek_v4_from_checkpoint(std::move(state), expert_rows(*this));
  std::map<std::string, Tensor> mine;
  std::map<std::string, bool> ours;
  for (auto& [name, p] : named_parameters()) ours[name] = true;
  std::vector<MtpCopy> copies;
  for (auto& [name, t] : state) {
    std::string key = name;
    if (!ours.count(key) && ours.count("transformer." + key)) key = "transformer." + key;  // GPT2Model naming
    if (config_.is_gemma3()) {  // a multimodal Gemma 3 (Gemma3ForConditionalGeneration): its language model
      if (is_vision_weight(key)) {
        ++report.vision_tensors;
        continue;
      }
      key = language_model_name(key);
    }
    const bool buffer = key.size() > 9 && (key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias"));
    if (buffer) continue;  // GPT-2's causal-mask buffers
    if (const int64_t depth = mtp_depth_of(config_, key); depth > config_.mtp_num_layers) {
      ++report.mtp_tensors;  // MTP modules the model does not build (transformers skips them all)
      continue;
    } else if (depth > 0 && key.ends_with(".embed_tokens.weight")) {
      copies.push_back({key, std::move(t), "model.embed_tokens.weight"});
      continue;
    } else if (depth > 0 && key.ends_with(".shared_head.head.weight")) {
      copies.push_back(
          {key, std::move(t), config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"});
      continue;
    }
    // DeepSeek-V3 without shared experts: transformers builds (and saves) them zero wide.
    if (config_.is_deepseek_v3() && config_.n_shared_experts == 0 && t.numel() == 0 &&
        key.find(".shared_experts.") != std::string::npos)
      continue;
    if (key == "lm_head.weight" && config_.tie_word_embeddings) {  // must be a copy of the embedding
      check_tied_head(state, t);
      continue;
    }
    mine[key] = std::move(t);
  }
  for (const MtpCopy& c : copies) check_mtp_copy(c, mine);
  load_state_dict(mine, /*strict=*/true);
  return report;
}

int64_t CausalLM::checked_sequence_length(const Tensor& ids, const CoreAttention& attn) const {
  const std::string& type = config_.model_type;
  TIDAL_CHECK(ids.dim() == 2, "[", type, "] token ids must be (batch, seq), got ", ids.shape());
  const int64_t t = attn.sequence_length(ids.size(1));
  TIDAL_CHECK(t <= config_.max_position_embeddings, "[", type, "] sequence length ", t, " exceeds ",
              config_.is_gpt2() ? "n_positions " : "max_position_embeddings ", config_.max_position_embeddings);
  return t;
}

std::unique_ptr<CausalLM> create_model(const ModelConfig& config, const nn::Init& init_in,
                                       std::shared_ptr<dist::Communicator> experts) {
  config.validate();
  nn::Init init = init_in;
  init.std = config.initializer_range;
  std::unique_ptr<CausalLM> model;
  TIDAL_CHECK(experts == nullptr || config.is_moe(), "[model] expert parallelism needs a MoE model, not ",
              config.model_type);
  if (config.is_gpt2())
    model = std::make_unique<Gpt2>(config, init);
  else if (config.is_gemma3())
    model = std::make_unique<Gemma3>(config, init);
  else if (config.is_deepseek_v4())
    model = std::make_unique<DeepseekV4>(config, init, std::move(experts));
  else
    model = std::make_unique<Llama>(config, init, std::move(experts));
  model->assign_names();
  return model;
}

void CausalLM::update_expert_biases(dist::Communicator& group) const {
  for (Router* r : routers()) r->update_expert_bias(group);
}

Tensor causal_lm_loss(const ModelOutput& out, const Tensor& targets, double aux_coef) {
  OpScope op("loss");
  const int64_t v = out.logits.size(-1);
  Tensor loss = cross_entropy(out.logits.reshape({-1, v}), targets.reshape({-1}));
  if (out.aux_loss.defined() && aux_coef != 0.0) loss = add(loss, mul(out.aux_loss, aux_coef));
  return loss;
}

}  // namespace tidal::models
