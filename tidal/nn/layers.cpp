#include "tidal/nn/layers.h"

#include "tidal/memory_scope.h"
#include "tidal/nn/deferred_init.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/embedding.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/norm.h"
#include "tidal/ops/random.h"

namespace tidal::nn {

Tensor normal_parameter(const Shape& shape, double std, const Init& init) {
  MemoryScope scope(MemoryCategory::parameter);
  if (init.device.is_meta()) return empty(shape, init.dtype, init.device);
  if (init.deferred) {  // the draw's position, reserved as randn would
    const RngState at = get_rng_state();
    reserve_random(uint64_t(shape.numel()));
    Tensor t = empty(shape, init.dtype, init.device);
    t.storage()->release();
    init.deferred->record_normal(t, std, at);
    return t;
  }
  // Drawn on the host whatever the device: a cuda run starts from the cpu run's exact weights.
  Tensor t = randn(shape, DType::f32);
  t.mul_(std);
  return t.to(init.dtype).to(init.device);
}

Tensor constant_parameter(const Shape& shape, double value, const Init& init) {
  MemoryScope scope(MemoryCategory::parameter);
  if (init.deferred && !init.device.is_meta()) {
    Tensor t = empty(shape, init.dtype, init.device);
    t.storage()->release();
    init.deferred->record_constant(t, value);
    return t;
  }
  return full(shape, value, init.dtype, init.device);
}

Linear::Linear(int64_t in, int64_t out, bool bias, const Init& init, double std_override) {
  weight_ = register_parameter("weight", normal_parameter({out, in}, std_override > 0 ? std_override : init.std, init));
  if (bias) bias_ = register_parameter("bias", constant_parameter({out}, 0.0, init));
}

Tensor Linear::forward(const Tensor& x) const {
  ModuleScope scope(name());
  return linear(x, weight_, bias_);
}

Conv1D::Conv1D(int64_t in, int64_t out, const Init& init, double std_override) {
  weight_ = register_parameter("weight", normal_parameter({in, out}, std_override > 0 ? std_override : init.std, init));
  bias_ = register_parameter("bias", constant_parameter({out}, 0.0, init));
}

Tensor Conv1D::forward(const Tensor& x) const {
  ModuleScope scope(name());
  return linear(x, weight_.t(), bias_);
}

Embedding::Embedding(int64_t num, int64_t dim, const Init& init, int64_t padding_idx) : padding_idx_(padding_idx) {
  weight_ = register_parameter("weight", normal_parameter({num, dim}, init.std, init));
}

Tensor Embedding::forward(const Tensor& ids) const {
  ModuleScope scope(name());
  return embedding(weight_, ids, padding_idx_);
}

LayerNorm::LayerNorm(int64_t dim, double eps, const Init& init) : eps_(eps) {
  weight_ = register_parameter("weight", constant_parameter({dim}, 1.0, init));
  bias_ = register_parameter("bias", constant_parameter({dim}, 0.0, init));
}

Tensor LayerNorm::forward(const Tensor& x) const {
  ModuleScope scope(name());
  return layer_norm(x, weight_, bias_, eps_);
}

RMSNorm::RMSNorm(int64_t dim, double eps, const Init& init, double weight_offset)
    : eps_(eps), weight_offset_(weight_offset) {
  weight_ = register_parameter("weight", constant_parameter({dim}, 1.0 - weight_offset, init));
}

Tensor RMSNorm::forward(const Tensor& x) const {
  ModuleScope scope(name());
  return rms_norm(x, weight_, eps_, weight_offset_);
}

}  // namespace tidal::nn
