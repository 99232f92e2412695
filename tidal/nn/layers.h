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

class Linear;

// A linear layer (in -> out) that can take a LoRA adapter (Hu et al. 2021; PEFT's LoraLayer, nn/lora.h):
// y = base(x) + scaling * lora_B(lora_A(dropout(x))), lora_A (r, in) and lora_B (out, r) its children
// "lora_A" and "lora_B", so their parameters are named "<module>.lora_A.weight" as PEFT names them.
class Adaptable : public Module {
 public:
  Adaptable(int64_t in, int64_t out) : in_(in), out_(out) {}
  // Adds the adapter with PEFT's initialization: lora_A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform with
  // a = sqrt(5)), lora_B = 0, so the adapted layer starts as the base one. Once only.
  void add_lora(int64_t r, double scaling, double dropout, const Init& init);
  bool has_lora() const { return lora_A_ != nullptr; }
  // False for a layer whose weight is also read outside its forward (a router's logits, the LM head under
  // the chunked loss): an adapter there would be skipped, so it is refused.
  bool accepts_lora() const { return accepts_lora_; }
  void refuse_lora() { accepts_lora_ = false; }
  // The base weight in its own layout with scaling * B A added (computed in f32, f64 for f64 weights,
  // returned in the weight's dtype): what a merged export saves. Requires has_lora().
  virtual Tensor merged_weight() const = 0;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 protected:
  // y (..., out) plus the adapter's output for x (..., in); y itself without an adapter.
  Tensor adapted(const Tensor& x, const Tensor& y) const;
  // B A (out, in) in f32 (f64 for f64 adapters), times scaling.
  Tensor lora_delta() const;

 private:
  bool accepts_lora_ = true;
  int64_t in_, out_;
  Linear* lora_A_ = nullptr;
  Linear* lora_B_ = nullptr;
  double scaling_ = 0, dropout_ = 0;
};

// y = x W^T + b with W (out, in) ("weight") and b (out) ("bias", optional). HF's nn.Linear layout.
class Linear : public Adaptable {
 public:
  Linear(int64_t in, int64_t out, bool bias, const Init& init, double std_override = -1);
  // Around a made weight (out, in) and no bias (a LoRA adapter's halves).
  explicit Linear(Tensor weight);
  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)
  const Tensor& weight() const { return weight_; }
  Tensor merged_weight() const override;

 private:
  Tensor weight_, bias_;
};

// y = x W + b with W (in, out): GPT-2's Conv1D layout, so GPT-2 checkpoints load unchanged.
class Conv1D : public Adaptable {
 public:
  Conv1D(int64_t in, int64_t out, const Init& init, double std_override = -1);
  Tensor forward(const Tensor& x) const;  // (..., in) -> (..., out)
  Tensor merged_weight() const override;

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
// U(-bound, bound), drawn in f32 on the host as normal_parameter draws (not under deferred init).
Tensor uniform_parameter(const Shape& shape, double bound, const Init& init);

}  // namespace tidal::nn
