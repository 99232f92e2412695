#include "tidal/ops/matmul.h"

#include <mutex>

#include "tidal/ops/common.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

// The workspace a dry run holds for its products (release_planned_matmul_workspace).
struct PlannedWorkspace {
  std::mutex mutex;
  Tensor held;
};
PlannedWorkspace& planned_workspace() {
  static PlannedWorkspace* w = new PlannedWorkspace;  // never destroyed: a meta tensor outliving its allocator
  return *w;
}

// out = alpha * a @ b + beta * out, for any floating dtype (bf16 with f32 accumulation in the
// kernel). Operand copies are made on meta tensors too, so meta accounting matches a real run byte
// for byte.
void matmul_into(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  Tensor ac = matmul_operand(a), bc = matmul_operand(b);
  hold_planned_matmul_workspace(out);
  if (Kernels* kern = kernels_for(out)) kern->matmul(current_stream(out.device()), out, ac, bc, alpha, beta);
}

// out = a @ b + bias (bias (n) over out's rows): the device's product with its bias (Kernels::matmul_bias:
// one fused product on CUDA; elsewhere the bias copied into out, then the product added).
void matmul_bias_into(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& bias) {
  Tensor ac = matmul_operand(a), bc = matmul_operand(b);
  hold_planned_matmul_workspace(out);
  if (Kernels* kern = kernels_for(out)) kern->matmul_bias(current_stream(out.device()), out, ac, bc, bias);
}

Shape matmul_shape(const Tensor& a, const Tensor& b) {
  TIDAL_CHECK(a.dim() >= 2 && b.dim() >= 2, "[matmul] needs operands with at least 2 dims, got ", a.shape(), " and ",
              b.shape());
  TIDAL_CHECK(a.size(-1) == b.size(-2), "[matmul] inner dims differ: ", a.shape(), " @ ", b.shape(), " (", a.size(-1),
              " vs ", b.size(-2), ")");
  Shape ba, bb;
  for (int d = 0; d < a.dim() - 2; ++d) ba.push_back(a.shape()[d]);
  for (int d = 0; d < b.dim() - 2; ++d) bb.push_back(b.shape()[d]);
  Shape out = broadcast_shapes(ba, bb, "matmul");
  out.push_back(a.size(-2));
  out.push_back(b.size(-1));
  return out;
}

Tensor matmul_forward(const Tensor& a, const Tensor& b) {
  Tensor out = empty(matmul_shape(a, b), a.dtype(), a.device());
  matmul_into(out, a, b, 1.0, 0.0);
  return out;
}

struct MatmulBackward : Node {
  SavedTensor a, b;
  Shape a_shape, b_shape;
  const char* name() const override { return "MatmulBackward"; }
  TensorList apply(TensorList&& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    if (needs_input_grad(0)) ga = sum_to(matmul_forward(g, b.unpack(name()).mT()), a_shape);
    if (needs_input_grad(1)) {
      Tensor av = a.unpack(name());
      if (b_shape.size() == 2 && av.dim() > 2) {  // one product over all folded rows
        gb = matmul_forward(av.reshape(Shape{-1, av.size(-1)}).mT(), g.reshape(Shape{-1, g.size(-1)}));
      } else {
        gb = sum_to(matmul_forward(av.mT(), g), b_shape);
      }
    }
    return {ga, gb};
  }
  void release_saved() override { autograd::reset_all(a, b); }
};

struct LinearBackward : Node {
  SavedTensor x, w;
  bool has_bias = false;
  const char* node_name = "LinearBackward";
  const char* name() const override { return node_name; }
  TensorList apply(TensorList&& grads) override {
    const Tensor& g = grads[0];  // (..., out)
    Tensor gx, gw, gb;
    if (needs_input_grad(0)) {
      Tensor wv = w.unpack(name());
      gx = g.dim() == 1 ? matmul_forward(g.unsqueeze(0), wv).squeeze(0) : matmul_forward(g, wv);  // (..., in)
    }
    if (needs_input_grad(1)) {
      Tensor xv = x.unpack(name());
      gw = matmul_forward(g.reshape(Shape{-1, g.size(-1)}).mT(), xv.reshape(Shape{-1, xv.size(-1)}));  // (out, in)
    }
    if (has_bias && needs_input_grad(2)) gb = sum_to(g, Shape{g.size(-1)});
    return {gx, gw, gb};
  }
  void release_saved() override { autograd::reset_all(x, w); }
};

void check_matmul_dtype(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_same(op, a, b);
  detail::check_floating(op, a);
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  OpScope scope("matmul");
  check_matmul_dtype("matmul", a_in, b_in);
  TIDAL_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "[matmul] scalars cannot be multiplied: ", a_in.shape(), " @ ",
              b_in.shape());
  if (a_in.dim() == 1) return squeeze(matmul(unsqueeze(a_in, 0), b_in), -2);
  if (b_in.dim() == 1) return squeeze(matmul(a_in, unsqueeze(b_in, 1)), -1);
  // The inputs are saved before the product, as PyTorch does: a checkpoint replay whose last save
  // this is stops here, without computing a product it would throw away (Note [Checkpoint]).
  std::shared_ptr<MatmulBackward> node;
  if (autograd::needs_grad(a_in, b_in)) {
    node = autograd::make_node<MatmulBackward>({&a_in, &b_in});
    if (b_in.requires_grad()) node->a = SavedTensor(a_in);
    if (a_in.requires_grad()) node->b = SavedTensor(b_in);
    node->a_shape = a_in.shape();
    node->b_shape = b_in.shape();
  }
  Tensor out = matmul_forward(a_in, b_in);
  if (node) autograd::set_history(out, node);
  return out;
}

namespace {

Tensor linear_node(const Tensor& x, const Tensor& w, const Tensor& bias, const char* backward_name) {
  OpScope scope("linear");
  check_matmul_dtype("linear", x, w);
  TIDAL_CHECK(w.dim() == 2, "[linear] the weight must be (out, in), got ", w.shape());
  TIDAL_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1), "[linear] input ", x.shape(),
              " does not end in the weight's in_features ", w.size(1), " (weight ", w.shape(), ")");
  if (bias.defined()) {
    check_matmul_dtype("linear", x, bias);
    TIDAL_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), "[linear] bias must be (", w.size(0), "), got ",
                bias.shape());
  }
  // Inputs saved before the product, as in matmul (a checkpoint replay can stop here).
  std::shared_ptr<LinearBackward> node;
  if (autograd::needs_grad(x, w, bias)) {
    node = autograd::make_node<LinearBackward>({&x, &w, &bias});
    node->node_name = backward_name;
    if (w.requires_grad()) node->x = SavedTensor(x);
    if (x.requires_grad()) node->w = SavedTensor(w);
    node->has_bias = bias.defined();
  }
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = w.size(0);
  Tensor out = empty(out_shape, x.dtype(), x.device());                   // (..., out)
  const Tensor x2 = x.dim() == 1 ? x.detach().unsqueeze(0) : x.detach();  // (..., m, in)
  const Tensor out2 = x.dim() == 1 ? out.detach().unsqueeze(0) : out;     // (..., m, out)
  if (bias.defined())
    matmul_bias_into(out2, x2, w.detach().t(), bias.detach());
  else
    matmul_into(out2, x2, w.detach().t(), 1.0, 0.0);
  if (node) autograd::set_history(out, node);
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  return linear_node(x, w, bias, "LinearBackward");
}

Tensor lm_head(const Tensor& x, const Tensor& w) { return linear_node(x, w, Tensor(), kLmHeadBackward); }

// On meta tensors: from the first product on, the bytes the planned device's products keep (allocated where
// the CUDA backend allocates cuBLASLt's workspace: inside the first product, category temporary).
void hold_planned_matmul_workspace(const Tensor& out) {
  if (!out.is_meta()) return;
  const int64_t bytes = device_kernels(out.device()).matmul_kept_workspace();
  if (bytes == 0) return;
  PlannedWorkspace& w = planned_workspace();
  std::lock_guard<std::mutex> lock(w.mutex);
  if (w.held.defined()) return;
  MemoryScope scope(MemoryCategory::temporary);
  w.held = empty({bytes}, DType::u8, out.device());
}

// A view the device's matmul can read without a copy, else a contiguous copy.
Tensor matmul_operand(const Tensor& t) {
  if (device_kernels(t.device()).matmul_operand_ok(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1))) return t;
  return t.detach().contiguous();
}

void release_planned_matmul_workspace() {
  PlannedWorkspace& w = planned_workspace();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.held = Tensor();
}

}  // namespace tidal
