#pragma once
// What the transformers golden tests share (hf_golden_test.cpp's table of families, hf_llama3_test.cpp's
// Llama 3 checks): a fixture directory of tests/fixtures/hf/ with its golden.safetensors, and
// docs/parity.md's measure of the difference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "tidal/autograd/grad_mode.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/pretrained.h"

namespace tidal::models {

inline std::string fixture_dir(const std::string& name) {
  return std::string(TIDAL_SOURCE_DIR) + "/tests/fixtures/hf/" + name;
}

struct GoldenFiles {
  std::string dir;                        // the fixture directory (config.json, model.safetensors)
  std::map<std::string, Tensor> tensors;  // golden.safetensors
  std::string transformers;               // the version that wrote it (metadata)
  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  const Tensor& at(const std::string& name) const {
    const auto it = tensors.find(name);
    if (it == tensors.end()) ADD_FAILURE() << dir << "/golden.safetensors has no " << name;
    return it == tensors.end() ? empty_ : it->second;
  }
  int count_prefix(const std::string& prefix) const {
    return int(
        std::count_if(tensors.begin(), tensors.end(), [&](const auto& kv) { return kv.first.rfind(prefix, 0) == 0; }));
  }

 private:
  Tensor empty_;
};

inline GoldenFiles load_golden(const std::string& name) {
  GoldenFiles g;
  g.dir = fixture_dir(name);
  io::Safetensors file = io::load_safetensors(g.dir + "/golden.safetensors");
  g.tensors = std::move(file.tensors);
  g.transformers = file.metadata["transformers"];
  return g;
}

// max |a - b| / max |b|, docs/parity.md's measure (f32 tensors of the same shape).
inline double relative_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  const Tensor x = a.contiguous(), y = b.contiguous();
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    diff = std::max(diff, std::abs(double(x.data<float>()[i]) - double(y.data<float>()[i])));
    scale = std::max(scale, double(std::abs(y.data<float>()[i])));
  }
  return diff / scale;
}

// |a - b| / |b| of a 0-dim tensor and a one-element golden.
inline double scalar_error(const Tensor& a, const Tensor& b) {
  const double x = a.item<float>(), y = b.contiguous().data<float>()[0];
  return std::abs(x - y) / std::abs(y);
}

// transformers' causal-LM targets: labels (B, T) shifted left by one, -100 after the last position.
inline Tensor shifted(const Tensor& labels) {
  const int64_t b = labels.size(0), t = labels.size(1);
  const Tensor l = labels.contiguous();
  std::vector<int64_t> out(size_t(b * t), -100);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t j = 0; j + 1 < t; ++j) out[size_t(i * t + j)] = l.data<int64_t>()[i * t + j + 1];
  return from_vector_i64(out, {b, t});  // (B, T)
}

// The logits (B, T, V) of the model in `dir` on ids (B, T), without autograd.
inline Tensor golden_logits(const std::string& dir, const Tensor& ids) {
  NoGradGuard no_grad;
  return load_pretrained_model(dir)->forward(ids).logits;
}

}  // namespace tidal::models
