#include "tidal/models/mtp.h"

#include "tidal/ops/view.h"

namespace tidal::models {

MtpLayer::MtpLayer(const ModelConfig& c, int64_t depth, const nn::Init& init,
                   const std::shared_ptr<dist::Communicator>& experts)
    : LlamaDecoderLayer(c, c.num_hidden_layers + depth - 1, init, experts) {
  const int64_t d = c.hidden_size;
  enorm_ = &register_module("enorm", std::make_unique<nn::RMSNorm>(d, c.norm_eps, init));
  hnorm_ = &register_module("hnorm", std::make_unique<nn::RMSNorm>(d, c.norm_eps, init));
  eh_proj_ = &register_module("eh_proj", std::make_unique<nn::Linear>(2 * d, d, false, init));
  nn::ModuleDict& head = register_module("shared_head", std::make_unique<nn::ModuleDict>());
  head_norm_ = head.add("norm", std::make_unique<nn::RMSNorm>(d, c.norm_eps, init));
}

std::vector<Tensor> MtpLayer::forward(const Tensor& h, const Tensor& embedded, const RopeTables& rope,
                                      const ModelConfig& c, const CoreAttention& attn, bool training,
                                      const LayerRecompute& rc) const {
  // Megatron's order: the token's embedding first, then the hidden state.
  const Tensor x = eh_proj_->forward(cat({enorm_->forward(embedded), hnorm_->forward(h)}, -1));  // (B, T, C)
  std::vector<Tensor> out = LlamaDecoderLayer::forward(x, rope, c, attn, training, rc);
  out[0] = head_norm_->forward(out[0]);  // (B, T, C)
  return out;
}

}  // namespace tidal::models
