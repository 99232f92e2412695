#pragma once
// Megatron's main_grad for --bf16 (train/precision.h): each bf16 parameter's gradients are summed in
// f32 over the micro-batches of a step. A post-accumulate-grad hook adds every backward's bf16
// gradient into the parameter's f32 sum (MemoryCategory::gradient) and drops the bf16 one, so
// between backwards a parameter holds no gradient of its own and the next backward starts a fresh
// bf16 one. After the step's last backward, expose() makes each sum the parameter's gradient
// (Tensor::set_grad takes an f32 gradient for a bf16 tensor): clipping, the NaN guard and AdamW read
// it as they read an f32 run's, and AdamW's zero_grad drops it. Under data parallelism expose() runs
// before a reduction, which then sums the f32 gradients over the ranks as it sums an f32 run's. With
// --overlap-grad-reduce the reduction of a bucket starts inside backward, from the hook added after
// this one: in a backward begun with publish = true each sum becomes its parameter's gradient as soon
// as the hook has added into it, before that reduction reads it.
//
// Bytes: 4 per parameter element between backwards (the sums); during a backward one parameter's
// bf16 gradient (2 bytes per element) is alive beside them until its hook has added it, so the
// gradient category peaks at 4 P + 2 max(numel) bytes.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/tensor.h"

namespace tidal::train {

class MainGrads {
 public:
  // Installs the hooks on the bf16 parameters among `params` (the others keep their gradients). The
  // experts' (models::is_expert_parameter) are told apart for expose().
  explicit MainGrads(const std::vector<std::pair<std::string, Tensor>>& params);
  ~MainGrads();  // removes the hooks
  MainGrads(const MainGrads&) = delete;
  MainGrads& operator=(const MainGrads&) = delete;

  // Before each backward: whether the sums it completes become gradients at once (`publish`: a
  // reduction overlapped with this backward reads them).
  void begin_backward(bool publish);

  // After the step's last backward, before its reduction: every sum becomes its parameter's
  // gradient (published ones already are, and are not touched: their reduction may be running), and
  // this holds none. A parameter some other rank of `comm` has a sum for and this one
  // has not (an expert none of its tokens chose) gets f32 zeros, so every rank reduces f32 tensors;
  // one no rank has a sum for keeps no gradient. Every rank of `comm` calls it. `expert_data`
  // (expert parallel): the experts' parameters are asked about over these ranks, the ranks that hold
  // them and sum their gradients (parallel/expert.h), the others over `comm`.
  void expose(dist::Communicator& comm, dist::Communicator* expert_data = nullptr);

 private:
  void on_gradient(size_t i);

  std::vector<Tensor> params_;  // the bf16 ones
  std::vector<char> expert_;    // per parameter: an expert's (models::is_expert_parameter)
  std::vector<Tensor> sums_;
  std::vector<uint64_t> hooks_;  // the keys of the hooks, per parameter
  std::vector<char> published_;  // per parameter: its sum became its gradient in this backward
  bool publish_ = false;
};

}  // namespace tidal::train
