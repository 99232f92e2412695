#pragma once
// The communicator of a run with one rank: every collective is a copy (or nothing).
#include "tidal/dist/communicator.h"

namespace tidal::dist {

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "single"; }
  std::unique_ptr<Communicator> duplicate() override {
    auto d = std::make_unique<SingleCommunicator>();
    d->share_stats_of(*this);
    return d;
  }
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& members) override {
    check_subgroup(members, 0, 1);
    return duplicate();
  }
  void all_to_all(const void* send, void* recv, int64_t bytes_per_rank) override;
  void all_gather(const void* send, void* recv, int64_t bytes_per_rank) override;
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) override;
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int exit_code) override;
};

}  // namespace tidal::dist
