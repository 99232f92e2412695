#pragma once
// How the distributed optimizer (optim/distributed_adamw.h) splits the parameters over the ranks: the
// parameters laid end to end in one flat index space, cut into one contiguous shard per rank of
// about total / ranks elements (Megatron's layout). A cut inside a parameter falls on a multiple of
// kGradNormChunk from the parameter's start, so the gradient norm assembled from the shards is bit
// for bit the norm of the whole gradients (optim/grad_clip.h); shards differ by less than a chunk.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tidal::optim {

struct ShardLayout {
  std::vector<int64_t> offsets;  // parameter i starts at offsets[i]; offsets.back() is the total
  std::vector<int64_t> bounds;   // rank r owns [bounds[r], bounds[r + 1])

  int64_t total() const { return offsets.back(); }
  int ranks() const { return int(bounds.size()) - 1; }
  int64_t shard_begin(int rank) const { return bounds[size_t(rank)]; }
  int64_t shard_size(int rank) const { return bounds[size_t(rank) + 1] - bounds[size_t(rank)]; }

  // A piece of one parameter in one shard: elements [begin, begin + length) of parameter `param`.
  struct Fragment {
    size_t param = 0;
    int64_t begin = 0, length = 0;
  };
  // The pieces of rank `rank`'s shard, in flat order.
  std::vector<Fragment> fragments(int rank) const;
};

// The layout of parameters of `numels` elements over `ranks` ranks, cuts aligned to `align` elements
// within a parameter.
ShardLayout make_shard_layout(const std::vector<int64_t>& numels, int ranks, int64_t align);

// The largest rank's shard, in elements, of a rank's parameters (`numels`; `expert[i]`: parameter i is
// one of its experts'). Without expert parallelism (expert_parallel 1, or no expert parameter flagged)
// one layout over `ranks`; with it Megatron's two: the dense parameters over all `ranks`, the experts
// over the ranks / expert_parallel of an expert-data group (the distributed optimizer's), cuts aligned
// to `align` elements.
int64_t largest_shard(const std::vector<int64_t>& numels, const std::vector<bool>& expert, int ranks,
                      int expert_parallel, int64_t align);

}  // namespace tidal::optim
