#include "tidal/plan/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <vector>

#include "tidal/allocator.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/base/clock.h"
#include "tidal/base/error.h"
#include "tidal/base/threads.h"
#include "tidal/dist/collectives.h"
#include "tidal/dist/communicator.h"
#include "tidal/memory/offload.h"
#include "tidal/memory/spill_file.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/stream.h"

namespace tidal::plan {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The median seconds of one call of `fn` over `reps` timed calls, after one untimed warm-up call
// (first touch of the caching allocator's blocks, oneDNN primitive creation). Stops early, after at
// least one timed call, once the timed calls took kBudgetS: a loaded machine takes longer, not much.
constexpr double kBudgetS = 0.5;
template <typename F>
double median_seconds(F&& fn, int reps) {
  fn();
  std::vector<double> t;
  double total = 0;
  for (int i = 0; i < reps && (i == 0 || total < kBudgetS); ++i) {
    const int64_t start = now_ns();
    fn();
    t.push_back(double(now_ns() - start) * 1e-9);
    total += t.back();
  }
  return std::max(median(t), 1e-9);
}

// The rate a training step's linear layers see: the median over transformer-like shapes (tokens x in
// -> out) of the three products of a linear layer (forward y = x W^T, input gradient dy W, weight
// gradient dy^T x) through tidal's ops, allocation included.
double gemm_rate(DType dtype, bool quick, int reps) {
  struct Shape {
    int64_t tokens, in, out;
  };
  const std::vector<Shape> shapes = quick
                                        ? std::vector<Shape>{{64, 32, 48}}
                                        : std::vector<Shape>{{2048, 768, 3072}, {4096, 1024, 1024}, {8192, 2048, 2048}};
  NoGradGuard no_grad;
  std::vector<double> rates;
  for (const Shape& s : shapes) {
    const Tensor x = randn({s.tokens, s.in}, dtype), w = randn({s.out, s.in}, dtype);
    const Tensor dy = randn({s.tokens, s.out}, dtype);
    const double flops = 2.0 * double(s.tokens) * double(s.in) * double(s.out);
    rates.push_back(flops / median_seconds([&] { linear(x, w); }, reps));
    rates.push_back(flops / median_seconds([&] { matmul(dy, w); }, reps));
    rates.push_back(flops / median_seconds([&] { matmul(dy.t(), x); }, reps));
  }
  return median(rates);
}

// Flash attention forward + backward, causal, B = 1, 12 heads of 64: FLOPs counted as the profile's
// field says, 4·B·H·T·T·D forward halved for causal, and 2.5 times that for the backward (FlashAttention-2's
// count: five products backward against two forward).
double attention_rate(DType dtype, bool quick, int reps) {
  const int64_t heads = quick ? 2 : 12, dim = quick ? 16 : 64;
  const std::vector<int64_t> lengths = quick ? std::vector<int64_t>{32} : std::vector<int64_t>{1024, 2048};
  std::vector<double> rates;
  for (const int64_t t : lengths) {
    Tensor in[3];
    for (Tensor& x : in) x = randn({1, t, heads, dim}, dtype).set_requires_grad(true);
    const Tensor q = in[0].transpose(1, 2), k = in[1].transpose(1, 2), v = in[2].transpose(1, 2);
    const Tensor g = randn({1, t, heads, dim}, dtype).transpose(1, 2);
    AttentionOptions opt;
    opt.kernel = AttentionKernel::flash;
    opt.causal = true;
    const double flops = 3.5 * 4.0 * double(heads) * double(t) * double(t) * double(dim) * 0.5;
    rates.push_back(flops / median_seconds([&] { scaled_dot_product_attention(q, k, v, opt).backward(g); }, reps));
  }
  return median(rates);
}

// A large elementwise add: bytes read plus written per second.
double memory_rate(bool quick, int reps) {
  const int64_t n = quick ? int64_t(1) << 16 : int64_t(1) << 24;  // 64 MiB a tensor
  NoGradGuard no_grad;
  const Tensor a = full({n}, 1.0), b = full({n}, 2.0);
  return 3.0 * 4.0 * double(n) / median_seconds([&] { add(a, b); }, reps);
}

// Tiny ops (one element) through the op layer: dispatch, shape checks, allocation, the kernel call.
double kernel_overhead(bool quick, int reps) {
  const int ops = quick ? 20 : 2000;
  NoGradGuard no_grad;
  const Tensor a = ones({1}), b = ones({1});
  return median_seconds(
             [&] {
               for (int i = 0; i < ops; ++i) add(a, b);
             },
             reps) /
         ops;
}

// The offloader's copy path: copy_async between device memory and host memory (the offload target)
// on a copy stream of its own, waited for.
void copy_rates(bool quick, int reps, DeviceProfile& p) {
  const int64_t n = quick ? int64_t(1) << 18 : int64_t(1) << 24;  // 64 MiB
  const Tensor device = full({n}, 1.0), host = empty_host({n});
  Stream stream("calibrate copies");
  const auto copy = [&](const Tensor& dst, const Tensor& src) {
    copy_async(dst, src, stream);
    stream.synchronize();
  };
  p.d2h_bandwidth = 4.0 * double(n) / median_seconds([&] { copy(host, device); }, reps);
  p.h2d_bandwidth = 4.0 * double(n) / median_seconds([&] { copy(device, host); }, reps);
}

// The disk tier: writes and reads of the spill file (in a temporary directory, removed after) in
// chunks of the offloader's staging buffer. Through the page cache, as the offloader's are.
double disk_rate(const std::string& temp_dir, bool quick, int reps) {
  std::string base = temp_dir;
  if (base.empty()) {
    const char* env = std::getenv("TMPDIR");
    base = env != nullptr && *env != '\0' ? env : "/tmp";
  }
  std::string dir = base + "/tidal-calibrate-XXXXXX";
  TIDAL_CHECK(::mkdtemp(dir.data()) != nullptr, "tidal plan --calibrate: cannot create a directory in ", base, ": ",
              std::strerror(errno), " (set TMPDIR to a writable directory)");
  struct Remove {
    std::string dir;
    ~Remove() { ::rmdir(dir.c_str()); }
  } remove{dir};
  memory::SpillFile file(dir);  // unlinked at once: nothing stays in the directory
  const int64_t total = quick ? int64_t(1) << 20 : int64_t(128) << 20;
  const int64_t chunk = std::min<int64_t>(memory::OffloadOptions{}.staging_bytes, total);
  std::vector<char> buffer(size_t(chunk), 1);
  const int64_t offset = file.allocate(total);
  const auto pass = [&](bool write) {
    for (int64_t done = 0; done < total; done += chunk) {
      const int64_t k = std::min(chunk, total - done);
      if (write)
        file.write(offset + done, buffer.data(), k);
      else
        file.read(offset + done, buffer.data(), k);
    }
  };
  const double write_s = median_seconds([&] { pass(true); }, reps);
  const double read_s = median_seconds([&] { pass(false); }, reps);
  return 2.0 * double(total) / (write_s + read_s);
}

// Under mpirun: an all-reduce across the ranks, bus bandwidth 2(p-1)/p · bytes / time (nccl-tests'
// convention) from the slowest rank's median, and a one-element all-reduce's time as the latency.
void collective_rates(bool quick, int reps, DeviceProfile& p) {
  dist::Communicator& comm = dist::world();
  const int ranks = comm.size();
  if (ranks < 2) return;  // not measured: 0
  const int64_t n = quick ? int64_t(1) << 14 : int64_t(1) << 24;
  const Tensor big = zeros({n}), tiny = zeros({1});
  comm.barrier();
  const double t = dist::all_reduce_max(comm, median_seconds([&] { dist::all_reduce_sum(comm, big); }, reps));
  const double lat = dist::all_reduce_max(comm, median_seconds([&] { dist::all_reduce_sum(comm, tiny); }, reps));
  p.collective_bandwidth = 2.0 * double(ranks - 1) / double(ranks) * 4.0 * double(n) / t;
  p.collective_latency_s = lat;
}

std::string today_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

}  // namespace

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("model name")) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    std::string name = line.substr(colon + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (!name.empty() && name.size() <= 128) return name;
    break;
  }
  return "unknown CPU";
}

DeviceProfile calibrate(const CalibrateOptions& o) {
  // The measurements' own tensors (up to a few hundred MB) are not a run's: an emulated device budget
  // (TIDAL_DEVICE_MEMORY) is lifted while they run and put back after, with what they cached given back
  // (--auto-memory calibrates first when no profile is at hand, and ran out of the budget it plans for).
  Allocator& device = device_allocator(Device::cpu());
  struct LiftedLimit {
    Allocator& a;
    int64_t saved;
    ~LiftedLimit() {
      a.empty_cache();
      a.set_limit(saved);
    }
  } lifted{device, device.limit()};
  device.set_limit(0);
  const bool quick = o.quick;
  const auto step = [&](const char* what) {
    if (o.progress) o.progress(what);
  };
  DeviceProfile p;
  const int ranks = dist::world().size();
  p.name = detail::str_cat(cpu_model_name(), ", ", num_threads(), num_threads() == 1 ? " thread" : " threads",
                           ranks > 1 ? detail::str_cat(", ", ranks, " ranks") : "", " (calibrated)");
  p.source = detail::str_cat("tidal plan --calibrate", quick ? " (quick: tiny shapes, figures meaningless)" : "", ", ",
                             today_utc());
  // memory_bytes stays 0: on the CPU backend the device and the host share the RAM, so the RAM is not
  // a device budget; the plan takes --memory or TIDAL_DEVICE_MEMORY instead (docs/planning.md).
  const int big = quick ? 1 : 3, small = quick ? 1 : 5;
  step("GEMM f32");
  p.gemm_flops_f32 = gemm_rate(DType::f32, quick, big);
  step("GEMM bf16");
  p.gemm_flops_bf16 = gemm_rate(DType::bf16, quick, big);
  step("flash attention f32");
  p.attention_flops_f32 = attention_rate(DType::f32, quick, big);
  step("flash attention bf16");
  p.attention_flops_bf16 = attention_rate(DType::bf16, quick, big);
  step("memory bandwidth");
  p.memory_bandwidth = memory_rate(quick, small);
  step("kernel overhead");
  p.kernel_overhead_s = kernel_overhead(quick, small);
  step("device<->host copies");
  copy_rates(quick, small, p);
  step("disk (spill file)");
  p.disk_bandwidth = disk_rate(o.temp_dir, quick, big);
  if (ranks > 1) step("all-reduce");
  collective_rates(quick, small, p);
  return p;
}

}  // namespace tidal::plan
