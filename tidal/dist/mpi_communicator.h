#pragma once
// The communicator over MPI (Open MPI from Debian): MPI_COMM_WORLD, initialized with
// MPI_THREAD_SERIALIZED at least — collectives run on the comm stream's worker thread, and a mutex
// keeps any two calls from overlapping.
#include <mutex>

#include "tidal/dist/communicator.h"

namespace tidal::dist {

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator();  // MPI_Init_thread; throws tidal::Error when MPI cannot start
  ~MpiCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  void all_to_all(const void* send, void* recv, int64_t bytes_per_rank) override;
  void all_gather(const void* send, void* recv, int64_t bytes_per_rank) override;
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) override;
  void broadcast(void* data, int64_t bytes, int root) override;
  void barrier() override;
  [[noreturn]] void abort(int exit_code) override;
  void finalize() override;  // MPI_Finalize, once

 private:
  int rank_ = 0, size_ = 1;
  bool finalized_ = false;
  std::mutex mutex_;
};

}  // namespace tidal::dist
