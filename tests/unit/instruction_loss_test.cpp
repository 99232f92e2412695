// The masked loss of instruction data (labels -100 where a token is not trained): a masked target counts for
// nothing (changing the token there changes neither the loss nor a gradient), and the loss is the mean over
// the trained targets only (Megatron's masked mean; train/step.cpp takes labels[:, 1:] as the targets).
#include <gtest/gtest.h>

#include <cmath>

#include "tidal/data/instruction_sample.h"
#include "tidal/memory/chunk_loss.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/config.h"

namespace tidal {
namespace {

constexpr int64_t M = data::kIgnoreIndex;

struct LossAndGrads {
  double loss = 0;
  std::vector<Tensor> grads;
};

LossAndGrads run(const models::CausalLM& model, const std::vector<int64_t>& inputs,
                 const std::vector<int64_t>& targets) {
  for (const Tensor& p : model.parameters()) p.zero_grad();
  const Tensor ids = from_vector_i64(inputs, {1, int64_t(inputs.size())});    // (1, T)
  const Tensor tgt = from_vector_i64(targets, {1, int64_t(targets.size())});  // (1, T)
  const Tensor loss = memory::lm_loss(model, ids, tgt, memory::LossComputeConfig{}, 0.0);
  loss.backward();
  LossAndGrads r{loss.item<double>(), {}};
  for (const Tensor& p : model.parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

TEST(InstructionLoss, MaskedTargetsCountForNothing) {
  const auto model = models::create_model(models::preset("tiny-llama"));
  // tokens (T + 1) and labels: the prompt (first 5 targets) masked, the reply trained.
  const std::vector<int64_t> tokens = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46};
  std::vector<int64_t> labels = tokens;
  for (int k = 0; k < 6; ++k) labels[size_t(k)] = M;
  const std::vector<int64_t> inputs(tokens.begin(), tokens.end() - 1), targets(labels.begin() + 1, labels.end());
  const LossAndGrads a = run(*model, inputs, targets);

  // The same targets with the masked positions given their real tokens move the loss: the mask is what
  // keeps them out.
  const std::vector<int64_t> unmasked(tokens.begin() + 1, tokens.end());
  EXPECT_NE(a.loss, run(*model, inputs, unmasked).loss);

  // The masked mean: the loss and every gradient are the mean of the 5 trained targets' own (each alone, every
  // other target masked); a masked target adds nothing to either, whatever its token.
  double sum = 0;
  std::vector<std::vector<double>> grad_sum(a.grads.size());
  for (int k = 5; k < 10; ++k) {
    std::vector<int64_t> one(targets.size(), M);
    one[size_t(k)] = targets[size_t(k)];
    const LossAndGrads r = run(*model, inputs, one);
    sum += r.loss;
    for (size_t i = 0; i < r.grads.size(); ++i) {
      grad_sum[i].resize(size_t(r.grads[i].numel()));
      for (int64_t j = 0; j < r.grads[i].numel(); ++j) grad_sum[i][size_t(j)] += r.grads[i].data<float>()[j];
    }
  }
  EXPECT_NEAR(a.loss, sum / 5, 1e-6);
  for (size_t i = 0; i < a.grads.size(); ++i)
    for (int64_t j = 0; j < a.grads[i].numel(); ++j)
      ASSERT_NEAR(a.grads[i].data<float>()[j], grad_sum[i][size_t(j)] / 5, 1e-6)
          << "parameter " << i << " [" << j << "]";
}

}  // namespace
}  // namespace tidal
