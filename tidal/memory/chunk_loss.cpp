#include "tidal/memory/chunk_loss.h"

#include "tidal/models/causal_lm.h"
#include "tidal/ops/chunked_loss.h"
#include "tidal/ops/elementwise.h"

namespace tidal::memory {

Tensor lm_loss(const models::CausalLM& model, const Tensor& ids, const Tensor& targets, const LossComputeConfig& c,
               double aux_coef, const DocumentLayout& docs, double token_scale) {
  if (!c.chunked && token_scale == 1.0) return models::causal_lm_loss(model.forward(ids, docs), targets, aux_coef);
  const models::ModelOutput out = c.chunked ? model.forward_hidden(ids, docs) : model.forward(ids, docs);
  Tensor loss = c.chunked
                    ? chunked_lm_loss(out.hidden, model.lm_head_weight(), targets, c.chunk_size)  // () of (B, T, C)
                    : models::causal_lm_loss(out, targets, 0.0);
  if (token_scale != 1.0) loss = mul(loss, token_scale);
  if (out.aux_loss.defined() && aux_coef != 0.0) loss = add(loss, mul(out.aux_loss, aux_coef));
  return loss;
}

}  // namespace tidal::memory
