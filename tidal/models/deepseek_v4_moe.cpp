#include "tidal/models/deepseek_v4_moe.h"

#include "tidal/memory_scope.h"

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/models/expert_dispatch.h"
#include "tidal/ops/activation.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/grouped_linear.h"
#include "tidal/ops/index.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"
#include "tidal/rng.h"

namespace tidal::models {
namespace {

// A module with the gate's tensors (the parameter "weight", the buffer "e_score_correction_bias" or "tid2eid").
class Gate : public nn::Module {
 public:
  Tensor& parameter(const std::string& name, Tensor t) { return register_parameter(name, std::move(t)); }
  Tensor& buffer(const std::string& name, Tensor t, bool persistent = true) {
    return register_buffer(name, std::move(t), persistent);
  }
  // Rows [row, ...) of a whole tensor of shape `whole` (all of it when the shapes agree).
  Tensor& slab(const std::string& name, Tensor t, const Shape& whole, int64_t row) {
    if (t.shape() == whole) return register_parameter(name, std::move(t));
    return register_slab(name, std::move(t), whole, row);
  }
};

// sqrt(softplus(x)), softplus(x) = max(x, 0) + log(1 + exp(-|x|)) (no overflow for large |x|).
Tensor sqrt_softplus(const Tensor& x) { return sqrt(add(relu(x), log(add(exp(neg(abs(x))), 1.0)))); }

// A fresh model's token -> experts table: slot j of token t goes to expert (t k + j) mod E (k distinct experts
// when k <= E). transformers starts it at zeros and expects the checkpoint's; a checkpoint's replaces this.
Tensor hash_table(int64_t vocab, int64_t k, int64_t experts, const Device& device) {
  std::vector<int64_t> table(size_t(vocab * k));
  for (int64_t t = 0; t < vocab; ++t)
    for (int64_t j = 0; j < k; ++j) table[size_t(t * k + j)] = (t * k + j) % experts;
  return from_vector_i64(table, {vocab, k}).to(device);
}

// Rows [row, row + rows) of a stacked parameter of shape `whole` drawn as normal_parameter(whole) draws them: the
// draws of the rows before and after are skipped (the generator is counter-based), or, when a row's elements do
// not fill whole blocks of 4 draws, the whole tensor is drawn and its rows kept.
Tensor stacked_rows(const Shape& whole, int64_t row, int64_t rows, const nn::Init& init) {
  Shape mine = whole;
  mine[0] = rows;
  if (rows == whole[0]) return nn::normal_parameter(whole, init.std, init);
  const int64_t per_row = whole.numel() / whole[0];
  if (init.device.is_meta()) return nn::normal_parameter(mine, init.std, init);
  if (per_row * row % 4 != 0 || per_row * rows % 4 != 0) {
    TIDAL_CHECK(!init.deferred,
                "[deepseek_v4] expert parallelism with ZeRO-3 needs hidden_size x moe_intermediate_size ",
                "even (each expert's weights a whole number of random blocks)");
    return nn::normal_parameter(whole, init.std, init).narrow(0, row, rows).clone();
  }
  reserve_random(uint64_t(per_row * row));
  Tensor t = nn::normal_parameter(mine, init.std, init);
  reserve_random(uint64_t(per_row * (whole[0] - row - rows)));
  return t;
}

}  // namespace

DeepseekV4Moe::DeepseekV4Moe(const ModelConfig& c, int64_t layer, const nn::Init& init,
                             std::shared_ptr<dist::Communicator> expert_group)
    : experts_(c.num_experts),
      top_k_(c.num_experts_per_tok),
      scaling_(c.routed_scaling_factor),
      limit_(c.v4.swiglu_limit),
      hash_(c.v4.hash_moe[size_t(layer)]),
      group_(std::move(expert_group)) {
  const int64_t d = c.hidden_size, f = c.moe_intermediate_size, e = c.num_experts;
  Gate& gate = register_module("gate", std::make_unique<Gate>());
  gate_ = &gate;
  gate_weight_ = gate.parameter("weight", nn::normal_parameter({e, d}, init.std, init));
  {
    MemoryScope scope(MemoryCategory::parameter);  // buffers of the model: accounted with its parameters
    if (hash_)
      tid2eid_ = gate.buffer("tid2eid", hash_table(c.vocab_size, top_k_, e, init.device));
    else
      bias_ = gate.buffer("e_score_correction_bias", zeros({e}, DType::f32, init.device));
    rate_ = hash_ ? 0.0 : c.moe_router_bias_update_rate;
    if (rate_ > 0) load_ = gate.buffer("tokens_per_expert", zeros({e}, DType::f32, init.device), false);
  }
  const int64_t ranks = group_ ? group_->size() : 1, rank = group_ ? group_->rank() : 0;
  TIDAL_CHECK(e % ranks == 0, "[deepseek_v4] ", ranks, " expert-parallel ranks do not divide the model's ", e,
              " experts (n_routed_experts): pick an --expert-model-parallel-size that divides it");
  const int64_t local = e / ranks, first = rank * local;
  auto& experts = register_module("experts", std::make_unique<Gate>());
  const Shape gate_up{e, 2 * f, d}, down{e, d, f};
  gate_up_ = experts.slab("gate_up_proj", stacked_rows(gate_up, first, local, init), gate_up, first);
  down_ = experts.slab("down_proj", stacked_rows(down, first, local, init), down, first);
  shared_ = &register_module("shared_experts", std::make_unique<SwiGluMlp>(d, f, init, GluActivation::silu, limit_));
}

std::vector<int64_t> DeepseekV4Moe::choose(const Tensor& scores, const Tensor& ids) const {
  const int64_t n = scores.size(0), k = top_k_;
  std::vector<int64_t> chosen(size_t(n * k));
  if (scores.is_meta()) {  // no values: the slots go round the experts
    for (int64_t i = 0; i < n * k; ++i) chosen[size_t(i)] = i % experts_;
    return chosen;
  }
  NoGradGuard no_grad;
  Tensor idx = hash_ ? index_select(tid2eid_, 0, ids.reshape({-1}))  // (N, k)
                     : topk(add(scores, bias_.to(scores.dtype())), k, -1, true, false).indices;
  const Tensor host = idx.to(Device::cpu()).contiguous();
  for (int64_t i = 0; i < n * k; ++i) {
    const int64_t ex = host.data<int64_t>()[i];
    TIDAL_CHECK(ex >= 0 && ex < experts_, "[deepseek_v4] ", gate_->name(), ".tid2eid sends a token to expert ", ex,
                ", not one of the ", experts_, " experts: the checkpoint's table does not fit this config");
    chosen[size_t(i)] = ex;
  }
  return chosen;
}

void DeepseekV4Moe::update_expert_bias(dist::Communicator& group) const {
  if (load_.defined()) update_bias_from_load(bias_, load_, rate_, group);
}

Tensor DeepseekV4Moe::run_local(const Tensor& rows, const std::vector<int64_t>& counts) const {
  const int64_t f = down_.size(2);
  Tensor gate_up = grouped_linear_stacked(rows, counts, gate_up_);  // (R, 2F)
  const std::vector<Tensor> gu = clamp_gate_up(gate_up.narrow(1, 0, f), gate_up.narrow(1, f, f), limit_);
  return grouped_linear_stacked(swiglu(gu[0], gu[1]), counts, down_);  // (R, C)
}

Tensor DeepseekV4Moe::forward(const Tensor& x, const Tensor& ids) const {
  ModuleScope scope(name());  // --report-memory: the router's and the experts' tensors by module
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), n = b * t, k = top_k_;
  Tensor flat = x.reshape({n, d});                                // (N, C)
  Tensor scores = sqrt_softplus(linear(flat, gate_weight_));      // (N, E)
  const std::vector<int64_t> chosen = choose(scores, ids);        // (N, k) on the host
  Tensor slots = from_vector_i64(chosen, {n, k}).to(x.device());  // (N, k)
  Tensor w = gather(scores, 1, slots);                            // (N, k)
  w = mul(div(w, add(sum(w, {-1}, true), 1e-20)), scaling_);      // (N, k)
  Tensor w_flat = w.reshape({n * k});                             // (N k)

  // Every (token, slot) row grouped by expert, each expert's in token order; the experts as grouped products
  // over all rows (ops/grouped_linear.h): row for row each expert's linear layers on its tokens.
  std::vector<int64_t> tokens, slot_of, counts(static_cast<size_t>(experts_), 0);
  tokens.reserve(size_t(n * k));
  slot_of.reserve(size_t(n * k));
  for (int64_t i = 0; i < n * k; ++i) ++counts[size_t(chosen[size_t(i)])];
  // The expert-bias update's loads: training forwards only, not a recompute's replay of this one.
  if (load_.defined() && !x.is_meta() && is_training() && autograd::grad_enabled() &&
      !autograd::in_checkpoint_replay()) {
    NoGradGuard no_grad;
    Tensor(load_).add_(
        from_vector(std::vector<double>(counts.begin(), counts.end()), {experts_}, DType::f32).to(load_.device()));
  }
  std::vector<int64_t> next(static_cast<size_t>(experts_), 0);  // where each expert's rows start
  for (int64_t e = 1; e < experts_; ++e) next[size_t(e)] = next[size_t(e - 1)] + counts[size_t(e - 1)];
  tokens.resize(size_t(n * k));
  slot_of.resize(size_t(n * k));
  for (int64_t i = 0; i < n * k; ++i) {
    const int64_t at = next[size_t(chosen[size_t(i)])]++;
    tokens[size_t(at)] = i / k;
    slot_of[size_t(at)] = i;
  }
  const int64_t m = n * k;
  Tensor tok = from_vector_i64(tokens, {m}).to(x.device());    // (M) i64
  Tensor slot = from_vector_i64(slot_of, {m}).to(x.device());  // (M) i64
  Tensor rows = index_select(flat, 0, tok);                    // (M, C) grouped by expert
  Tensor out = group_ ? run_on_owners(*group_, rows, counts,
                                      [this](const Tensor& mine, const std::vector<int64_t>& per_expert) {
                                        return run_local(mine, per_expert);
                                      })
                      : run_local(rows, counts);                               // (M, C)
  Tensor y = mul(out, index_select(w_flat, 0, slot).unsqueeze(1));             // (M, C)
  Tensor routed = index_add(zeros({n, d}, x.dtype(), x.device()), 0, tok, y);  // (N, C)
  return add(routed.view({b, t, d}), shared_->forward(x));                     // (B, T, C)
}

}  // namespace tidal::models
