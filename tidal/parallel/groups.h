#pragma once
// The communicators of a parallel layout (parallel/layout.h), made once at setup and held in one
// place (torchtitan's DeviceMesh): the world, this rank's data-parallel group (the ranks that read
// different samples), its context-parallel group and the ring's duplicate of it, its expert-parallel
// group (the ranks its MoE layers divide their experts among) and its expert-data group (the ranks
// holding the same experts, which sum their gradients and shard their states).
#include <memory>

#include "tidal/dist/communicator.h"
#include "tidal/parallel/layout.h"

namespace tidal::parallel {

class ParallelGroups {
 public:
  // A collective: every rank of `world` makes its groups, in the same order. `layout` must be on
  // world's ranks (ParallelLayout::on) and checked (check_expert_parallel). With --distributed-backend
  // nccl the groups are NCCL communicators on `device`, bootstrapped over `world` (which keeps carrying
  // host buffers), and world() is the NCCL one.
  ParallelGroups(dist::Communicator& world, const ParallelLayout& layout, Device device = Device::cpu());
  ParallelGroups(const ParallelGroups&) = delete;
  ParallelGroups& operator=(const ParallelGroups&) = delete;

  const ParallelLayout& layout() const { return layout_; }
  dist::Communicator& world() const { return *world_; }
  // The data-parallel group: the world without context parallelism.
  dist::Communicator& data() const { return context_ ? *data_ : *world_; }
  // Context parallel (C > 1): the group that splits each sequence, and its duplicate over which the
  // ring's K/V blocks move while attention computes (null where MPI has no MPI_THREAD_MULTIPLE: the
  // exchanges then block). Null without.
  dist::Communicator* context() const { return context_.get(); }
  dist::Communicator* ring() const { return ring_.get(); }
  int context_size() const { return context_ ? context_->size() : 1; }
  int context_rank() const { return context_ ? context_->rank() : 0; }
  // Expert parallel (E > 1): the expert-parallel group (shared: the model's MoE layers keep it) and
  // the expert-data group. Null without.
  const std::shared_ptr<dist::Communicator>& experts() const { return experts_; }
  dist::Communicator* expert_data() const { return expert_data_.get(); }

 private:
  ParallelLayout layout_;
  std::unique_ptr<dist::Communicator> backend_world_;  // --distributed-backend nccl: over the given world
  dist::Communicator* world_;
  std::unique_ptr<dist::Communicator> context_, data_, ring_;
  std::shared_ptr<dist::Communicator> experts_;
  std::unique_ptr<dist::Communicator> expert_data_;
};

}  // namespace tidal::parallel
