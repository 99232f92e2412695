#include "tidal/nn/layers.h"

#include <cmath>

#include "tidal/autograd/grad_mode.h"
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

Tensor uniform_parameter(const Shape& shape, double bound, const Init& init) {
  MemoryScope scope(MemoryCategory::parameter);
  TIDAL_ASSERT(!init.deferred, "uniform_parameter under deferred init");
  if (init.device.is_meta()) return empty(shape, init.dtype, init.device);
  // U[0, 1) -> U[-bound, bound) in place, as normal_parameter scales its draw: the parameter's bytes are
  // the only ones of its category, which the dry run counts (a 0-dim temporary holds the shift).
  Tensor t = rand(shape, DType::f32);
  t.mul_(2.0 * bound);
  {
    MemoryScope temporary(MemoryCategory::temporary);
    t.add_(full({}, bound, DType::f32), -1.0);
  }
  return t.to(init.dtype).to(init.device);
}

void Adaptable::add_lora(int64_t r, double scaling, double dropout, const Init& init) {
  TIDAL_ASSERT(lora_A_ == nullptr, "LoRA added twice to ", name());
  TIDAL_ASSERT(accepts_lora_, name(), " takes no LoRA adapter");
  lora_A_ = &register_module("lora_A",
                             std::make_unique<Linear>(uniform_parameter({r, in_}, 1.0 / std::sqrt(double(in_)), init)));
  lora_B_ = &register_module("lora_B", std::make_unique<Linear>(constant_parameter({out_, r}, 0.0, init)));
  scaling_ = scaling;
  dropout_ = dropout;
}

namespace {
// Merging accumulates in f32, or f64 for f64 weights.
DType merge_dtype(DType weight) { return weight == DType::f64 ? DType::f64 : DType::f32; }
}  // namespace

Tensor Adaptable::adapted(const Tensor& x, const Tensor& y) const {
  if (lora_A_ == nullptr) return y;
  const Tensor h = lora_A_->forward(dropout(x, dropout_, is_training()));  // (..., r)
  return add(y, lora_B_->forward(h), scaling_);                            // (..., out)
}

Tensor Adaptable::lora_delta() const {
  TIDAL_ASSERT(lora_A_ != nullptr, name(), " has no LoRA adapter");
  NoGradGuard no_grad;
  const DType wide = merge_dtype(lora_A_->weight().dtype());
  return mul(matmul(lora_B_->weight().to(wide), lora_A_->weight().to(wide)), scaling_);  // (out, in)
}

Linear::Linear(int64_t in, int64_t out, bool bias, const Init& init, double std_override) : Adaptable(in, out) {
  weight_ = register_parameter("weight", normal_parameter({out, in}, std_override > 0 ? std_override : init.std, init));
  if (bias) bias_ = register_parameter("bias", constant_parameter({out}, 0.0, init));
}

Linear::Linear(Tensor weight) : Adaptable(weight.size(1), weight.size(0)) {
  weight_ = register_parameter("weight", std::move(weight));
}

Tensor Linear::forward(const Tensor& x) const {
  ModuleScope scope(name());
  return adapted(x, linear(x, weight_, bias_));
}

Tensor Linear::merged_weight() const {
  NoGradGuard no_grad;
  return add(weight_.to(merge_dtype(weight_.dtype())), lora_delta()).to(weight_.dtype());  // (out, in)
}

Conv1D::Conv1D(int64_t in, int64_t out, const Init& init, double std_override) : Adaptable(in, out) {
  weight_ = register_parameter("weight", normal_parameter({in, out}, std_override > 0 ? std_override : init.std, init));
  bias_ = register_parameter("bias", constant_parameter({out}, 0.0, init));
}

Tensor Conv1D::forward(const Tensor& x) const {
  ModuleScope scope(name());
  return adapted(x, linear(x, weight_.t(), bias_));
}

Tensor Conv1D::merged_weight() const {
  NoGradGuard no_grad;
  return add(weight_.to(merge_dtype(weight_.dtype())), lora_delta().t()).to(weight_.dtype());  // (in, out)
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
