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
  ShardLayout layout;  // how the saved state was sharded (the same parameters as the target's)
  // Saved rank r's state dict; called at most once per rank, and what it returns is dropped when used.
  std::function<std::map<std::string, Tensor>(int rank)> read;
  // What to call saved rank r's state in errors (its file).
  std::function<std::string(int rank)> source;
};

// Rank `rank`'s state in layout `to`, in the form its AdamW's load_state_dict takes, assembled from
// the saved ranks that hold its pieces (read in rank order): moments flat, or with `whole_shapes` a
// whole parameter's moments in the parameter's shape (one process's AdamW). `params` are the whole
// parameters, in the layouts' order. Throws tidal::Error naming the saved file when an entry belongs
// to no fragment of its rank, has the wrong number of elements or dtype, lacks a moment, or when the
// saved ranks disagree on a step count.
std::map<std::string, Tensor> reshard_state(const NamedParameters& params, const SavedState& saved,
                                            const ShardLayout& to, int rank, bool whole_shapes);

}  // namespace tidal::optim
