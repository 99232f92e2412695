#include "tidal/ops/embedding.h"

#include "tidal/ops/common.h"
#include "tidal/ops/index.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

struct EmbeddingBackward : Node {
  Shape weight_shape;  // (V, C)
  SavedTensor ids;
  int64_t padding_idx = -1;
  const char* name() const override { return "EmbeddingBackward"; }
  TensorList apply(TensorList&& g) override {
    Tensor idv = ids.unpack(name());
    Tensor gw = empty(weight_shape, g[0].dtype(), g[0].device());  // (V, C), every row written
    // On meta too: the copies a real run makes.
    const Tensor gc = g[0].contiguous().reshape(Shape{idv.numel(), weight_shape[1]});  // (N, C)
    const Tensor ic = idv.contiguous();
    if (Kernels* kern = kernels_for(gw)) kern->embedding_backward(current_stream(gw.device()), gw, gc, ic);
    if (padding_idx >= 0) gw.narrow(0, padding_idx, 1).fill_(0.0);  // the padding row learns nothing
    return {gw};
  }
  void release_saved() override { ids.reset(); }
};

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids, int64_t padding_idx) {
  OpScope scope("embedding");
  detail::check_floating("embedding", weight);
  detail::check_dim("embedding", weight, 2, "the weight (V, C)");
  detail::check_defined("embedding", ids, "the ids");
  detail::check_same_device("embedding", weight, ids);
  const int64_t vocab = weight.shape()[0];
  detail::check_index_range("embedding", ids, vocab, "id",
                            detail::str_cat(" (V = ", vocab, ", the rows of the weight ", weight.shape(), ")"));
  TIDAL_CHECK(padding_idx < vocab, "[embedding] padding_idx ", padding_idx, " is outside the ", vocab, " rows");
  Shape out_shape = ids.shape();
  TIDAL_CHECK(out_shape.size() < Shape::kMaxDims, "[embedding] ids ", ids.shape(), " have too many dims");
  out_shape.push_back(weight.shape()[1]);
  Tensor out = empty(out_shape, weight.dtype(), weight.device());  // (..., C)
  const Tensor ic = ids.detach().contiguous();                     // on meta too: the copy a real run makes
  if (Kernels* kern = kernels_for(out)) kern->embedding_forward(current_stream(out.device()), out, weight.detach(), ic);
  if (autograd::needs_grad(weight)) {
    auto node = autograd::make_node<EmbeddingBackward>({&weight});
    node->weight_shape = weight.shape();
    node->ids = SavedTensor(ids);
    node->padding_idx = padding_idx;
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace tidal
