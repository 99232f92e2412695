#include "tidal/memory/chunk_loss.h"

#include "tidal/models/causal_lm.h"
#include "tidal/ops/chunked_loss.h"
#include "tidal/ops/elementwise.h"

namespace tidal::memory {

Tensor lm_loss(const models::CausalLM& model, const Tensor& ids, const Tensor& targets, const LossComputeConfig& c,
               double aux_coef, const DocumentLayout& docs) {
  if (!c.chunked) return models::causal_lm_loss(model.forward(ids, docs), targets, aux_coef);
  const models::ModelOutput out = model.forward_hidden(ids, docs);
  Tensor loss = chunked_lm_loss(out.hidden, model.lm_head_weight(), targets, c.chunk_size);  // (B, T, C) -> ()
  if (out.aux_loss.defined() && aux_coef != 0.0) loss = add(loss, mul(out.aux_loss, aux_coef));
  return loss;
}

}  // namespace tidal::memory
