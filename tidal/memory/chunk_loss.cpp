#include "tidal/memory/chunk_loss.h"

#include "tidal/memory_scope.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/chunked_loss.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/matmul.h"

namespace tidal::memory {

namespace {

// The mean cross-entropy of hidden (B, T, C) through the LM head against targets (B, T), in the loss mode `c`: the
// default's logits are CausalLM::forward's (accounted as logits), its loss causal_lm_loss's.
Tensor head_loss(const Tensor& hidden, const Tensor& head, const Tensor& targets, const LossComputeConfig& c) {
  if (c.chunked) return chunked_lm_loss(hidden, head, targets, c.chunk_size);  // (B, T, C) -> ()
  Tensor logits;
  {
    OpScope op("lm_head");
    MemoryScope scope(MemoryCategory::logits);
    logits = lm_head(hidden, head);  // (B, T, V)
  }
  OpScope op("loss");
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

}  // namespace

LmLosses lm_losses(const models::CausalLM& model, const Tensor& ids, const Tensor& targets, const LossComputeConfig& c,
                   double aux_coef, const DocumentLayout& docs, const MtpInputs& mtp) {
  LmLosses out;
  const models::ModelOutput m = model.forward_hidden(ids, docs, mtp.ids);
  out.loss = head_loss(m.hidden, model.lm_head_weight(), targets, c);
  if (m.aux_loss.defined() && aux_coef != 0.0) out.loss = add(out.loss, mul(m.aux_loss, aux_coef));
  for (size_t k = 0; k < m.mtp_hidden.size(); ++k) {
    Tensor depth = head_loss(m.mtp_hidden[k], model.lm_head_weight(), mtp.targets[k], c);
    out.mtp_depths.push_back(depth);
    depth = mul(depth, mtp.weights[k]);
    out.mtp = out.mtp.defined() ? add(out.mtp, depth) : depth;
  }
  return out;
}

Tensor lm_loss(const models::CausalLM& model, const Tensor& ids, const Tensor& targets, const LossComputeConfig& c,
               double aux_coef, const DocumentLayout& docs) {
  return lm_losses(model, ids, targets, c, aux_coef, docs, {}).loss;
}

}  // namespace tidal::memory
