#include "tidal/parallel/groups.h"

#include <vector>

#include "tidal/base/error.h"
#include "tidal/dist/communicator_factory.h"

namespace tidal::parallel {
namespace {

// This rank's block of `size` contiguous ranks, and the ranks strided by `size` through the world.
std::vector<int> block_of(int rank, int size) {
  std::vector<int> out;
  for (int r = rank - rank % size; r < rank - rank % size + size; ++r) out.push_back(r);
  return out;
}
std::vector<int> strided_of(int rank, int size, int world) {
  std::vector<int> out;
  for (int r = rank % size; r < world; r += size) out.push_back(r);
  return out;
}

}  // namespace

ParallelGroups::ParallelGroups(dist::Communicator& given_world, const ParallelLayout& layout, Device device)
    : layout_(layout),
      // A dry run (the meta device) plans the collectives from their bytes: it keeps the given world.
      backend_world_(layout.backend == dist::DistributedBackend::mpi || device.type == DeviceType::meta
                         ? nullptr
                         : dist::make_communicator(layout.backend, given_world, device)),
      world_(backend_world_ ? backend_world_.get() : &given_world) {
  dist::Communicator& world = *world_;
  const int ranks = world.size(), rank = world.rank();
  TIDAL_ASSERT(layout.world == ranks && ranks % layout.context == 0 && ranks % layout.expert == 0,
               "[parallel] a layout of ", layout.world, " ranks (C ", layout.context, ", E ", layout.expert,
               ") on a world of ", ranks);
  if (layout.context > 1) {
    context_ = world.subgroup(block_of(rank, layout.context));
    data_ = world.subgroup(strided_of(rank, layout.context, ranks));
    try {
      ring_ = context_->duplicate();
    } catch (const Error&) {  // the same MPI library on every rank: all of them go without
      ring_ = nullptr;
    }
  }
  if (layout.expert > 1) {
    experts_ = world.subgroup(block_of(rank, layout.expert));
    expert_data_ = world.subgroup(strided_of(rank, layout.expert, ranks));
  }
}

}  // namespace tidal::parallel
