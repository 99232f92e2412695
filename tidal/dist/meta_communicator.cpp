#include "tidal/dist/meta_communicator.h"

#include <cstring>

#include "tidal/base/error.h"

namespace tidal::dist {

MetaCommunicator::MetaCommunicator(int rank, int size) : rank_(rank), size_(size) {
  TIDAL_CHECK(size >= 1 && rank >= 0 && rank < size, "[dist] a dry run's rank must be in [0, ", size, "), got ", rank);
}

std::unique_ptr<Communicator> MetaCommunicator::duplicate() {
  auto d = std::make_unique<MetaCommunicator>(rank_, size_);
  d->share_stats_of(*this);
  return d;
}

std::unique_ptr<Communicator> MetaCommunicator::subgroup(const std::vector<int>& members) {
  auto d = std::make_unique<MetaCommunicator>(check_subgroup(members, rank_, size_), int(members.size()));
  d->share_stats_of(*this);
  return d;
}

void MetaCommunicator::all_to_all(const void* send, void* recv, int64_t bytes_per_rank) {
  if (bytes_per_rank <= 0 || send == nullptr || recv == nullptr) return;
  const char* mine = static_cast<const char*>(send) + int64_t(rank_) * bytes_per_rank;
  for (int r = 0; r < size_; ++r)
    std::memmove(static_cast<char*>(recv) + int64_t(r) * bytes_per_rank, mine, size_t(bytes_per_rank));
}

void MetaCommunicator::all_gather(const void* send, void* recv, int64_t bytes_per_rank) {
  if (bytes_per_rank <= 0 || send == nullptr || recv == nullptr) return;
  for (int r = 0; r < size_; ++r) {
    char* block = static_cast<char*>(recv) + int64_t(r) * bytes_per_rank;
    if (block != send) std::memmove(block, send, size_t(bytes_per_rank));
  }
}

void MetaCommunicator::abort(int exit_code) {
  throw Error(
      detail::str_cat("[dist] a dry run's rank ", rank_, " of ", size_, " aborted (exit code ", exit_code, ")"));
}

}  // namespace tidal::dist
