// The swap optimizer: window plans (coverage, cuts, balance, errors), parameters and states bitwise
// identical to the in-device AdamW after several steps (f32, bf16 with master weights, f64, skipped
// parameters, every K), the device optimizer_state peak equal to the prediction, host memory and
// moved bytes, meta accounting, state_dict round trips between swapped and in-device AdamW, and what
// both report through AdamW (describe, stats_json).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/error_of.h"
#include "tests/support/gradcheck.h"
#include "tidal/allocator.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/io/safetensors.h"
#include "tidal/memory/savings.h"
#include "tidal/memory/swap_optimizer.h"
#include "tidal/ops/random.h"
#include "tidal/train/memory_flags.h"

namespace tidal::memory {
namespace {

using optim::AdamW;
using optim::NamedParameters;
using testing::error_of;

// Parameters of mixed sizes and dtypes: a big "embedding" that windows must split, small norms.
struct Params {
  std::vector<Tensor> t;
  NamedParameters named() const {
    NamedParameters v;
    for (size_t i = 0; i < t.size(); ++i) {
      std::string name = std::to_string(i);
      name.insert(0, 1, 'p');
      if (t[i].dim() == 1) name += ".bias";
      v.push_back({name, t[i]});
    }
    return v;
  }
  std::vector<SwapParam> swap_params() const {
    std::vector<SwapParam> v;
    for (const Tensor& p : t) v.push_back({p.numel(), p.dtype()});
    return v;
  }
};

Params make_params(uint64_t seed, Device device = Device::cpu()) {
  manual_seed(seed);
  const std::vector<std::pair<Shape, DType>> specs = {
      {{300, 40}, DType::f32}, {{40}, DType::f32}, {{40, 97}, DType::f32}, {{97}, DType::bf16},
      {{33, 17}, DType::bf16}, {{5}, DType::f64},  {{64, 64}, DType::f32}, {{1}, DType::f32},
  };
  Params p;
  for (auto& [shape, dtype] : specs) {
    Tensor x = device.is_meta() ? empty(shape, dtype, device) : randn(shape).to(dtype);
    x.set_requires_grad(true);
    p.t.push_back(x);
  }
  return p;
}

// Step t's gradients: parameter 2 gets none at steps 1 and 2 (an MoE expert nobody chose).
void set_grads(const Params& p, int t) {
  manual_seed(1000 + uint64_t(t));
  for (size_t i = 0; i < p.t.size(); ++i) {
    Tensor g = randn(p.t[i].shape()).to(p.t[i].dtype());
    if (i == 2 && (t == 1 || t == 2)) {
      p.t[i].zero_grad();
    } else {
      p.t[i].set_grad(g);
    }
  }
}

void expect_bitwise(const Params& a, const Params& b, const std::string& what) {
  for (size_t i = 0; i < a.t.size(); ++i)
    EXPECT_TRUE(testing::bitwise_equal(a.t[i].detach(), b.t[i].detach())) << what << " param " << i;
}

void expect_same_states(const AdamW& a, const AdamW& b, const std::string& what) {
  const auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size()) << what;
  for (const auto& [k, v] : sa) {
    ASSERT_TRUE(sb.count(k)) << what << " " << k;
    EXPECT_TRUE(testing::bitwise_equal(v, sb.at(k))) << what << " " << k;
  }
}

}  // namespace

TEST(SwapOptimizer, WindowsCoverEveryElementOnceBalanced) {
  const Params p = make_params(1, Device::meta());
  const std::vector<SwapParam> sp = p.swap_params();
  int64_t total = 0;
  for (const SwapParam& x : sp) total += x.numel * swap_state_bytes_per_element(x.dtype);
  for (int64_t K = 1; K <= int64_t(sp.size()); ++K) {
    const std::vector<SwapWindow> w = plan_swap_windows(sp, K);
    ASSERT_EQ(int64_t(w.size()), K);
    size_t param = 0;
    int64_t next = 0, largest = 0;
    for (const SwapWindow& win : w) {
      ASSERT_FALSE(win.pieces.empty()) << K;
      largest = std::max(largest, win.device_bytes);
      for (const SwapPiece& piece : win.pieces) {  // in order, contiguous, no gaps or overlaps
        if (next == sp[param].numel) {
          ++param;
          next = 0;
        }
        ASSERT_EQ(piece.param, param) << K;
        ASSERT_EQ(piece.begin, next) << K;
        ASSERT_GT(piece.end, piece.begin);
        if (piece.end < sp[param].numel) {
          EXPECT_EQ(piece.end % 64, 0) << K;  // a cut inside a parameter
        }
        next = piece.end;
      }
    }
    EXPECT_EQ(param, sp.size() - 1);
    EXPECT_EQ(next, sp.back().numel);
    // Balanced: no window above its share by more than one 64-element cut of the widest state and
    // the 64-byte alignment of each piece.
    EXPECT_LE(largest, total / K + 64 * 16 + 64 * 3 * int64_t(sp.size())) << K;
    EXPECT_EQ(swap_optimizer_device_bytes(sp, K), (K == 1 ? 1 : 2) * largest);
  }
  // The 12000-element first parameter is split when K = 4 (its states are over half of everything).
  const std::vector<SwapWindow> four = plan_swap_windows(sp, 4);
  ASSERT_EQ(four[0].pieces.size(), 1u);
  EXPECT_LT(four[0].pieces[0].end, 12000);
  EXPECT_EQ(four[1].pieces[0].param, 0u);
  EXPECT_NE(error_of([&] { plan_swap_windows(sp, 0); }).find("between 1 and the number of parameters"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan_swap_windows(sp, 9); }).find("9 windows over 8 parameters"), std::string::npos);
  EXPECT_EQ(swap_optimizer_device_bytes(int64_t(1000), 1), 1000);
  EXPECT_EQ(swap_optimizer_device_bytes(int64_t(1000), 3), 2 * 334);
}

TEST(SwapOptimizer, BitwiseIdenticalToAdamWAtEveryK) {
  for (int64_t K : {1, 2, 3, 5, 8}) {
    Params a = make_params(1), b = make_params(1);
    AdamW plain(a.named(), {.lr = 0.01, .weight_decay = 0.1});
    SwapAdamW swapped(b.named(), K, {.lr = 0.01, .weight_decay = 0.1});
    for (int t = 0; t < 5; ++t) {
      set_grads(a, t);
      set_grads(b, t);
      plain.step(0.01 * (t + 1));
      swapped.step(0.01 * (t + 1));
    }
    expect_bitwise(a, b, "K " + std::to_string(K));
    expect_same_states(plain, swapped, "K " + std::to_string(K));
    EXPECT_EQ(swapped.param_steps("p2"), 3);  // no gradient at steps 1 and 2
    EXPECT_EQ(swapped.steps(), 5);
  }
}

// The trainer reads any optimizer through AdamW: the swap optimizer says where its states live and
// reports its statistics for --metrics-json; the in-device one has no statistics of its own.
TEST(SwapOptimizer, ReportsThroughTheAdamWInterface) {
  Params p = make_params(6);
  std::unique_ptr<AdamW> plain = make_adamw(p.named(), {}, {});
  EXPECT_EQ(plain->describe(), "on the device");
  EXPECT_TRUE(plain->stats_json().is_null());
  std::unique_ptr<AdamW> swapped = make_adamw(p.named(), {}, {true, 4});
  set_grads(p, 0);
  swapped->step(1e-3);
  EXPECT_NE(swapped->describe().find("swapped through the device in 4 windows"), std::string::npos)
      << swapped->describe();
  const nlohmann::json j = swapped->stats_json();
  EXPECT_EQ(j["windows"].get<int64_t>(), 4);
  EXPECT_EQ(j["steps"].get<int64_t>(), 1);
  EXPECT_EQ(j["host_state_bytes"].get<int64_t>(), swapped->state_bytes());
}

TEST(SwapOptimizer, DeviceAndHostMemoryAreThePredictedBytes) {
  Allocator& dev = device_allocator(Device::cpu());
  Allocator& host = host_allocator();
  Params p = make_params(2);
  const int64_t K = 4;
  const int64_t host0 = host.stats()[MemoryCategory::host_offload].allocated;
  const int64_t opt0 = dev.stats()[MemoryCategory::optimizer_state].allocated;
  SwapAdamW opt(p.named(), K, {.lr = 1e-3});
  const int64_t predicted = swap_optimizer_device_bytes(p.swap_params(), K);
  EXPECT_EQ(opt.device_bytes(), predicted);
  int64_t state = 0;
  for (const Tensor& t : p.t) state += t.numel() * swap_state_bytes_per_element(t.dtype());
  for (int t = 0; t < 3; ++t) {
    set_grads(p, t);
    dev.reset_peak_stats();
    opt.step();
    EXPECT_EQ(dev.stats()[MemoryCategory::optimizer_state].peak - opt0, predicted) << t;
    EXPECT_EQ(dev.stats()[MemoryCategory::optimizer_state].allocated, opt0) << t;    // nothing between steps
    EXPECT_EQ(host.stats()[MemoryCategory::host_offload].allocated - host0, state);  // the states live here
  }
  EXPECT_LT(predicted, state * 3 / 4);  // 2 of 4 windows, plus alignment
  // Every state moved in and out at each step, except parameter 2's at steps 1 and 2 (no gradient).
  const int64_t p2 = p.t[2].numel() * 8;
  EXPECT_EQ(opt.stats().bytes_to_device, 3 * state - 2 * p2);
  EXPECT_EQ(opt.stats().bytes_to_host, 3 * state - 2 * p2);
  EXPECT_EQ(opt.stats().steps, 3);
  EXPECT_EQ(opt.state_bytes(), state);
}

TEST(SwapOptimizer, MetaAccountsTheDeviceWindowsOnly) {
  Params p = make_params(3, Device::meta());
  Allocator& meta = device_allocator(Device::meta());
  for (const Tensor& t : p.t) t.set_grad(empty(t.shape(), t.dtype(), Device::meta()));
  SwapAdamW opt(p.named(), 3);
  meta.reset_peak_stats();
  const int64_t opt0 = meta.stats()[MemoryCategory::optimizer_state].allocated;
  const int64_t host0 = host_allocator().stats()[MemoryCategory::host_offload].allocated;
  opt.step();
  EXPECT_EQ(meta.stats()[MemoryCategory::optimizer_state].peak - opt0, swap_optimizer_device_bytes(p.swap_params(), 3));
  EXPECT_EQ(host_allocator().stats()[MemoryCategory::host_offload].allocated, host0);
  EXPECT_EQ(opt.param_steps("p0"), 1);
}

TEST(SwapOptimizer, CheckpointsMoveBetweenSwappedAndInDevice) {
  // Run 3 steps swapped, save, then continue 3 more steps three ways: the same optimizer, a fresh
  // swapped one loaded from the file (another K), an in-device AdamW loaded from it. All bitwise.
  Params a = make_params(4), b = make_params(4), c = make_params(4);
  SwapAdamW first(a.named(), 3, {.lr = 0.02});
  for (int t = 0; t < 3; ++t) {
    set_grads(a, t);
    first.step();
  }
  const std::string path = ::testing::TempDir() + "tidal_swap_state.safetensors";
  io::save_safetensors(path, first.state_dict());
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < a.t.size(); ++i) {
      b.t[i].copy_(a.t[i].detach());
      c.t[i].copy_(a.t[i].detach());
    }
  }
  const auto loaded = io::load_safetensors(path).tensors;
  std::remove(path.c_str());
  SwapAdamW resumed(b.named(), 5, {.lr = 0.02});
  resumed.load_state_dict(loaded);
  AdamW in_device(c.named(), {.lr = 0.02});
  in_device.load_state_dict(loaded);
  expect_same_states(first, resumed, "after load");
  for (int t = 3; t < 6; ++t) {
    for (Params* p : {&a, &b, &c}) set_grads(*p, t);
    first.step();
    resumed.step();
    in_device.step();
  }
  expect_bitwise(a, b, "swapped resume");
  expect_bitwise(a, c, "in-device resume");
  expect_same_states(first, in_device, "in-device resume");
  // And the other way: an in-device state loads into a swapped optimizer.
  Params d = make_params(4);
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < a.t.size(); ++i) d.t[i].copy_(c.t[i].detach());
  }
  SwapAdamW from_device(d.named(), 2, {.lr = 0.02});
  from_device.load_state_dict(in_device.state_dict());
  expect_same_states(in_device, from_device, "from in-device");
}

TEST(SwapOptimizer, FlagsAndLimitsAreChecked) {
  const models::ModelConfig model = models::preset("tiny-gpt2");
  auto parse_swap = [&](const std::vector<std::string>& flags) {
    return train::parse_memory_config(flags, model).swap_optimizer;
  };
  EXPECT_NE(error_of([&] {
              parse_swap({"--swap-optimizer-times", "4"});
            }).find("--swap-optimizer-times needs --swap-optimizer"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_swap({"--swap-optimizer", "--swap-optimizer-times", "0"});
            }).find("must be >= 1"),
            std::string::npos);
  EXPECT_EQ(parse_swap({"--swap-optimizer"}).times, -1);
  Params p = make_params(5);
  EXPECT_NE(error_of([&] {
              make_adamw(p.named(), {}, {true, 9});
            }).find("exceeds the model's 8 parameters"),
            std::string::npos);
  auto def = make_adamw(p.named(), {}, {true, -1});  // default 16, capped at the 8 parameters
  ASSERT_NE(dynamic_cast<SwapAdamW*>(def.get()), nullptr);
  EXPECT_EQ(dynamic_cast<SwapAdamW*>(def.get())->windows(), 8);
  EXPECT_EQ(dynamic_cast<SwapAdamW*>(make_adamw(p.named(), {}, {}).get()), nullptr);
  // A shard of a larger model (sharding): K is checked against the model's parameters, and a shard
  // with fewer pieces than K runs a window per piece.
  auto shard = make_adamw(p.named(), {}, {true, 12}, optim::default_weight_decay, 20);
  ASSERT_NE(dynamic_cast<SwapAdamW*>(shard.get()), nullptr);
  EXPECT_EQ(dynamic_cast<SwapAdamW*>(shard.get())->windows(), 8);
  EXPECT_NE(error_of([&] {
              make_adamw(p.named(), {}, {true, 21}, optim::default_weight_decay, 20);
            }).find("exceeds the model's 20 parameters"),
            std::string::npos);
  Tensor meta = empty({3}, DType::f32, Device::meta()).set_requires_grad(true);
  EXPECT_NE(error_of([&] {
              SwapAdamW({{"a", p.t[0]}, {"b", meta}}, 1);
            }).find("one device per optimizer"),
            std::string::npos);
}

}  // namespace tidal::memory
