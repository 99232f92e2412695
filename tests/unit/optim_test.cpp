// The optimizer family: AdamW against torch.optim.AdamW's numbers and by hand, fp32 master weights of
// bf16 parameters, skipped parameters, state_dict round trips and errors, meta accounting; Megatron's
// learning-rate schedule; clip_grad_norm against torch.nn.utils.clip_grad_norm_.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "tests/support/gradcheck.h"
#include "tidal/allocator.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/base/threads.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/random.h"
#include "tidal/optim/adamw.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/lr_schedule.h"

namespace tidal::optim {
namespace {

Tensor param(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32) {
  Tensor p = from_vector(values, shape, dtype);
  p.set_requires_grad(true);
  return p;
}

void set_grad(const Tensor& p, const std::vector<double>& values) {
  p.set_grad(from_vector(values, p.shape(), p.dtype()));
}

void expect_values(const Tensor& t, const std::vector<double>& want, double rtol, const char* what) {
  std::vector<double> got = t.to(DType::f64).to_vector<double>();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rtol * std::max(1.0, std::abs(want[i]))) << what << " element " << i;
}

}  // namespace

// Reference numbers from /usr/bin/python3 (torch 1.13, CPU), printed with repr() of each f32 value:
//   w = torch.tensor([[0.5, -1.0, 2.0], [0.0, 3.0, -0.25]], requires_grad=True)
//   b = torch.tensor([0.1, -0.2, 0.3], requires_grad=True)
//   opt = torch.optim.AdamW([{"params": [w], "weight_decay": 0.1}, {"params": [b], "weight_decay": 0.0}],
//                           lr=0.1, betas=(0.9, 0.999), eps=1e-8)
//   for t, lr in enumerate([0.1, 0.05, 0.2]):
//       w.grad = torch.tensor([[0.3, -0.1, 0.0], [1.5, -2.0, 0.01]]) * (1 + t) + (-0.2 * t)
//       b.grad = torch.tensor([0.05, 0.5, -1.0]) * (-1) ** t
//       for g in opt.param_groups: g["lr"] = lr
//       opt.step(); print(w.flatten().tolist(), b.tolist())
//   print(opt.state[w]["exp_avg"].flatten().tolist(), opt.state[w]["exp_avg_sq"].flatten().tolist())
TEST(AdamW, MatchesTorchOptimAdamW) {
  Tensor w = param({0.5, -1.0, 2.0, 0.0, 3.0, -0.25}, {2, 3});
  Tensor b = param({0.1, -0.2, 0.3}, {3});
  AdamWOptions opt;
  opt.weight_decay = 0.1;
  AdamW adam({{"w", w}, {"b", b}}, opt);
  EXPECT_TRUE(adam.decays("w"));
  EXPECT_FALSE(adam.decays("b"));  // 1-D: no decay
  const double lrs[] = {0.1, 0.05, 0.2};
  const std::vector<std::vector<double>> want_w = {{0.39500001072883606, -0.8899999856948853, 1.9800000190734863,
                                                    -0.10000000149011612, 3.069999933242798, -0.34749990701675415},
                                                   {0.34315887093544006, -0.8413311243057251, 2.0073068141937256,
                                                    -0.1481153964996338, 3.1026437282562256, -0.3104702830314636},
                                                   {0.13693372905254364, -0.6450406312942505, 2.1328752040863037,
                                                    -0.3382016718387604, 3.231175661087036, -0.1416170448064804}};
  const std::vector<std::vector<double>> want_b = {{2.2351741790771484e-08, -0.29999998211860657, 0.4000000059604645},
                                                   {0.0026316000148653984, -0.2973684072494507, 0.3973684310913086},
                                                   {-0.06452705711126328, -0.3645270764827728, 0.46452710032463074}};
  for (int t = 0; t < 3; ++t) {
    std::vector<double> gw = {0.3, -0.1, 0.0, 1.5, -2.0, 0.01};
    for (double& g : gw) g = float(float(g) * float(1 + t)) + float(-0.2 * t);  // torch's f32 arithmetic
    set_grad(w, gw);
    const double s = t % 2 == 0 ? 1.0 : -1.0;
    set_grad(b, {0.05 * s, 0.5 * s, -1.0 * s});
    adam.step(lrs[t]);
    // The same f32 operations in the same order: equal to f32 rounding (division and sqrt are
    // correctly rounded on both sides; the rest is the same sequence of f32 multiplies and adds).
    expect_values(w, want_w[size_t(t)], 2e-7, "w");
    expect_values(b, want_b[size_t(t)], 2e-7, "b");
  }
  std::map<std::string, Tensor> st = adam.state_dict();
  expect_values(st["w.exp_avg"],
                {0.11030000448226929, -0.11410000920295715, -0.058000002056360245, 0.7835000157356262,
                 -1.1799999475479126, -0.052390001714229584},
                2e-7, "m");
  expect_values(st["w.exp_avg_sq"],
                {0.0004996601492166519, 0.0006598201580345631, 0.00019996000628452748, 0.026887662708759308,
                 0.0625743642449379, 0.00016936741303652525},
                2e-7, "v");
  EXPECT_EQ(st["w.step"].item<int64_t>(), 3);
  EXPECT_EQ(adam.steps(), 3);
}

TEST(AdamW, FirstStepByHand) {
  // At t = 1 the bias corrections give m_hat = g and v_hat = g^2, so the update is
  // p (1 - lr wd) - lr g / (|g| + eps): a step of about lr against the gradient's sign.
  Tensor p = param({1.0, -2.0, 0.5, 0.0}, {2, 2}, DType::f64);
  AdamW adam({{"p", p}}, {.lr = 0.01, .weight_decay = 0.5});
  set_grad(p, {0.25, -3.0, 0.0, 1e-9});
  adam.step();
  const double lr = 0.01, keep = 1 - lr * 0.5;
  auto step = [&](double g) { return lr * g / (std::abs(g) + 1e-8); };
  expect_values(p, {1.0 * keep - step(0.25), -2.0 * keep - step(-3.0), 0.5 * keep, -step(1e-9)}, 1e-15, "p");
}

TEST(AdamW, ParametersWithoutGradientAreSkippedLikePyTorch) {
  Tensor a = param({1.0, 2.0}, {1, 2});
  Tensor b = param({3.0, 4.0}, {1, 2});
  AdamW adam({{"a", a}, {"b", b}}, {.lr = 0.1, .weight_decay = 0.1});
  set_grad(a, {1.0, 1.0});
  adam.step();  // b has no gradient (an MoE expert nobody chose): untouched, not even decayed
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(adam.param_steps("a"), 1);
  EXPECT_EQ(adam.param_steps("b"), 0);
  EXPECT_FALSE(adam.state_dict().count("b.exp_avg"));
  EXPECT_EQ(adam.state_bytes(), 2 * 2 * 4);  // a's moments only
  set_grad(b, {1.0, -1.0});
  adam.step();
  // b's first update uses its own step count 1: the hand-computed first step.
  expect_values(b, {3.0 * 0.99 - 0.1, 4.0 * 0.99 + 0.1}, 1e-7, "b");
  EXPECT_EQ(adam.param_steps("a"), 2);
  EXPECT_EQ(adam.param_steps("b"), 1);
  adam.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(AdamW, Bf16ParametersKeepAnF32MasterWeight) {
  // Updates of ~1e-3 on a weight near 1 are below half of bf16's spacing there (2^-8): without a
  // master copy the weight would round back and never move. With it, the bf16 weight is the f32 trajectory rounded, bit
  // for bit.
  manual_seed(7);
  Tensor init = randn({300}).to(DType::bf16).to(DType::f32);  // bf16-representable starting values
  Tensor p16 = init.to(DType::bf16);
  p16.set_requires_grad(true);
  Tensor p32 = init.clone();
  p32.set_requires_grad(true);
  AdamW a16({{"p", p16}}, {.lr = 1e-3});
  AdamW a32({{"p", p32}}, {.lr = 1e-3});
  for (int t = 0; t < 40; ++t) {
    Tensor g = randn({300}).to(DType::bf16);  // gradients a bf16 model would produce
    p16.set_grad(g);
    p32.set_grad(g.to(DType::f32));
    a16.step();
    a32.step();
  }
  std::map<std::string, Tensor> st = a16.state_dict();
  ASSERT_TRUE(st.count("p.master"));
  EXPECT_TRUE(testing::bitwise_equal(st["p.master"], p32.detach()));
  EXPECT_TRUE(testing::bitwise_equal(p16.detach(), p32.detach().to(DType::bf16)));
  double moved = 0;
  std::vector<float> before = init.to_vector<float>(), after = p16.to(DType::f32).to_vector<float>();
  for (size_t i = 0; i < before.size(); ++i) moved += before[i] != after[i];
  EXPECT_GT(moved, 150);                      // 40 steps of ~1e-3 carry most weights across a bf16 rounding boundary
  EXPECT_EQ(a16.state_bytes(), 3 * 4 * 300);  // m, v, master in f32
}

TEST(AdamW, AnF32GradientOfABf16ParameterUpdatesTheMasterInF32) {
  // --bf16's f32 gradient sums (train/main_grads.h). On bf16-representable gradients: bit for bit the
  // fused bf16 pass. On any f32 gradients: the master is bit for bit the f32 run's parameter, and the
  // bf16 weight that parameter rounded.
  manual_seed(8);
  Tensor init = randn({300}).to(DType::bf16).to(DType::f32);
  Tensor fused = init.to(DType::bf16), mixed = init.to(DType::bf16), mixed2 = init.to(DType::bf16), p32 = init.clone();
  for (Tensor* p : {&fused, &mixed, &mixed2, &p32}) p->set_requires_grad(true);
  AdamW a_fused({{"p", fused}}, {.lr = 1e-3}), a_mixed({{"p", mixed}}, {.lr = 1e-3});
  AdamW a_mixed2({{"p", mixed2}}, {.lr = 1e-3}), a32({{"p", p32}}, {.lr = 1e-3});
  for (int t = 0; t < 10; ++t) {
    Tensor g = randn({300}).to(DType::bf16);
    fused.set_grad(g);
    mixed.set_grad(g.to(DType::f32));
    a_fused.step();
    a_mixed.step();
    Tensor g32 = randn({300});  // not bf16-representable
    mixed2.set_grad(g32);
    p32.set_grad(g32);
    a_mixed2.step();
    a32.step();
  }
  EXPECT_TRUE(testing::bitwise_equal(mixed.detach(), fused.detach()));
  EXPECT_TRUE(testing::bitwise_equal(a_mixed.state_dict()["p.master"], a_fused.state_dict()["p.master"]));
  EXPECT_TRUE(testing::bitwise_equal(a_mixed2.state_dict()["p.master"], p32.detach()));
  EXPECT_TRUE(testing::bitwise_equal(mixed2.detach(), p32.detach().to(DType::bf16)));
  EXPECT_EQ(mixed2.grad().dtype(), DType::f32);
  EXPECT_THROW(fused.set_grad(randn({300}).to(DType::f64)), Error);  // f32 is the one other dtype a bf16 tensor takes
}

TEST(AdamW, StateDictRoundTripThroughSafetensors) {
  manual_seed(3);
  auto make = [](uint64_t seed) {
    manual_seed(seed);
    return std::vector<Tensor>{param(randn({4, 3}).to_vector<double>(), {4, 3}),
                               param(randn({3}).to_vector<double>(), {3}, DType::bf16),
                               param(randn({5}).to_vector<double>(), {5})};
  };
  std::vector<Tensor> pa = make(1), pb = make(1);
  auto named = [](const std::vector<Tensor>& p) {
    return NamedParameters{{"w", p[0]}, {"ln.weight", p[1]}, {"unused", p[2]}};
  };
  AdamW a(named(pa), {.lr = 0.01});
  manual_seed(9);
  std::vector<std::vector<Tensor>> grads;
  for (int t = 0; t < 5; ++t) grads.push_back({randn({4, 3}), randn({3}).to(DType::bf16)});
  auto apply = [&](AdamW& opt, const std::vector<Tensor>& p, int t) {
    p[0].set_grad(grads[size_t(t)][0]);
    p[1].set_grad(grads[size_t(t)][1]);
    opt.step();
  };
  for (int t = 0; t < 3; ++t) apply(a, pa, t);
  const std::string path = ::testing::TempDir() + "tidal_adamw_state.safetensors";
  io::save_safetensors(path, a.state_dict());
  // b: the same parameters (copied after 3 steps) and the optimizer state from the file.
  for (size_t i = 0; i < pa.size(); ++i) {
    NoGradGuard no_grad;
    pb[i].copy_(pa[i].detach());
  }
  AdamW b(named(pb), {.lr = 0.01});
  b.load_state_dict(io::load_safetensors(path).tensors);
  std::remove(path.c_str());
  EXPECT_EQ(b.steps(), 3);
  EXPECT_EQ(b.param_steps("w"), 3);
  EXPECT_EQ(b.param_steps("unused"), 0);
  for (int t = 3; t < 5; ++t) {
    apply(a, pa, t);
    apply(b, pb, t);
  }
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(testing::bitwise_equal(pa[i].detach(), pb[i].detach())) << i;

  // Mismatches are named errors and leave the optimizer as it was.
  std::map<std::string, Tensor> st = a.state_dict();
  auto bad = st;
  bad.erase("w.exp_avg_sq");
  EXPECT_THROW(b.load_state_dict(bad), Error);
  bad = st;
  bad["w.exp_avg"] = zeros({3, 4});
  EXPECT_THROW(b.load_state_dict(bad), Error);
  bad = st;
  bad["ln.weight.master"] = zeros({3}, DType::bf16);
  EXPECT_THROW(b.load_state_dict(bad), Error);
  bad = st;
  bad["other.exp_avg"] = zeros({3});
  EXPECT_THROW(b.load_state_dict(bad), Error);
  bad = st;
  bad.erase("step");
  EXPECT_THROW(b.load_state_dict(bad), Error);
  EXPECT_EQ(b.steps(), 5);
  try {
    bad = st;
    bad["w.exp_avg"] = zeros({3, 4});
    b.load_state_dict(bad);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("w.exp_avg"), std::string::npos) << e.what();
  }
}

TEST(AdamW, MetaDeviceAccountsOptimizerState) {
  // The planner's view: a meta model's step creates exactly the bytes a real one would:
  // 2 f32 moments per parameter (2 x the f32 parameter bytes), plus an f32 master for bf16 (3 f32 copies).
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (Device device : {Device::meta(), Device::cpu()}) {
      nn::Init init;
      init.device = device;
      init.dtype = dtype;
      manual_seed(1);
      auto model = models::create_model(models::preset("tiny-llama"), init);
      Tensor tokens = device.is_meta() ? empty({2, 9}, DType::i64, device) : randint(0, 512, {2, 9});
      models::ModelOutput out = model->forward(tokens.narrow(1, 0, 8));
      models::causal_lm_loss(out, tokens.narrow(1, 1, 8), 0).backward();
      Allocator& alloc = device_allocator(device);
      const int64_t before = alloc.stats()[MemoryCategory::optimizer_state].allocated;
      {
        AdamW adam(model->named_parameters(), {.lr = 1e-3});
        adam.step();
        const int64_t grew = alloc.stats()[MemoryCategory::optimizer_state].allocated - before;
        const int64_t n = model->num_parameters();
        EXPECT_EQ(grew, (dtype == DType::bf16 ? 3 : 2) * 4 * n) << dtype << " " << device;
        EXPECT_EQ(adam.state_bytes(), grew);
      }
      EXPECT_EQ(alloc.stats()[MemoryCategory::optimizer_state].allocated, before);  // freed with the optimizer
    }
  }
}

TEST(AdamW, DefaultWeightDecayRule) {
  nn::Init init;
  init.device = Device::meta();
  auto model = models::create_model(models::preset("tiny-gpt2"), init);
  for (auto& [name, p] : model->named_parameters()) {
    const bool matrix = name.ends_with("wte.weight") || name.ends_with("wpe.weight") ||
                        name.ends_with("c_attn.weight") || name.ends_with("c_proj.weight") ||
                        name.ends_with("c_fc.weight");
    EXPECT_EQ(default_weight_decay(name, p), matrix) << name;
  }
  EXPECT_FALSE(default_weight_decay("x.bias", empty({4, 4}, DType::f32, Device::meta())));
}

TEST(AdamW, BadInputs) {
  Tensor p = param({1, 2}, {2});
  EXPECT_THROW(AdamW({{"p", p}, {"p", p}}), Error);
  EXPECT_THROW(AdamW({{"p", p}}, {.beta1 = 1.0}), Error);
  EXPECT_THROW(AdamW({{"p", p}}, {.weight_decay = -1}), Error);
  EXPECT_THROW(AdamW({{"p", Tensor()}}), Error);
  AdamW adam({{"p", p}});
  EXPECT_THROW(adam.step(-1.0), Error);
  EXPECT_THROW(adam.decays("q"), Error);
}

TEST(LrSchedule, MegatronCosineLinearConstant) {
  LrSchedule s{.lr = 1.0, .min_lr = 0.1, .warmup_iters = 10, .train_iters = 110};
  EXPECT_DOUBLE_EQ(lr_at(0, s), 0.0);  // Megatron's first warmup step runs at warmup_init
  EXPECT_DOUBLE_EQ(lr_at(5, s), 0.5);
  EXPECT_DOUBLE_EQ(lr_at(10, s), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(60, s), 0.55);  // halfway: cos(pi/2) = 0
  EXPECT_NEAR(lr_at(35, s), 0.1 + 0.9 * 0.5 * (std::cos(M_PI * 0.25) + 1), 1e-15);
  EXPECT_DOUBLE_EQ(lr_at(110, s), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(111, s), 0.1);
  s.decay_iters = 60;  // decay finishes before training does
  EXPECT_DOUBLE_EQ(lr_at(35, s), 0.55);
  EXPECT_DOUBLE_EQ(lr_at(80, s), 0.1);
  s.style = LrDecayStyle::linear;
  EXPECT_DOUBLE_EQ(lr_at(35, s), 0.55);
  EXPECT_DOUBLE_EQ(lr_at(20, s), 0.1 + 0.9 * 0.8);
  s.style = LrDecayStyle::constant;
  EXPECT_DOUBLE_EQ(lr_at(3, s), 0.3);
  EXPECT_DOUBLE_EQ(lr_at(1000, s), 1.0);
  s.warmup_init = 0.2;
  EXPECT_DOUBLE_EQ(lr_at(5, s), 0.6);
  LrSchedule no_warmup{.lr = 2.0, .min_lr = 0.0, .train_iters = 4};
  EXPECT_DOUBLE_EQ(lr_at(0, no_warmup), 2.0);
  EXPECT_NEAR(lr_at(2, no_warmup), 1.0, 1e-15);
  EXPECT_EQ(parse_lr_decay_style("cosine"), LrDecayStyle::cosine);
  EXPECT_THROW(parse_lr_decay_style("wsd"), Error);
  EXPECT_THROW(lr_at(0, LrSchedule{.lr = 1.0, .min_lr = 2.0, .train_iters = 4}), Error);
  EXPECT_THROW(lr_at(0, LrSchedule{.lr = 1.0, .warmup_iters = 4, .train_iters = 4}), Error);
  EXPECT_THROW(lr_at(0, LrSchedule{.lr = 1.0}), Error);  // cosine needs a length
}

// /usr/bin/python3 (torch 1.13): p1.grad = [3., 4., 0.], p2.grad = [12., 0.];
// torch.nn.utils.clip_grad_norm_([p1, p2], 1.0) returns 13.0 and leaves p1.grad =
// [0.23076921701431274, 0.307692289352417, 0.0], p2.grad = [0.923076868057251, 0.0].
TEST(ClipGradNorm, MatchesTorch) {
  Tensor p1 = param({0, 0, 0}, {3}), p2 = param({0, 0}, {2}), p3 = param({1}, {1});
  set_grad(p1, {3, 4, 0});
  set_grad(p2, {12, 0});
  EXPECT_EQ(clip_grad_norm({p1, p2, p3}, 0.0), 13.0);  // measures only; p3 has no gradient
  EXPECT_EQ(p1.grad().to_vector<float>(), (std::vector<float>{3, 4, 0}));
  EXPECT_EQ(clip_grad_norm({p1, p2, p3}, 20.0), 13.0);  // below the limit: unchanged
  EXPECT_EQ(p2.grad().to_vector<float>(), (std::vector<float>{12, 0}));
  EXPECT_EQ(clip_grad_norm({p1, p2, p3}, 1.0), 13.0);
  expect_values(p1.grad(), {0.23076921701431274, 0.307692289352417, 0.0}, 1e-7, "p1");
  expect_values(p2.grad(), {0.923076868057251, 0.0}, 1e-7, "p2");
  EXPECT_NEAR(grad_norm({p1, p2}), 1.0, 1e-6);
}

TEST(ClipGradNorm, DeterministicAcrossThreadCounts) {
  manual_seed(5);
  Tensor a = param({0}, {1});
  a = randn({1 << 20});
  a.set_requires_grad(true);
  a.set_grad(randn({1 << 20}));
  Tensor b = param({0}, {1});
  b.set_grad(from_vector({2.0}, {1}));
  const int saved = num_threads();
  set_num_threads(1);
  const double one = grad_norm({a, b});
  set_num_threads(2);
  const double two = grad_norm({a, b});
  set_num_threads(saved);
  EXPECT_EQ(one, two);
  EXPECT_NEAR(one, std::sqrt(double(1 << 20) + 4.0), 0.01 * std::sqrt(double(1 << 20)));
  EXPECT_EQ(grad_norm({empty({4}, DType::f32, Device::meta()).set_requires_grad(true)}), 0.0);
}

}  // namespace tidal::optim
