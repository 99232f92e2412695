#include "tidal/dist/single_communicator.h"

#include <cstdlib>
#include <cstring>

#include "tidal/base/error.h"

namespace tidal::dist {

void SingleCommunicator::all_to_all(const void* send, void* recv, int64_t bytes_per_rank) {
  if (send != recv && bytes_per_rank > 0) std::memmove(recv, send, size_t(bytes_per_rank));
}

void SingleCommunicator::all_gather(const void* send, void* recv, int64_t bytes_per_rank) {
  if (send != recv && bytes_per_rank > 0) std::memmove(recv, send, size_t(bytes_per_rank));
}

void SingleCommunicator::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) {
  TIDAL_CHECK(sends.empty() && receives.empty(), "[dist] a transfer to another rank in a run of one rank");
}

void SingleCommunicator::abort(int exit_code) { std::exit(exit_code); }

}  // namespace tidal::dist
