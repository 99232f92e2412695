#pragma once
// The communicator of a dry run (plan/dry_run.h): this process plays rank `rank` of `size` ranks on
// the meta device, where the tensors have shapes and no values. It moves no tensor bytes (the
// tensor collectives skip meta tensors: dist/collectives.h); what the ranks exchange on the host to
// agree on shapes (which gradients exist, string lengths) every rank is taken to have alike, so each
// rank's block of a gather is this rank's.
#include "tidal/dist/communicator.h"

namespace tidal::dist {

class MetaCommunicator final : public Communicator {
 public:
  // Throws tidal::Error unless 0 <= rank < size.
  MetaCommunicator(int rank, int size);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "meta"; }
  std::unique_ptr<Communicator> duplicate() override;
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& members) override;
  // Every rank's block is this rank's `send` block (all_to_all: the block for this rank).
  void all_to_all(const void* send, void* recv, int64_t bytes_per_rank) override;
  void all_gather(const void* send, void* recv, int64_t bytes_per_rank) override;
  void exchange(const std::vector<Transfer>&, const std::vector<Transfer>&) override {}  // no values
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}
  // A dry run runs inside a process that goes on: throws tidal::Error instead of ending it.
  [[noreturn]] void abort(int exit_code) override;

 private:
  int rank_, size_;
};

}  // namespace tidal::dist
