#pragma once
// CPU kernels of the random family (ops/random.h): Philox draws at stream positions start + i.
#include <cstdint>

#include "tidal/backend/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

void random_fill(const Tensor& out, Distribution dist, uint64_t seed, uint64_t start);
void randint_fill(const Tensor& out, int64_t low, int64_t high, uint64_t seed, uint64_t start);
void dropout_forward(const Tensor& out, const Tensor& mask, const Tensor& x, double p, double scale, uint64_t seed,
                     uint64_t start);
void dropout_backward(const Tensor& dx, const Tensor& g, const Tensor& mask, double scale);
// dropout_forward at the positions of DropoutRowsArgs (kernel_args.h): row by row, each row's draw
// starting at any position (not only a multiple of 4).
void dropout_rows_forward(const DropoutRowsArgs& a, const Tensor& out, const Tensor& mask, const Tensor& x, double p,
                          double scale);

}  // namespace tidal::cpu
