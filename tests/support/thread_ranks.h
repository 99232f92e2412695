#pragma once
// Several ranks of a distributed run as threads of one process, for tests that need more than one rank
// without mpirun — on a GPU machine, ranks whose tensors share the one GPU. Each rank's communicator
// moves host bytes through shared memory (reads_device_memory() is false, as MPI's: a device tensor's
// bytes must be staged through the host, which is what such a test checks), with MPI's matching rules:
// messages between two ranks match in the order they were posted, a duplicate's or a subgroup's never
// meet the original's. A rank that throws fails the others' waits instead of leaving them hanging.
#include <functional>

#include "tidal/dist/communicator.h"

namespace tidal::testing {

// Runs body(comm) on `ranks` threads at once, each with its rank's communicator, and once every thread
// ended rethrows the error of the rank that failed first.
void run_on_thread_ranks(int ranks, const std::function<void(dist::Communicator& comm)>& body);

}  // namespace tidal::testing
