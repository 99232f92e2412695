#include "tidal/optim/grad_clip.h"

#include <cmath>

#include "tidal/autograd/grad_mode.h"
#include "tidal/memory_scope.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal::optim {

namespace {

// The gradient norm's chunks of g: ⌈numel / kGradNormChunk⌉ partial sums.
size_t chunk_count(const Tensor& g) { return size_t((g.numel() + kGradNormChunk - 1) / kGradNormChunk); }

}  // namespace

std::vector<double> sum_of_squares_chunks(const Tensor& g) {
  Kernels* kern = kernels_for(g);
  if (kern == nullptr) return {};
  std::vector<double> chunks(chunk_count(g));
  kern->sum_of_squares(current_stream(g.device()), g, kGradNormChunk, chunks.data());
  return chunks;
}

namespace {

double sum_of_chunks(const std::vector<std::vector<double>>& per_gradient) {
  double sum = 0;
  for (const std::vector<double>& chunks : per_gradient) {
    double s = 0;
    for (double c : chunks) s += c;
    sum += s;
  }
  return sum;
}

// f(kernels, stream, begin, end) for each run [begin, end) of `grads` on one device, in order (one call of a
// many-tensor kernel per device: one read-back on a GPU); nothing on the meta device.
template <typename F>
void for_each_device_run(const std::vector<Tensor>& grads, F f) {
  for (size_t begin = 0; begin < grads.size();) {
    size_t end = begin;
    while (end < grads.size() && grads[end].device() == grads[begin].device()) ++end;
    if (Kernels* kern = kernels_for(grads[begin])) f(*kern, current_stream(grads[begin].device()), begin, end);
    begin = end;
  }
}

}  // namespace

double sum_of_squares_from_chunks(const std::vector<std::vector<double>>& per_gradient) {
  return sum_of_chunks(per_gradient);
}

double grad_sum_of_squares(const std::vector<Tensor>& params) {
  OpScope op("grad_norm");
  // The gradients by device, in order: each device's partial sums in one call (one read-back on a GPU).
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    TIDAL_CHECK(p.defined(), "[clip_grad_norm] an undefined parameter");
    const Tensor g = p.grad();
    if (g.defined()) grads.push_back(g.contiguous());
  }
  std::vector<std::vector<double>> chunks(grads.size());
  for_each_device_run(grads, [&](Kernels& kern, Stream& stream, size_t begin, size_t end) {
    std::vector<const Tensor*> xs;
    std::vector<double*> out;
    for (size_t i = begin; i < end; ++i) {
      xs.push_back(&grads[i]);
      chunks[i].resize(chunk_count(grads[i]));
      out.push_back(chunks[i].data());
    }
    kern.sum_of_squares_many(stream, xs, kGradNormChunk, out);
  });
  return sum_of_chunks(chunks);
}

double grad_norm(const std::vector<Tensor>& params) { return std::sqrt(grad_sum_of_squares(params)); }

void scale_gradients(const std::vector<Tensor>& params, double coef) {
  if (coef == 1.0) return;
  OpScope op("clip_grad_norm");
  NoGradGuard no_grad;
  // The contiguous gradients by device, in order: each device's in one call (Kernels::scale_many); any other
  // through mul_.
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.is_contiguous()) {
      g.storage()->bump_version();  // an in-place change, as mul_ records it
      grads.push_back(g);
    } else {
      g.mul_(coef);
    }
  }
  for_each_device_run(grads, [&](Kernels& kern, Stream& stream, size_t begin, size_t end) {
    std::vector<const Tensor*> xs;
    for (size_t i = begin; i < end; ++i) xs.push_back(&grads[i]);
    kern.scale_many(stream, xs, coef);
  });
}

double clip_coefficient(double norm, double max_norm) {
  // PyTorch multiplies by min(coef, 1); scaling by exactly 1 changes nothing, so skip it.
  const double coef = max_norm / (norm + 1e-6);
  return max_norm > 0 && coef < 1.0 ? coef : 1.0;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  const double norm = grad_norm(params);
  scale_gradients(params, clip_coefficient(norm, max_norm));
  return norm;
}

}  // namespace tidal::optim
