#include "tidal/memory/chunk_loss.h"

#include "tidal/models/causal_lm.h"
#include "tidal/ops/chunked_loss.h"
#include "tidal/ops/elementwise.h"

namespace tidal::memory {

std::string LossComputeConfig::describe() const {
  return chunked ? "chunk (" + std::to_string(chunk_size) + " tokens per chunk)" : "default";
}

LossComputeConfig parse_loss_compute(const std::string& mode, std::optional<int64_t> chunk_size) {
  LossComputeConfig c;
  TIDAL_CHECK(mode.empty() || mode == "default" || mode == "chunk",
              "tidal train: --loss-compute-mode must be default or chunk, got '", mode, "'");
  c.chunked = mode == "chunk";
  if (chunk_size) {
    TIDAL_CHECK(c.chunked, "tidal train: --loss-chunk-size needs --loss-compute-mode chunk (the default mode ",
                "computes all logits at once)");
    TIDAL_CHECK(*chunk_size >= 1, "tidal train: --loss-chunk-size must be >= 1 tokens, got ", *chunk_size);
    c.chunk_size = *chunk_size;
  }
  return c;
}

Tensor lm_loss(const models::CausalLM& model, const Tensor& ids, const Tensor& targets, const LossComputeConfig& c,
               double aux_coef) {
  if (!c.chunked) return models::causal_lm_loss(model.forward(ids), targets, aux_coef);
  const models::ModelOutput out = model.forward_hidden(ids);
  Tensor loss = chunked_lm_loss(out.hidden, model.lm_head_weight(), targets, c.chunk_size);  // (B, T, C) -> ()
  if (out.aux_loss.defined() && aux_coef != 0.0) loss = add(loss, mul(out.aux_loss, aux_coef));
  return loss;
}

}  // namespace tidal::memory
