#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include "tidal/dist/communicator.h"
#include "tidal/dist/mpi_communicator.h"
#include "tidal/dist/single_communicator.h"

namespace tidal::dist {
namespace {

std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> slot;
  return slot;
}

}  // namespace

bool launched_by_mpi_launcher() {
  // Open MPI's mpirun, PMIx launchers (srun, prterun) and MPICH's Hydra each set one of these.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

Communicator& world() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (launched_by_mpi_launcher())
      world_slot() = std::make_unique<MpiCommunicator>();
    else
      world_slot() = std::make_unique<SingleCommunicator>();
  });
  return *world_slot();
}

void finalize() {
  if (world_slot()) world_slot()->finalize();
}

std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine) {
  const int n = comm.size();
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  const int64_t my_length = int64_t(mine.size());
  comm.all_gather(&my_length, lengths.data(), sizeof(int64_t));
  int64_t longest = 0;
  for (int64_t l : lengths) longest = std::max(longest, l);
  std::string padded = mine;
  padded.resize(size_t(longest));
  std::string all(size_t(longest) * size_t(n), '\0');
  comm.all_gather(padded.data(), all.data(), longest);
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r) out.push_back(all.substr(size_t(r) * size_t(longest), size_t(lengths[size_t(r)])));
  return out;
}

}  // namespace tidal::dist
