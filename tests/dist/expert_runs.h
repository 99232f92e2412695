#pragma once
// What the expert-parallel training tests share (tests/dist/expert_parallel_test.cpp,
// expert_parallel_sharded_test.cpp): `tidal train`'s setup and steps keeping what a rank trained and
// measured, and the comparison of E expert-parallel ranks with one process on the same global batch.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tidal/allocator.h"
#include "tidal/dist/communicator.h"
#include "tidal/nn/slab.h"
#include "tidal/tensor.h"
#include "tidal/train/arguments.h"

namespace tidal::train {

struct Trained {
  std::vector<double> losses;
  std::vector<double> norms;              // the gradient norm of each step (before clipping)
  std::map<std::string, Tensor> weights;  // this rank's parameters
  std::map<std::string, nn::Slab> slabs;  // those that are rows of a whole tensor (stacked experts: nn/slab.h)
  int64_t expert_bytes = 0;               // of this rank's expert parameters (not their LoRA adapters)
  int64_t parameter_bytes = 0;            // the allocator's parameter category, after training, less the
                                          // experts' LoRA adapters
  MemoryStats memory;                     // the allocator's after training (peaks since the setup's reset)
  int64_t comm_calls = 0;
  models::ModelConfig model;  // the run's (its MTP depths' MoE layers hold experts too)
};

// `tidal train`'s setup and steps, keeping this rank's trained parameters (its experts only).
Trained train(dist::Communicator& comm, const TrainArgs& args);

// The tolerances of E ranks against one process. An expert's weight gradient adds every EP rank's
// tokens in one matrix product where one process adds micro-batch after micro-batch, and the norm adds
// the squares in another order: fp32 summation order. The losses stay within a few ulps (measured:
// equal on 2 ranks, 2.4e-7 on 4). AdamW turns a gradient element near zero into an update of about
// ±lr whatever its size, so a rounding difference there moves a weight by up to the step's lr (the 4
// steps' lr add up to 5.3e-3, see kBf16Tolerances): measured 6.5e-7 on 2 ranks, 1.5e-5 on 4 (DP 2 × EP 2: 6.6e-6).
constexpr double kLossTolerance = 1e-6;
constexpr double kWeightTolerance = 5e-5;

// `relative`: a weight element may also differ by this fraction of its size (a bf16 rounding).
struct Tolerances {
  double loss = kLossTolerance, weight = kWeightTolerance, relative = 0;
};

// --bf16 against one bf16 process: the first step's loss is the same bit for bit (the exchanged rows
// are bf16 rows moved as bytes, and the experts compute each row as one process does), but an
// expert's weight gradient is one bf16 matrix product over every rank's rows (rounded to bf16 once)
// where one process rounds each micro-batch's before adding it into the f32 sum. From the second step
// the losses differ (measured 6.6e-5 on 2 ranks, 1.5e-4 on 4 with E = 4, 1.0e-4 on DP 2 × EP 2). A
// weight element differs by one bf16 rounding of itself (at most 2^-7 of its size: the norm weights
// near 1 differ by one ulp) plus its f32 master weight's difference, which AdamW bounds by the steps'
// lr (an element whose gradient is near zero moves by about ±lr whatever the gradient's rounding):
// 2e-3, 1.74e-3, 1.1e-3 and 4.6e-4 (no warmup in 4 iterations, cosine to 2e-4), 5.3e-3 in all;
// measured 4.2e-3 beyond the rounding on 2 and 4 ranks, 4.5e-3 on DP 2 × EP 2 (embedding rows).
constexpr Tolerances kBf16Tolerances{3e-4, 5.3e-3, 0x1p-7};

// The arguments of an expert-parallel comparison run: `model` (a MoE preset), 4 steps, micro-batches of 2,
// `micro_per_rank` of them per rank of this run's world, with `flags`.
TrainArgs expert_args(int64_t micro_per_rank, const std::vector<std::string>& flags,
                      const std::string& model = "tiny-qwen3-moe");

// `ep` (this run's ranks with --expert-model-parallel-size `e`) against `one` (one process
// accumulating the same micro-batches): losses and every parameter of this rank (the experts by
// their global names, stacked experts by their rows of the whole tensor) within `tol`; this rank holds num_experts / E
// experts of each sparse layer of `ep`'s model (its MTP depths' included; `element` bytes each).
void expect_agrees(const Trained& ep, const Trained& one, int e, int64_t element, Tolerances tol);

// This run's ranks with --expert-model-parallel-size `e` (and `extra`) against one process
// accumulating the same micro-batches, both with `both`; returns the expert-parallel run.
Trained compare_with_one_process(int e, const std::vector<std::string>& extra = {},
                                 const std::vector<std::string>& both = {}, Tolerances tol = {},
                                 const std::string& model = "tiny-qwen3-moe");

// A tiny DeepSeek-V4 (tests/fixtures/hf/tiny_deepseek_v4_csa: CSA and HCA layers, hash-routed and top-k MoE layers,
// 4 stacked experts each), as a config path for expert_args / compare_with_one_process.
std::string tiny_deepseek_v4();

// The same names, dtypes and shapes, and values within `tolerance` (0: bitwise); with
// TIDAL_PRINT_DIFFERENCES set, prints the largest difference (to measure the tolerances).
void expect_same_tensors(const std::map<std::string, Tensor>& got, const std::map<std::string, Tensor>& want,
                         double tolerance, const std::string& what);

// A Hugging Face directory of tiny-qwen3-moe at DIR/hf (seed 99, not the training's 1234: the
// weights are the directory's), written by rank 0 of `world` after emptying DIR; every rank returns
// once it is there.
void write_pretrained_moe(dist::Communicator& world, const std::string& dir);
// The flags of a run from it: --pretrained DIR/hf, mock data, 2 steps of micro-batches of 2 x 16
// tokens, `global` samples a step, no dropout.
std::vector<std::string> pretrained_moe_flags(const std::string& dir, int64_t global);

}  // namespace tidal::train
