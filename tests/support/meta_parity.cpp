#include "tests/support/meta_parity.h"

#include "tests/support/gradcheck.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"

namespace tidal::testing {
namespace {

struct Run {
  Shape out_shape;
  int64_t after_forward = 0;
  int64_t peak = 0;
  std::vector<Shape> grad_shapes;
};

Run run_on(Device device, const std::function<Tensor(const std::vector<Tensor>&)>& fn,
           const std::vector<InputSpec>& specs) {
  Allocator& alloc = device_allocator(device);
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < specs.size(); ++i) {
    const InputSpec& s = specs[i];
    Tensor t;
    if (device.is_meta()) {
      t = empty(s.shape, s.dtype, device);
    } else if (is_integral(s.dtype)) {
      t = randint(int64_t(s.lo), int64_t(s.hi), s.shape, s.dtype);
    } else {
      t = uniform(s.shape, 100 + i, s.lo, s.hi, false, s.dtype);
    }
    if (s.requires_grad) t.set_requires_grad(true);
    inputs.push_back(t);
  }
  Run r;
  alloc.reset_peak_stats();
  const int64_t base = alloc.stats().allocated;
  Tensor out = fn(inputs);
  r.out_shape = out.shape();
  r.after_forward = alloc.stats().allocated - base;
  if (out.requires_grad()) {
    Tensor g = device.is_meta() ? empty(out.shape(), out.dtype(), device) : ones(out.shape(), out.dtype());
    out.backward(g);
  }
  r.peak = alloc.stats().peak_allocated - base;
  for (const Tensor& t : inputs) r.grad_shapes.push_back(t.grad().defined() ? t.grad().shape() : Shape{-1});
  return r;
}

}  // namespace

::testing::AssertionResult meta_matches_cpu(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                            const std::vector<InputSpec>& inputs) {
  const Run cpu = run_on(Device::cpu(), fn, inputs);
  const Run meta = run_on(Device::meta(), fn, inputs);
  if (cpu.out_shape != meta.out_shape)
    return ::testing::AssertionFailure() << "output shape: cpu " << cpu.out_shape << " meta " << meta.out_shape;
  if (cpu.after_forward != meta.after_forward)
    return ::testing::AssertionFailure() << "bytes held after forward: cpu " << cpu.after_forward << " meta "
                                         << meta.after_forward;
  if (cpu.peak != meta.peak)
    return ::testing::AssertionFailure() << "peak bytes over forward+backward: cpu " << cpu.peak << " meta "
                                         << meta.peak;
  for (size_t i = 0; i < cpu.grad_shapes.size(); ++i)
    if (cpu.grad_shapes[i] != meta.grad_shapes[i])
      return ::testing::AssertionFailure()
             << "gradient " << i << " shape: cpu " << cpu.grad_shapes[i] << " meta " << meta.grad_shapes[i];
  return ::testing::AssertionSuccess() << "peak " << cpu.peak;
}

}  // namespace tidal::testing
