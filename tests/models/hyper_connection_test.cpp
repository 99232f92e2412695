// DeepSeek-V4's mHC (models/hyper_connection.h) against transformers' DeepseekV4HyperConnection and
// DeepseekV4HyperHead (tests/fixtures/hf/deepseek_v4_hc, scripts/deepseek_v4_fixtures.py hc).
#include "tidal/models/hyper_connection.h"

#include <gtest/gtest.h>

#include "tests/models/hf_golden.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/reduce.h"

namespace tidal::models {
namespace {

HyperConnectionConfig golden_config() {
  HyperConnectionConfig c;
  c.streams = 4;
  c.hidden = 8;
  c.sinkhorn_iters = 20;
  c.eps = 1e-6;
  c.norm_eps = 1e-6;
  return c;
}

void expect_close(const char* what, const Tensor& a, const Tensor& b, double tol = 1e-5) {
  EXPECT_LE(relative_error(a.detach().to(DType::f32), b), tol) << what;
}

}  // namespace

TEST(HyperConnection, MatchesTransformers) {
  const GoldenFiles g = load_golden("deepseek_v4_hc");
  nn::Init init;
  HyperConnection conn(golden_config(), init);
  HyperHead head(golden_config(), init);
  conn.load_state_dict({{"fn", g.at("fn")}, {"base", g.at("base")}, {"scale", g.at("scale")}});
  head.load_state_dict({{"hc_fn", g.at("hc_fn")}, {"hc_base", g.at("hc_base")}, {"hc_scale", g.at("hc_scale")}});
  Tensor streams = g.at("streams").detach().set_requires_grad(true);  // (B, T, N, C)
  Tensor block = g.at("block").detach().set_requires_grad(true);      // (B, T, C)

  const HyperMappings m = conn.collapse(streams);
  const Tensor expanded = HyperConnection::expand(m, streams, block);
  const Tensor out = head.forward(streams);
  expect_close("post", m.post, g.at("post"));
  expect_close("comb", m.comb, g.at("comb"));
  expect_close("collapsed", m.collapsed, g.at("collapsed"));
  expect_close("expanded", expanded, g.at("expanded"));
  expect_close("head", out, g.at("head"));

  Tensor loss = add(add(sum(mul(expanded, g.at("w_expanded"))), sum(mul(m.collapsed, g.at("w_collapsed")))),
                    sum(mul(out, g.at("w_head"))));
  EXPECT_LE(scalar_error(loss, g.at("loss")), 1e-5);
  loss.backward();
  expect_close("grad.streams", streams.grad(), g.at("grad.streams"));
  expect_close("grad.block", block.grad(), g.at("grad.block"));
  for (const auto* mod : {static_cast<const nn::Module*>(&conn), static_cast<const nn::Module*>(&head)})
    for (const auto& [name, p] : mod->named_parameters()) expect_close(name.c_str(), p.grad(), g.at("grad." + name));
}

// Forward and backward on the meta device (the dry run's): shapes only, every gradient made.
TEST(HyperConnection, RunsOnTheMetaDevice) {
  nn::Init init;
  init.device = Device::meta();
  HyperConnection conn(golden_config(), init);
  HyperHead head(golden_config(), init);
  Tensor streams = empty({2, 5, 4, 8}, DType::f32, Device::meta()).set_requires_grad(true);
  const HyperMappings m = conn.collapse(streams);
  EXPECT_EQ(m.comb.shape(), Shape({2, 5, 4, 4}));
  Tensor out = head.forward(HyperConnection::expand(m, streams, m.collapsed));  // (B, T, C)
  EXPECT_EQ(out.shape(), Shape({2, 5, 8}));
  sum(out).backward();
  for (const auto& [name, p] : conn.named_parameters()) EXPECT_TRUE(p.grad().defined() && p.grad().is_meta()) << name;
  EXPECT_TRUE(streams.grad().is_meta());
}

TEST(HyperConnection, RefusesStreamsOfAnotherShape) {
  nn::Init init;
  HyperConnection conn(golden_config(), init);
  HyperHead head(golden_config(), init);
  EXPECT_THROW(conn.collapse(zeros({2, 3, 3, 8})), Error);  // 3 streams, not hc_mult = 4
  EXPECT_THROW(head.forward(zeros({2, 3, 4, 7})), Error);
}

}  // namespace tidal::models
