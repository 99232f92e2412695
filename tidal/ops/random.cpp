#include "tidal/ops/random.h"

#include <algorithm>
#include <mutex>

#include "tidal/backend/cpu/dispatch.h"
#include "tidal/backend/cpu/parallel.h"
#include "tidal/backend/cpu/philox.h"
#include "tidal/backend/cpu/vec_math.h"
#include "tidal/ops/common.h"
#include "tidal/ops/elementwise.h"

namespace tidal {
namespace {

std::mutex g_rng_mu;
RngState g_rng{0x7469'6461'6c00'0001ull, 0};  // "tidal" + 1

template <typename F>
Tensor generate(const char* op, const Shape& shape, DType dtype, Device device, F draw) {
  OpScope scope(op);
  Tensor out = empty(shape, dtype, device);
  const uint64_t n = uint64_t(out.numel());
  const RngState st = get_rng_state();
  const uint64_t start = reserve_random(n);
  if (out.is_meta()) return out;
  cpu::dispatch_float(dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    cpu::parallel_for(0, int64_t(n), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = T(acc_t<T>(draw(st.seed, start + uint64_t(i))));
    });
  });
  return out;
}

// grad_in = g * mask * scale in one pass (no f32 copy of the mask).
struct DropoutBackward : autograd::Node {
  autograd::SavedTensor mask;
  double scale = 1.0;
  const char* name() const override { return "DropoutBackward"; }
  autograd::TensorList apply(autograd::TensorList&& grads) override {
    Tensor m = mask.unpack(name());
    Tensor g = grads[0].contiguous();
    Tensor out = empty(g.shape(), g.dtype(), g.device());
    if (out.is_meta()) return {out};
    cpu::dispatch_float(g.dtype(), "dropout", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = acc_t<T>;
      const T* gp = g.data<T>();
      const uint8_t* mp = m.data<uint8_t>();
      T* op = out.data<T>();
      const A sc = A(scale);
      cpu::parallel_for(0, g.numel(), 32768, [&](int64_t b, int64_t e) {
        const T* g_ = gp;  // locals, so the loop vectorizes
        const uint8_t* m_ = mp;
        T* o_ = op;
        const A s_ = sc;
#pragma omp simd
        for (int64_t i = b; i < e; ++i) o_[i] = cpu::store_as<T>(m_[i] ? A(g_[i]) * s_ : A(0));
      });
    });
    return {out};
  }
  void release_saved() override { mask.reset(); }
};

}  // namespace

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_rng_mu);
  g_rng = {seed, 0};
}

RngState get_rng_state() {
  std::lock_guard<std::mutex> lock(g_rng_mu);
  return g_rng;
}

void set_rng_state(const RngState& state) {
  TIDAL_CHECK(state.offset % 4 == 0, "[rng] the offset of an RNG state must be a multiple of 4, got ", state.offset);
  std::lock_guard<std::mutex> lock(g_rng_mu);
  g_rng = state;
}

uint64_t reserve_random(uint64_t n) {
  std::lock_guard<std::mutex> lock(g_rng_mu);
  const uint64_t start = g_rng.offset;
  g_rng.offset += (n + 3) / 4 * 4;
  return start;
}

Tensor rand(const Shape& shape, DType dtype, Device device) {
  return generate("rand", shape, dtype, device, [](uint64_t s, uint64_t pos) { return cpu::philox_uniform(s, pos); });
}

Tensor randn(const Shape& shape, DType dtype, Device device) {
  return generate("randn", shape, dtype, device, [](uint64_t s, uint64_t pos) { return cpu::philox_normal(s, pos); });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Device device) {
  OpScope scope("randint");
  TIDAL_CHECK(high > low, "[randint] empty range [", low, ", ", high, ")");
  Tensor out = empty(shape, dtype, device);
  const RngState st = get_rng_state();
  const uint64_t start = reserve_random(uint64_t(out.numel()));
  if (out.is_meta()) return out;
  const uint64_t range = uint64_t(high - low);
  cpu::dispatch_index(dtype, "randint", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    cpu::parallel_for(0, out.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const uint64_t pos = start + uint64_t(i);
        const uint32_t r = cpu::philox4x32(pos / 4, st.seed)[pos % 4];
        p[i] = T(low + int64_t(uint64_t(r) * range >> 32));
      }
    });
  });
  return out;
}

Tensor dropout(const Tensor& x, double p, bool training) {
  OpScope scope("dropout");
  detail::check_floating("dropout", x);
  TIDAL_CHECK(p >= 0.0 && p < 1.0, "[dropout] probability must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  const RngState st = get_rng_state();
  const uint64_t start = reserve_random(uint64_t(x.numel()));
  Tensor mask = empty(x.shape(), DType::u8, x.device());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  const double scale = 1.0 / (1.0 - p);
  if (!out.is_meta()) {
    Tensor xc = x.detach().contiguous();
    const float pf = float(p);
    cpu::dispatch_float(x.dtype(), "dropout", [&](auto tag) {
      using T = typename decltype(tag)::type;
      using A = acc_t<T>;
      const T* xp = xc.data<T>();
      T* op = out.data<T>();
      uint8_t* mp = mask.data<uint8_t>();
      const A sc = A(scale);
      // One Philox block gives 4 consecutive positions (start is a multiple of 4); blocks are drawn
      // 256 at a time into a buffer, then the mask and the scaling run as one vectorized loop.
      const int64_t n = x.numel(), blocks = (n + 3) / 4;
      constexpr int64_t kChunk = 256;  // blocks per buffer
      cpu::parallel_for(0, (blocks + kChunk - 1) / kChunk, 16, [&](int64_t c0, int64_t c1) {
        alignas(64) uint32_t bits[4 * kChunk];
        const T* x_ = xp;  // locals: pointers read through the closure keep the loop scalar
        T* o_ = op;
        uint8_t* m_ = mp;
        const float p_ = pf;
        const A s_ = sc;
        for (int64_t c = c0; c < c1; ++c) {
          const int64_t b0 = c * kChunk, nb = std::min(kChunk, blocks - b0);
          cpu::philox4x32_fill(start / 4 + uint64_t(b0), st.seed, nb, bits);
          const int64_t i0 = b0 * 4, m = std::min(nb * 4, n - i0);
#pragma omp simd
          for (int64_t e = 0; e < m; ++e) {
            const bool keep = cpu::u32_to_unit(bits[e]) >= p_;
            m_[i0 + e] = uint8_t(keep);
            o_[i0 + e] = cpu::store_as<T>(keep ? A(x_[i0 + e]) * s_ : A(0));
          }
        }
      });
    });
  }
  if (autograd::needs_grad(x)) {
    auto node = autograd::make_node<DropoutBackward>({&x});
    node->mask = autograd::SavedTensor(mask);
    node->scale = scale;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace tidal
