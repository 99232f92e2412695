#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "tidal/io/safetensors.h"
#include "tidal/shape.h"

namespace tidal::nn {

// A parameter that holds only rows [row, row + its rows) of a whole tensor of shape `whole`, under the whole
// tensor's name: expert parallelism's stacked experts (DeepSeek-V4's experts.gate_up_proj (E, 2F, C), each rank
// the rows of its experts; models/deepseek_v4_moe.h). Checkpoints save it as a piece of the whole tensor
// (elements [begin(), begin() + numel) of the flat whole) and load_state_dict takes its rows of the whole.
struct Slab {
  Shape whole;
  int64_t row = 0;
  int64_t rows = 0;  // the parameter's first dimension
  // The first element's index in the flat whole tensor.
  int64_t begin() const { return whole.empty() || whole[0] == 0 ? 0 : row * (whole.numel() / whole[0]); }
};

// The slab whose parameter `name` is, or whose parameter a state is named after ("<name>.exp_avg", ".exp_avg_sq",
// ".master", ".step": optim::AdamW's state_dict); null for the rest.
const Slab* slab_of(const std::map<std::string, Slab>& slabs, const std::string& name);

class Module;
// Of the stacked tensors a slab of `model` is rows of (its parameter, and its AdamW moments ".exp_avg", ".exp_avg_sq",
// ".master"), the rows to read from a file (io::load_safetensors); none without slabs.
io::SelectRows slab_rows(const Module& model);

}  // namespace tidal::nn
