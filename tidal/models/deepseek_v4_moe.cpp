#include "tidal/models/deepseek_v4_moe.h"

#include "tidal/memory_scope.h"

#include "tidal/autograd/grad_mode.h"
#include "tidal/ops/activation.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/grouped_linear.h"
#include "tidal/ops/index.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"

namespace tidal::models {
namespace {

// A module with the gate's tensors (the parameter "weight", the buffer "e_score_correction_bias" or "tid2eid").
class Gate : public nn::Module {
 public:
  Tensor& parameter(const std::string& name, Tensor t) { return register_parameter(name, std::move(t)); }
  Tensor& buffer(const std::string& name, Tensor t) { return register_buffer(name, std::move(t)); }
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

}  // namespace

DeepseekV4Moe::DeepseekV4Moe(const ModelConfig& c, int64_t layer, const nn::Init& init)
    : experts_(c.num_experts),
      top_k_(c.num_experts_per_tok),
      scaling_(c.routed_scaling_factor),
      limit_(c.v4.swiglu_limit),
      hash_(c.v4.hash_moe[size_t(layer)]) {
  const int64_t d = c.hidden_size, f = c.moe_intermediate_size, e = c.num_experts;
  Gate& gate = register_module("gate", std::make_unique<Gate>());
  gate_ = &gate;
  gate_weight_ = gate.parameter("weight", nn::normal_parameter({e, d}, init.std, init));
  if (hash_)
    tid2eid_ = gate.buffer("tid2eid", hash_table(c.vocab_size, top_k_, e, init.device));
  else
    bias_ = gate.buffer("e_score_correction_bias", zeros({e}, DType::f32, init.device));
  auto& experts = register_module("experts", std::make_unique<Gate>());
  gate_up_ = experts.parameter("gate_up_proj", nn::normal_parameter({e, 2 * f, d}, init.std, init));
  down_ = experts.parameter("down_proj", nn::normal_parameter({e, d, f}, init.std, init));
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

Tensor DeepseekV4Moe::forward(const Tensor& x, const Tensor& ids) const {
  ModuleScope scope(name());  // --report-memory: the router's and the experts' tensors by module
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2), n = b * t, k = top_k_, f = down_.size(2);
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
  Tensor tok = from_vector_i64(tokens, {m}).to(x.device());                               // (M) i64
  Tensor slot = from_vector_i64(slot_of, {m}).to(x.device());                             // (M) i64
  Tensor gate_up = grouped_linear_stacked(index_select(flat, 0, tok), counts, gate_up_);  // (M, 2F)
  const std::vector<Tensor> gu = clamp_gate_up(gate_up.narrow(1, 0, f), gate_up.narrow(1, f, f), limit_);
  Tensor h = swiglu(gu[0], gu[1]);                                                                       // (M, F)
  Tensor y = mul(grouped_linear_stacked(h, counts, down_), index_select(w_flat, 0, slot).unsqueeze(1));  // (M, C)
  Tensor routed = index_add(zeros({n, d}, x.dtype(), x.device()), 0, tok, y);                            // (N, C)
  return add(routed.view({b, t, d}), shared_->forward(x));                                               // (B, T, C)
}

}  // namespace tidal::models
