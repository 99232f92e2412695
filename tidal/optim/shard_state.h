#pragma once
// Optimizer states saved in one shard layout and read back in another: the checkpoints of the
// distributed optimizer (optim/distributed_adamw.h, docs/distributed.md), where every rank saves its
// own shard and a run may resume on a different number of ranks. A saved rank's state is the
// state_dict of its AdamW, whose parameters are the rank's fragments (fragment_name). One process's
// AdamW is the layout of one rank, whose fragments are the whole parameters.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tidal/optim/adamw.h"
#include "tidal/optim/shard_layout.h"

namespace tidal::optim {

// The name of fragment `f` of parameter `name` (of `numel` elements) as a parameter of its own: "<name>"
// when it is the whole parameter, else "<name>[begin:end]".
std::string fragment_name(const std::string& name, int64_t numel, const ShardLayout::Fragment& f);

// The ranks of `from` whose shards hold part of rank `rank`'s shard of `to`, in order; {0} when that
// shard is empty (every saved rank's state holds the optimizer's step count).
std::vector<int> overlapping_ranks(const ShardLayout& from, const ShardLayout& to, int rank);

// A piece of one process's tensor (a parameter, or a state of its AdamW: "<name>.exp_avg"): elements
// [begin, begin + data.numel()) of the flat tensor `name` of shape `shape` (the whole tensor when
// `data` has `shape`). Expert parallel's checkpoint assembles one process's files from them.
struct TensorPiece {
  std::string name;
  Shape shape;
  int64_t begin = 0;
  Tensor data;
};

struct SavedState {
  // The saved parameters' names and element counts, in the layout's order (reshard_state: the
  // target's own parameters when empty).
  std::vector<std::pair<std::string, int64_t>> parameters;
  ShardLayout layout;  // how the saved state was sharded over its ranks
  // Saved rank r's state dict; called at most once per rank, and what it returns is dropped when used.
  std::function<std::map<std::string, Tensor>(int rank)> read;
  // What to call saved rank r's state in errors (its file).
  std::function<std::string(int rank)> source;
};

// A piece of one process's AdamW state that an optimizer holds as one of its parameters: elements
// [begin, begin + length) of the saved parameter `param`'s moments, under the name `name` ("<param>"
// or "<param>[begin:end]", fragment_name), its moments shaped `shape` (the parameter's when whole,
// else flat).
struct StateTarget {
  std::string param;
  int64_t begin = 0, length = 0;
  std::string name;
  Shape shape;
};

// The state of an optimizer holding `targets`, in the form its AdamW's load_state_dict takes,
// assembled from the saved ranks that hold their pieces (read in rank order, only those), each
// target's moments copied into a tensor of its own; with `share`, a saved piece that is a target
// whole is taken as it is, with its step count (one process's file into one process's optimizer:
// no copy, as a plain load_state_dict). Throws tidal::Error naming the saved
// file when an entry belongs to no fragment of its rank, has the wrong number of elements or dtype,
// lacks a moment, when the saved ranks disagree on a step count, or naming a target's parameter the
// saved state does not have.
std::map<std::string, Tensor> assemble_state(const SavedState& saved, const std::vector<StateTarget>& targets,
                                             bool share = false);

// The targets of rank `rank` in layout `to` over `params` (the whole parameters, in the layout's
// order): flat moments, or with `whole_shapes` a whole parameter's moments in its shape (one
// process's AdamW).
std::vector<StateTarget> layout_targets(const NamedParameters& params, const ShardLayout& to, int rank,
                                        bool whole_shapes);
// assemble_state of layout_targets, `params` also the saved parameters when saved.parameters is empty.
std::map<std::string, Tensor> reshard_state(const NamedParameters& params, const SavedState& saved,
                                            const ShardLayout& to, int rank, bool whole_shapes);

}  // namespace tidal::optim
