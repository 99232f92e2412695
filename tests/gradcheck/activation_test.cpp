#include <cmath>
#include <limits>

#include "tests/support/gradcheck.h"
#include "tidal/allocator.h"
#include "tidal/ops/activation.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"

namespace tidal {
using testing::all_close;
using testing::gradcheck;
using testing::uniform;

namespace {

// Reference gelu (either form) from existing ops / std::erf, in f64.
Tensor gelu_reference(const Tensor& x, GeluApprox approx) {
  if (approx == GeluApprox::tanh) {
    Tensor u = mul(add(x, mul(pow(x, 3.0), 0.044715)), std::sqrt(2.0 / M_PI));
    return mul(mul(x, 0.5), add(tanh(u), 1.0));
  }
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));
  return from_vector(v, x.shape(), DType::f64);
}

// Gradient of sum(f(x) * w) with respect to each input, for comparing dtypes.
std::vector<Tensor> grads_of(const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> in) {
  for (Tensor& t : in) t = t.detach().set_requires_grad(true);
  Tensor out = f(in);
  sum(mul(out.to(DType::f64), uniform(out.shape(), 99, 0.5, 1.5, false))).backward();
  std::vector<Tensor> g;
  for (Tensor& t : in) g.push_back(t.grad().defined() ? t.grad().to(DType::f64) : Tensor());
  return g;
}

}  // namespace

TEST(GradcheckActivation, Gelu) {
  Tensor x = uniform({4, 7}, 1, -3.0, 3.0);
  EXPECT_TRUE(gradcheck([](auto& in) { return gelu(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return gelu(in[0], GeluApprox::none); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return gelu(in[0].t()); }, {x}));  // strided input
  EXPECT_TRUE(gradcheck([](auto& in) { return gelu(in[0].t(), GeluApprox::none); }, {x}));
}

// The gated MLP activations, SwiGLU and GeGLU (Gemma's: gelu's tanh form of the gate), one kernel each.
TEST(GradcheckActivation, SiluAndTheGatedActivations) {
  Tensor x = uniform({3, 8}, 2, -4.0, 4.0), up = uniform({3, 8}, 3);
  EXPECT_TRUE(gradcheck([](auto& in) { return silu(in[0]); }, {x}));
  EXPECT_TRUE(gradcheck([](auto& in) { return silu(in[0].t()); }, {x}));
  for (Tensor (*glu)(const Tensor&, const Tensor&) : {&swiglu, &geglu}) {
    EXPECT_TRUE(gradcheck([glu](auto& in) { return glu(in[0], in[1]); }, {x, up}));
    EXPECT_TRUE(gradcheck([glu](auto& in) { return glu(in[0].t(), in[1].t()); }, {x, up}));
    // Only one input needing a gradient takes the single-output kernels.
    EXPECT_TRUE(gradcheck([&](auto& in) { return glu(in[0], up.detach()); }, {x}));
    EXPECT_TRUE(gradcheck([&](auto& in) { return glu(x.detach(), in[0]); }, {up}));
    // Halves of one fused projection (B, T, 2H): views with a row stride of 2H.
    Tensor fused = uniform({2, 3, 10}, 4, -2.0, 2.0);
    EXPECT_TRUE(gradcheck(
        [glu](auto& in) {
          std::vector<Tensor> h = chunk(in[0], 2, -1);
          return glu(h[0], h[1]);
        },
        {fused}));
  }
}

TEST(Activation, ValuesMatchReferenceFormulas) {
  Tensor x = uniform({5, 33}, 5, -6.0, 6.0, false);
  for (GeluApprox approx : {GeluApprox::tanh, GeluApprox::none}) {
    EXPECT_TRUE(all_close(gelu(x, approx), gelu_reference(x, approx), 1e-12, 1e-14));
    // f32 (vectorized exp/erf) agrees with f64 to f32 precision; bf16 to bf16 precision.
    EXPECT_TRUE(all_close(gelu(x.to(DType::f32), approx).to(DType::f64), gelu_reference(x, approx), 2e-6, 1e-6));
    EXPECT_TRUE(all_close(gelu(x.to(DType::bf16), approx).to(DType::f64), gelu_reference(x, approx), 1e-2, 1e-2));
  }
  Tensor up = uniform({5, 33}, 6, -2.0, 2.0, false);
  Tensor silu_ref = mul(x, sigmoid(x));
  EXPECT_TRUE(all_close(silu(x), silu_ref, 1e-12, 1e-14));
  EXPECT_TRUE(all_close(swiglu(x, up), mul(silu_ref, up), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(silu(x.to(DType::f32)).to(DType::f64), silu_ref, 2e-6, 1e-6));
  EXPECT_TRUE(all_close(swiglu(x.to(DType::f32), up.to(DType::f32)).to(DType::f64), mul(silu_ref, up), 2e-6, 1e-6));
  EXPECT_TRUE(all_close(swiglu(x.to(DType::bf16), up.to(DType::bf16)).to(DType::f64), mul(silu_ref, up), 2e-2, 2e-2));
  const Tensor geglu_ref = mul(gelu_reference(x, GeluApprox::tanh), up);
  EXPECT_TRUE(all_close(geglu(x, up), geglu_ref, 1e-12, 1e-14));
  EXPECT_TRUE(all_close(geglu(x.to(DType::f32), up.to(DType::f32)).to(DType::f64), geglu_ref, 2e-6, 1e-6));
  EXPECT_TRUE(all_close(geglu(x.to(DType::bf16), up.to(DType::bf16)).to(DType::f64), geglu_ref, 2e-2, 2e-2));
}

TEST(Activation, LowPrecisionGradientsAgreeWithF64) {
  Tensor x = uniform({6, 40}, 7, -5.0, 5.0, false), up = uniform({6, 40}, 8, -2.0, 2.0, false);
  using F = std::function<Tensor(const std::vector<Tensor>&)>;
  const std::vector<F> fns = {[](auto& in) { return gelu(in[0]); },
                              [](auto& in) { return gelu(in[0], GeluApprox::none); },
                              [](auto& in) { return silu(in[0]); }, [](auto& in) { return swiglu(in[0], in[1]); },
                              [](auto& in) { return geglu(in[0], in[1]); }};
  for (const F& f : fns) {
    std::vector<Tensor> g64 = grads_of(f, {x, up});
    std::vector<Tensor> g32 = grads_of(f, {x.to(DType::f32), up.to(DType::f32)});
    std::vector<Tensor> g16 = grads_of(f, {x.to(DType::bf16), up.to(DType::bf16)});
    for (size_t k = 0; k < g64.size(); ++k) {
      if (!g64[k].defined()) continue;
      EXPECT_TRUE(all_close(g32[k], g64[k], 1e-5, 1e-5)) << "input " << k;
      EXPECT_TRUE(all_close(g16[k], g64[k], 3e-2, 3e-2)) << "input " << k;
    }
  }
}

TEST(Activation, SaturatesWithoutNaN) {
  // Saturation: no NaN from inf / inf at large |x|.
  Tensor big = from_vector({-1e4, -80, 80, 1e4}, Shape{4});
  EXPECT_EQ(gelu(big).to_vector<float>(), (std::vector<float>{-0.0f, -0.0f, 80, 1e4}));
  EXPECT_TRUE(all_close(silu(big), from_vector({-0.0, -80 / (1 + std::exp(80.0)), 80, 1e4}, Shape{4}), 1e-6, 0));
}

TEST(Activation, MetaShapesAndAccounting) {
  Allocator& meta = device_allocator(Device::meta());
  const int64_t before = meta.stats().allocated;
  {
    Tensor gate = empty({4, 16, 64}, DType::bf16, Device::meta()).set_requires_grad(true);
    Tensor up = empty({4, 16, 64}, DType::bf16, Device::meta()).set_requires_grad(true);
    Tensor y = swiglu(gate, up);
    Tensor z = gelu(y, GeluApprox::none);
    Tensor s = silu(z);
    EXPECT_TRUE(s.is_meta());
    EXPECT_EQ(s.shape(), gate.shape());
    EXPECT_EQ(meta.stats().allocated - before, 5 * gate.nbytes());  // inputs + three outputs
    s.backward(ones(s.shape(), DType::bf16, Device::meta()));
    ASSERT_TRUE(gate.grad().defined() && up.grad().defined());
    EXPECT_EQ(gate.grad().shape(), gate.shape());
    EXPECT_TRUE(gate.grad().is_meta());
  }
  EXPECT_EQ(meta.stats().allocated, before);
}

TEST(Activation, EmptyInputs) {
  // Forward only: the core's strided loops (clone, add) divide by zero on empty tensors, so
  // AccumulateGrad cannot take an empty gradient yet.
  Tensor x = empty({2, 0});
  EXPECT_EQ(swiglu(gelu(x), silu(x)).shape(), x.shape());
  EXPECT_EQ(gelu(x, GeluApprox::none).shape(), x.shape());
}

TEST(Activation, BadInputs) {
  EXPECT_THROW(gelu(zeros({3}, DType::i64)), Error);
  EXPECT_THROW(silu(Tensor()), Error);
  EXPECT_THROW(swiglu(zeros({2, 3}), zeros({3, 2})), Error);
  EXPECT_THROW(swiglu(zeros({2, 3}), zeros({2, 3}, DType::f64)), Error);
  EXPECT_THROW(swiglu(zeros({2, 3}), zeros({3})), Error);  // no broadcasting
}

}  // namespace tidal
