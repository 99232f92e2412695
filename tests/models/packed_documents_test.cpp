// Packed sequences (Megatron's --reset-position-ids with --reset-attention-mask): several documents in
// one row give each document's logits and gradients as if it ran alone, in every family (RoPE,
// learned positions, sliding windows, MLA, MoE), with flash and eager attention, and on meta.
#include <gtest/gtest.h>

#include <vector>

#include "tests/support/gradcheck.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/documents.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"

namespace tidal::models {
namespace {

using testing::all_close;

const char* kTiny[] = {"tiny-gpt2",    "tiny-llama", "tiny-qwen3",  "tiny-qwen3-moe",
                       "tiny-mistral", "tiny-qwen2", "tiny-gemma3", "tiny-deepseek-v3"};
constexpr int64_t kEod = 1;

// One row of three documents: [0, 5) ending in EOD, [5, 12) ending in EOD, [12, 16) without.
struct Packed {
  Tensor ids;  // (1, 16) i64
  std::vector<std::pair<int64_t, int64_t>> documents;
};
Packed packed_row(int64_t vocab) {
  manual_seed(5);
  Tensor ids = randint(2, vocab, {1, 16});  // no EOD but where placed
  int64_t* p = ids.data<int64_t>();
  p[4] = p[11] = kEod;
  return {ids, {{0, 5}, {5, 7}, {12, 4}}};
}

DocumentLayout both(const Tensor& ids) { return document_layout(ids, kEod); }

}  // namespace

TEST(PackedDocuments, EachDocumentAsIfAlone) {
  for (const char* name : kTiny)
    for (AttentionKernel kernel : {AttentionKernel::flash, AttentionKernel::eager}) {
      SCOPED_TRACE(::testing::Message() << name << " " << tidal::name(kernel));
      manual_seed(1);
      auto model = create_model(preset(name));
      model->set_attention_kernel(kernel);
      const Packed row = packed_row(model->config().vocab_size);
      const Tensor logits = model->forward(row.ids, both(row.ids)).logits;  // (1, 16, V)
      for (const auto& [start, len] : row.documents) {
        const Tensor alone = model->forward(row.ids.narrow(1, start, len).contiguous()).logits;
        EXPECT_TRUE(all_close(logits.narrow(1, start, len), alone, 1e-4, 1e-5)) << "document at " << start;
      }
      // Without the layout the documents see each other: the later ones differ.
      const Tensor plain = model->forward(row.ids).logits;
      EXPECT_FALSE(all_close(plain.narrow(1, 5, 11), logits.narrow(1, 5, 11), 1e-4, 1e-5));
    }
}

TEST(PackedDocuments, GradientsAreTheSumOfTheDocuments) {
  for (const char* name : {"tiny-llama", "tiny-gpt2", "tiny-deepseek-v3"}) {
    SCOPED_TRACE(name);
    manual_seed(1);
    auto model = create_model(preset(name));
    const Packed row = packed_row(model->config().vocab_size);
    const Tensor targets = randint(2, model->config().vocab_size, {1, 16});
    const auto loss_sum = [](const Tensor& logits, const Tensor& t) {
      return mul(cross_entropy(logits, t), double(t.numel()));  // the sum over tokens
    };
    loss_sum(model->forward(row.ids, both(row.ids)).logits, targets).backward();
    std::vector<Tensor> packed;
    for (const Tensor& p : model->parameters()) packed.push_back(p.grad().clone());
    model->zero_grad();
    for (const auto& [start, len] : row.documents)
      loss_sum(model->forward(row.ids.narrow(1, start, len).contiguous()).logits,
               targets.narrow(1, start, len).contiguous())
          .backward();
    const std::vector<Tensor> params = model->parameters();
    for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(all_close(packed[i], params[i].grad(), 1e-4, 1e-5)) << i;
  }
}

TEST(PackedDocuments, PositionsAloneAndMaskAlone) {
  // --reset-position-ids alone: the first document (position 0 onwards either way) is unchanged and
  // the later ones see the earlier tokens; --reset-attention-mask alone: later documents keep their
  // global positions, which RoPE's relative rotation does not see but GPT-2's learned positions do.
  manual_seed(1);
  auto llama = create_model(preset("tiny-llama"));
  const Packed row = packed_row(llama->config().vocab_size);
  const DocumentLayout l = both(row.ids);
  const Tensor full = llama->forward(row.ids, l).logits;
  const Tensor mask_only = llama->forward(row.ids, {l.starts, Tensor()}).logits;
  EXPECT_TRUE(all_close(mask_only, full, 1e-4, 1e-5));  // RoPE is relative: the positions' offset cancels
  const Tensor positions_only = llama->forward(row.ids, {Tensor(), l.positions}).logits;
  EXPECT_TRUE(all_close(positions_only.narrow(1, 0, 5), full.narrow(1, 0, 5), 1e-4, 1e-5));
  EXPECT_FALSE(all_close(positions_only.narrow(1, 5, 11), full.narrow(1, 5, 11), 1e-4, 1e-5));
  manual_seed(1);
  auto gpt2 = create_model(preset("tiny-gpt2"));
  const Tensor g_full = gpt2->forward(row.ids, l).logits;
  const Tensor g_mask = gpt2->forward(row.ids, {l.starts, Tensor()}).logits;
  EXPECT_FALSE(all_close(g_mask.narrow(1, 5, 11), g_full.narrow(1, 5, 11), 1e-4, 1e-5));
}

TEST(PackedDocuments, RunsOnMetaAndRefusesBadLayouts) {
  nn::Init init;
  init.device = Device::meta();
  auto model = create_model(preset("tiny-llama"), init);
  const Tensor ids = empty({2, 16}, DType::i64, Device::meta());
  const DocumentLayout l{empty({2, 16}, DType::i32, Device::meta()), empty({2, 16}, DType::i32, Device::meta())};
  EXPECT_EQ(model->forward(ids, l).logits.shape(), (Shape{2, 16, model->config().vocab_size}));
  manual_seed(1);
  auto cpu = create_model(preset("tiny-llama"));
  const Tensor host = zeros({2, 16}, DType::i64);
  EXPECT_THROW(cpu->forward(host, {zeros({2, 15}, DType::i32), Tensor()}), Error);
  EXPECT_THROW(cpu->forward(host, {Tensor(), zeros({2, 16}, DType::i64)}), Error);
}

}  // namespace tidal::models
