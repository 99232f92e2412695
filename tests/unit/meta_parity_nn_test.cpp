// Meta accounting parity for the model-building ops: a planner run on meta tensors sees exactly the
// bytes a real run allocates, forward and backward.
#include "tests/support/meta_parity.h"
#include "tidal/ops/activation.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/embedding.h"
#include "tidal/ops/index.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/norm.h"
#include "tidal/ops/rope.h"
#include "tidal/ops/softmax.h"

namespace tidal {
using testing::InputSpec;
using testing::meta_matches_cpu;

TEST(MetaParity, NormsActivationsSoftmax) {
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return layer_norm(x[0], x[1], x[2]); }, {{{6, 32}}, {{32}}, {{32}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return rms_norm(x[0], x[1]); }, {{{2, 3, 32}}, {{32}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return gelu(x[0]); }, {{{6, 32}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return gelu(x[0], GeluApprox::none); }, {{{6, 32}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return swiglu(x[0], silu(x[1])); }, {{{6, 32}}, {{6, 32}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return softmax(x[0], 1); }, {{{6, 32, 3}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return log_softmax(x[0]); }, {{{6, 32}}}));
}

TEST(MetaParity, LossAndIndexOps) {
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return cross_entropy(x[0], x[1]); },
                               {{{12, 50}}, {{12}, DType::i64, false, 0, 50}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return embedding(x[0], x[1]); },
                               {{{50, 16}}, {{2, 6}, DType::i64, false, 0, 50}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return topk(x[0], 3).values; }, {{{8, 10}}}));
  EXPECT_TRUE(
      meta_matches_cpu([](auto& x) { return gather(x[0], 1, x[1]); }, {{{8, 10}}, {{8, 4}, DType::i64, false, 0, 10}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return index_add(x[0], 0, x[2], index_select(x[1], 0, x[2])); },
                               {{{8, 4}}, {{8, 4}}, {{5}, DType::i64, false, 0, 8}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return scatter_add(x[0], 1, x[2], x[1]); },
                               {{{4, 6}}, {{4, 3}}, {{4, 3}, DType::i64, false, 0, 6}}));
}

TEST(MetaParity, AttentionAndRope) {
  for (AttentionKernel kernel : {AttentionKernel::eager, AttentionKernel::flash}) {
    AttentionOptions opt;
    opt.kernel = kernel;
    opt.dropout_p = 0.1;
    EXPECT_TRUE(meta_matches_cpu([&](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], opt); },
                                 {{{2, 4, 20, 16}}, {{2, 2, 20, 16}}, {{2, 2, 20, 16}}}))
        << "kernel " << (kernel == AttentionKernel::flash ? "flash" : "eager");
    // A block of a larger matrix (context parallelism): the same allocations.
    opt.dropout_frame.rows = 40;
    opt.dropout_frame.cols = 60;
    opt.dropout_frame.row_offset = 20;
    opt.dropout_frame.col_offset = 10;
    opt.causal = false;
    EXPECT_TRUE(meta_matches_cpu(
        [&](auto& x) {
          opt.dropout_frame.rng = reserve_attention_dropout(2, 4, 40, 60);
          return scaled_dot_product_attention(x[0], x[1], x[2], opt);
        },
        {{{2, 4, 20, 16}}, {{2, 2, 20, 16}}, {{2, 2, 20, 16}}}))
        << "kernel " << (kernel == AttentionKernel::flash ? "flash" : "eager") << " with a dropout frame";
  }
  EXPECT_TRUE(meta_matches_cpu(
      [](auto& x) {
        RopeTables t = rope_tables(10, 16, 10000.0, DType::f32, x[0].device());
        return apply_rope(x[0].transpose(1, 2), t.cos, t.sin);
      },
      {{{2, 10, 3, 16}}}));
}

}  // namespace tidal
