// --loss-compute-mode chunk on every architecture (GPT-2 and Qwen3 tie the LM head to the embedding,
// Llama and Qwen3-MoE do not; Qwen3-MoE adds its aux loss), against the default mode, with ignored
// targets and two accumulated micro-batches, under every recompute mode:
// - with one chunk (chunk >= N) the loss and every gradient are bitwise identical: the same GEMM
//   calls, the same kernel, row losses summed in row order over the same global count;
// - with smaller chunks the loss and every gradient agree within 1e-6 relative to their largest
//   element: oneDNN's GEMM rounds some rows differently when it sees fewer of them, and the weight's
//   gradient is summed chunk by chunk (other orders of the same additions);
// - recompute changes nothing at all in chunk mode (bitwise against chunk mode without recompute).
// Then the memory: the logits peak on the allocator, the head's peak against loss_head_memory(),
// and the activation estimator in chunk mode.
#include <gtest/gtest.h>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <cmath>

#include "tests/support/gradcheck.h"
#include "tests/support/recompute_modes.h"
#include "tests/support/test_models.h"
#include "tidal/memory/chunk_loss.h"
#include "tidal/memory/estimator.h"
#include "tidal/memory/savings.h"
#include "tidal/memory_scope.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/chunked_loss.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"

namespace tidal::models {
namespace {

using Mode = testing::RecomputeMode;

struct Result {
  std::vector<double> losses;
  std::vector<Tensor> grads;
  int64_t logits_peak = 0;
};

// Two micro-batches of 2 x 12 tokens accumulated with weight 0.5 (exact: a power of two), some
// targets ignored.
Result run(CausalLM& model, const Tensor& batch, const memory::LossComputeConfig& loss_mode) {
  Allocator& dev = device_allocator(Device::cpu());
  dev.reset_peak_stats();
  const int64_t logits0 = dev.stats()[MemoryCategory::logits].allocated;
  Result r;
  for (int64_t mb = 0; mb < 2; ++mb) {
    Tensor tokens = batch.narrow(0, mb * 2, 2);
    const int64_t t = tokens.size(1) - 1;
    Tensor targets = tokens.narrow(1, 1, t).contiguous();
    targets.narrow(1, 3 + mb, 2).fill_(-100);
    manual_seed(100 + uint64_t(mb));
    Tensor loss =
        memory::lm_loss(model, tokens.narrow(1, 0, t), targets, loss_mode, model.config().router_aux_loss_coef);
    mul(loss, 0.5).backward();
    r.losses.push_back(loss.item<double>());
  }
  r.logits_peak = dev.stats()[MemoryCategory::logits].peak - logits0;
  for (const Tensor& p : model.parameters()) r.grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  model.zero_grad();
  return r;
}

::testing::AssertionResult close(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (double v : b.to_vector<double>()) m = std::max(m, std::abs(v));
  return testing::all_close(a, b, 1e-6, 1e-6 * m);
}

void expect_same(const Result& got, const Result& want, bool bitwise, const std::string& what, CausalLM& model) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    if (bitwise) {
      EXPECT_EQ(got.losses[i], want.losses[i]) << what;
    } else {
      EXPECT_NEAR(got.losses[i], want.losses[i], 1e-6 * std::abs(want.losses[i])) << what;
    }
  }
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < want.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].defined(), want.grads[i].defined()) << what << " param " << i;
    if (!want.grads[i].defined()) continue;
    const std::string name = model.named_parameters()[i].first;
    if (bitwise) {
      EXPECT_TRUE(testing::bitwise_equal(got.grads[i], want.grads[i])) << what << " " << name;
    } else {
      EXPECT_TRUE(close(got.grads[i], want.grads[i])) << what << " " << name;
    }
  }
}

std::vector<Mode> modes(bool moe) {
  std::vector<Mode> v = {
      {"full uniform 1", "full", "uniform", 1},
      {"full block 1 + activation 1", "full", "block", 1, true, 1},
      {"full block 1 + norm", "full", "block", 1, false, -1, true},
      {"selective", "selective"},
      {"activation + norm 1", "", "", -1, true, -1, true, 1},
  };
  v.push_back(moe ? Mode{"modules moe_act,mlp,norm", "", "", -1, false, -1, false, -1, "moe_act,mlp,norm"}
                  : Mode{"modules mlp,norm", "", "", -1, false, -1, false, -1, "mlp,norm"});
  return v;
}

void check(const char* preset_name) {
  ModelConfig c = preset(preset_name);
  c.set_num_layers(3);
  c.mlp_only_layers = c.is_moe() ? std::vector<int64_t>{1} : std::vector<int64_t>{};
  if (c.is_gpt2()) c.hidden_dropout = c.attention_dropout = 0.1;
  manual_seed(1);
  auto model = create_model(c);
  model->set_attention_kernel(AttentionKernel::eager);
  manual_seed(2);
  const Tensor batch = randint(0, c.vocab_size, {4, 13});
  const int64_t n = 2 * 12, v = c.vocab_size;
  memory::LossComputeConfig chunk7{true, 7}, one_chunk{true, n};
  const Result plain = run(*model, batch, {});
  EXPECT_EQ(plain.logits_peak, memory::chunked_loss_logits_bytes(2, 12, v, 0));
  EXPECT_EQ(plain.logits_peak, n * v * 4);

  const Result single = run(*model, batch, one_chunk);
  expect_same(single, plain, /*bitwise=*/true, std::string(preset_name) + " chunk = N", *model);
  const Result chunked = run(*model, batch, chunk7);
  expect_same(chunked, plain, /*bitwise=*/false, std::string(preset_name) + " chunk 7", *model);
  EXPECT_EQ(chunked.logits_peak, 7 * v * 4);
  EXPECT_EQ(chunked.logits_peak, memory::chunked_loss_logits_bytes(2, 12, v, 7));

  for (const Mode& m : modes(c.is_moe())) {
    model->set_recompute(memory::plan_recompute(m.parse(c), c));
    const Result r = run(*model, batch, chunk7);
    model->set_recompute({});
    expect_same(r, chunked, /*bitwise=*/true, std::string(preset_name) + " chunk 7 + " + m.name, *model);
    EXPECT_EQ(r.logits_peak, 7 * v * 4) << m.name;
  }
}

}  // namespace

TEST(ChunkedLossModels, Gpt2TiedEveryRecomputeMode) { check("tiny-gpt2"); }
TEST(ChunkedLossModels, LlamaUntiedEveryRecomputeMode) { check("tiny-llama"); }
TEST(ChunkedLossModels, Qwen3TiedEveryRecomputeMode) { check("tiny-qwen3"); }
TEST(ChunkedLossModels, Qwen3MoeWithAuxLossEveryRecomputeMode) { check("tiny-qwen3-moe"); }
TEST(ChunkedLossModels, MistralUntiedEveryRecomputeMode) { check("tiny-mistral"); }
TEST(ChunkedLossModels, Qwen2TiedEveryRecomputeMode) { check("tiny-qwen2"); }
TEST(ChunkedLossModels, Gemma3TiedEveryRecomputeMode) { check("tiny-gemma3"); }
TEST(ChunkedLossModels, DeepseekV3EveryRecomputeMode) { check("tiny-deepseek-v3"); }

// The head and loss of one micro-batch, measured on the allocator against loss_head_memory(): the
// hidden input (N, C) and the weight are leaves; targets are a narrow of the token batch (copied).
// In f32 and in bf16 (--bf16's model: bf16 logits, f32 log-sum-exp; chunk mode computes in f32).
TEST(ChunkedLossModels, HeadMemoryMatchesTheFormula) {
  Allocator& dev = device_allocator(Device::cpu());
  const int64_t b = 2, s = 48, C = 32, V = 1000, n = b * s;
  manual_seed(3);
  Tensor tokens = randint(0, V, {b, s + 1});
  for (const DType dtype : {DType::f32, DType::bf16})
    for (int64_t chunk : {0, 16, 40, 96, 500}) {
      Tensor h = randn({b, s, C}).to(dtype).set_requires_grad(true);  // (B, T, C)
      Tensor w = mul(randn({V, C}), 0.1).to(dtype).set_requires_grad(true);
      Tensor targets = tokens.narrow(1, 1, s);
      dev.reset_peak_stats();
      const int64_t base = dev.stats().allocated;
      {
        Tensor loss;
        if (chunk > 0) {
          loss = chunked_lm_loss(h, w, targets, chunk);
        } else {
          Tensor logits;  // (B, T, V)
          {
            MemoryScope category(MemoryCategory::logits);  // as CausalLM::forward does
            logits = linear(h, w);
          }
          loss = cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
        }
        loss.backward();
      }
      // + the input, alive throughout
      const int64_t peak = dev.stats().peak_allocated - base + n * C * dtype_size(dtype);
      const memory::LossHeadMemory m = memory::loss_head_memory(b, s, C, V, chunk, dtype);
      const std::string what = std::string(dtype_name(dtype)) + " chunk " + std::to_string(chunk);
      // The formula leaves out the 0-dim loss and its gradient: measured = predicted + 4 or 8 bytes.
      EXPECT_LE(std::abs(peak - m.peak), 16) << what << ": measured " << peak << " predicted " << m.peak;
      EXPECT_EQ(dev.stats()[MemoryCategory::logits].peak, m.logits) << what;
    }
  // bf16: the default mode's logits are bf16, a chunk's f32.
  EXPECT_EQ(memory::loss_head_memory(b, s, C, V, 0, DType::bf16).logits, n * V * 2);
  EXPECT_EQ(memory::loss_head_memory(b, s, C, V, 16, DType::bf16).logits, 16 * V * 4);
  EXPECT_EQ(memory::chunked_loss_savings(b, s, C, V, 16),
            memory::loss_head_memory(b, s, C, V, 0).peak - memory::loss_head_memory(b, s, C, V, 16).peak);
  EXPECT_GT(memory::chunked_loss_savings(b, s, C, V, 16), 0);
  // Qwen3-8B, 4 x 4096 tokens, chunk 1024: the logits (9.3 GiB) become 594 MiB.
  EXPECT_EQ(memory::chunked_loss_logits_bytes(4, 4096, 151936, 1024), int64_t(1024) * 151936 * 4);
  EXPECT_GT(memory::chunked_loss_savings(4, 4096, 4096, 151936, 1024), int64_t(10) << 30);
}

// estimate_activations with loss_chunk: the stored gradients replace the head input, log-sum-exp and
// targets; the allocator agrees to the byte after forward and at the peak.
TEST(ChunkedLossModels, ActivationEstimateInChunkMode) {
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const char* name : {"tiny-llama", "tiny-gpt2"}) {
      ModelConfig c = preset(name);
      c.set_num_layers(2);
      auto model = testing::seeded_model(c, dtype, 1);
      model->set_attention_kernel(AttentionKernel::flash);
      manual_seed(2);
      Tensor tokens = randint(0, c.vocab_size, {2, 33});
      Tensor ids = tokens.narrow(1, 0, 32).contiguous(), targets = tokens.narrow(1, 1, 32);
      Allocator& dev = device_allocator(Device::cpu());
      const int64_t base = dev.stats()[MemoryCategory::activation].allocated;
      dev.reset_peak_stats();
      int64_t after_forward = 0;
      {
        Tensor loss = memory::lm_loss(*model, ids, targets, {true, 10}, 0.0);
        after_forward = dev.stats()[MemoryCategory::activation].allocated - base;
        loss.backward();
      }
      const int64_t peak = dev.stats()[MemoryCategory::activation].peak - base;
      model->zero_grad();
      memory::ActivationInputs in;
      in.batch = 2;
      in.seq = 32;
      in.loss_chunk = 10;
      in.dtype = dtype;
      const memory::ActivationEstimate est = memory::estimate_activations(c, in);
      const std::string what = std::string(name) + " " + std::string(dtype_name(dtype));
      EXPECT_EQ(est.after_forward, after_forward) << what;
      EXPECT_EQ(est.peak, peak) << what;
      in.loss_chunk = 0;
      // The f32 log-sum-exp and the targets go, the (V, C) gradient comes (the (N, C) one replaces
      // the head input, same dtype).
      EXPECT_EQ(memory::estimate_activations(c, in).after_forward - est.after_forward,
                2 * 32 * 12 - c.vocab_size * c.hidden_size * dtype_size(dtype))
          << what;
    }
}

}  // namespace tidal::models
