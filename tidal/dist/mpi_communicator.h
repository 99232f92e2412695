#pragma once
// The communicator over MPI (Open MPI from Debian): MPI_COMM_WORLD or a duplicate of it. MPI is
// initialized with MPI_THREAD_MULTIPLE where the library offers it (else MPI_THREAD_SERIALIZED):
// collectives run on the comm streams' worker threads too. A mutex per communicator keeps two calls
// on one communicator from overlapping; duplicates (their own MPI_Comm) may run concurrently, which
// needs MPI_THREAD_MULTIPLE.
#include <memory>
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
  std::unique_ptr<Communicator> duplicate() override;
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& members) override;
  void all_to_all(const void* send, void* recv, int64_t bytes_per_rank) override;
  void all_gather(const void* send, void* recv, int64_t bytes_per_rank) override;
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) override;
  void broadcast(void* data, int64_t bytes, int root) override;
  void barrier() override;
  [[noreturn]] void abort(int exit_code) override;
  void finalize() override;  // MPI_Finalize, once

 private:
  struct Handle;  // the MPI_Comm (mpi.h stays out of the headers)
  explicit MpiCommunicator(std::unique_ptr<Handle> handle);
  std::unique_ptr<Handle> handle_;
  bool world_ = true;
  int rank_ = 0, size_ = 1;
  bool finalized_ = false;
  std::mutex mutex_;
};

}  // namespace tidal::dist
