#pragma once
// The checkpoint the checkpoint target loads (and make_seeds.cpp saves for its seed state.json): always
// the same bytes, so the sizes and CRC-32s in the committed seeds stay right.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tidal/checkpoint/save.h"
#include "tidal/tensor.h"

namespace tidal::fuzz {

inline std::string save_fixture_checkpoint(const std::string& dir) {
  std::map<std::string, Tensor> model, optimizer;
  model["model.embed_tokens.weight"] = from_vector({1, 2, 3, 4, 5, 6}, {3, 2});
  optimizer["exp_avg.model.embed_tokens.weight"] = from_vector({0, 0, 1, 0, 0, 1}, {3, 2});
  checkpoint::TrainingState state;
  state.iteration = 0;
  state.rng = {1234, 8};
  state.data_position = 8;
  state.settings = {{"seq_length", 16}, {"lr", 0.002}, {"model", {{"model_type", "llama"}, {"vocab_size", 3}}}};
  state.extra = {{"tokenizer", "builtin"}};
  checkpoint::save_checkpoint(dir, state, model, optimizer, {{"model_type", "llama"}, {"vocab_size", 3}});
  return dir;
}

}  // namespace tidal::fuzz
