#pragma once
// The building blocks of transformer models, with Hugging Face parameter names and layouts.
#include <cstdint>
#include <memory>

#include "tidal/nn/module.h"
#include "tidal/ops/activation.h"

namespace tidal::nn {

// How parameters are created: dtype, device (meta for the planner) and the init scale.
class DeferredInit;

struct Init {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  double std = 0.02;  // normal(0, std) for weights
  // Set: parameters are made without their values (nn/deferred_init.h), which this records.
  std::shared_ptr<DeferredInit> deferred;
};

// y = x W^T + b with W (out, in) ("weight") and b (out) ("bias", optional). HF's nn.Linear layout.
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, const Init& init, double std_override = -1);
  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_, bias_;
};

// y = x W + b with W (in, out): GPT-2's Conv1D layout, so GPT-2 checkpoints load unchanged.
class Conv1D : public Module {
 public:
  Conv1D(int64_t in, int64_t out, const Init& init, double std_override = -1);
  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)

 private:
  Tensor weight_, bias_;
};

class Embedding : public Module {
 public:
  // padding_idx >= 0: that row gets no gradient from the lookups (nn.Embedding's padding_idx).
  Embedding(int64_t num, int64_t dim, const Init& init, int64_t padding_idx = -1);
  Tensor forward(const Tensor& ids) const;  // (...) -> (..., dim)
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;
  int64_t padding_idx_;
};

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, double eps, const Init& init);
  Tensor forward(const Tensor& x) const;

 private:
  Tensor weight_, bias_;
  double eps_;
};

class RMSNorm : public Module {
 public:
  // weight_offset 1: Gemma's RMSNorm, scaling by (1 + weight), the weight starting at 0.
  RMSNorm(int64_t dim, double eps, const Init& init, double weight_offset = 0.0);
  Tensor forward(const Tensor& x) const;

 private:
  Tensor weight_;
  double eps_;
  double weight_offset_;
};

// A normal(0, std) parameter tensor created with `init`'s dtype and device (values only on cpu).
Tensor normal_parameter(const Shape& shape, double std, const Init& init);
Tensor constant_parameter(const Shape& shape, double value, const Init& init);

}  // namespace tidal::nn
