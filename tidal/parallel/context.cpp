#include "tidal/parallel/context.h"

#include <vector>

#include "tidal/base/error.h"
#include "tidal/ops/ring_attention.h"
#include "tidal/ops/view.h"

namespace tidal::parallel {

Flags& add_context_parallel_flags(Flags& f) {
  return f.option("context-parallel-size",
                  "split every sample's sequence over C ranks (ring attention with --attention flash, all-gathered K/V "
                  "with eager; default 1: off); the ranks must be a multiple of C and --seq-length a multiple of 2C",
                  "C");
}

ContextParallelConfig parse_context_parallel(const Flags& f) {
  ContextParallelConfig c;
  c.size = f.integer("context-parallel-size", 1, 1, int64_t(1) << 20);
  return c;
}

void check_context_parallel(int64_t seq_length, int64_t context_parallel) {
  const int64_t c = context_parallel;
  if (c == 1) return;
  TIDAL_CHECK(seq_length % (2 * c) == 0, "tidal train: --seq-length ", seq_length,
              " is not a multiple of 2 x --context-parallel-size ", c, " = ", 2 * c,
              ": each rank holds two equal chunks of every sequence");
}

ContextParallelGroups context_parallel_groups(dist::Communicator& world, const ContextParallelConfig& c) {
  const int ranks = world.size(), size = int(c.size), rank = world.rank();
  TIDAL_CHECK(c.size <= ranks && ranks % size == 0, "tidal train: --context-parallel-size ", c.size,
              " does not divide the ", ranks, " ranks: the ranks are data-parallel size x context-parallel size");
  std::vector<int> block, strided;
  for (int m = rank - rank % size; m < rank - rank % size + size; ++m) block.push_back(m);
  for (int m = rank % size; m < ranks; m += size) strided.push_back(m);
  ContextParallelGroups g;
  g.cp = world.subgroup(block);
  g.dp = world.subgroup(strided);
  try {
    g.ring = g.cp->duplicate();
  } catch (const Error&) {  // the same MPI library on every rank: all of them go without
    g.ring = nullptr;
  }
  return g;
}

LocalTokens local_tokens(const Tensor& tokens, int cp_size, int cp_rank) {
  const int64_t t = tokens.size(1) - 1;
  const Tensor inputs = tokens.narrow(1, 0, t), labels = tokens.narrow(1, 1, t);
  if (cp_size == 1) return {inputs, labels};
  const ContextChunks at = context_chunks(t, cp_size, cp_rank);
  const auto mine = [&](const Tensor& x) {
    return cat({x.narrow(1, at.first, at.chunk), x.narrow(1, at.second, at.chunk)}, 1);
  };
  return {mine(inputs), mine(labels)};
}

}  // namespace tidal::parallel
