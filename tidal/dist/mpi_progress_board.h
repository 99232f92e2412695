#pragma once
// Note [Progress board]: where each MPI rank of this host is, readable by the others without its help, so that a
// collective that times out (--distributed-timeout-minutes, mpi_communicator.cpp) can name the rank that did not
// arrive. Each rank owns one slot of a shared-memory window of the host's ranks (MPI_Win_allocate_shared over
// MPI_COMM_TYPE_SHARED): how many waits it entered and left, what it waits in, and since when. A stopped or hung rank
// cannot answer a message, but its slot still says it left its last wait long ago and never entered this one.
// Ranks on other hosts are not visible (the message says so). Without a shared window (an MPI that has none) the board
// stays closed and the message names the operation only.
#include <string>

namespace tidal::dist::progress {

// A collective over MPI_COMM_WORLD after MPI_Init: opens the board (quietly not, where MPI cannot share memory).
void open();
// Before MPI_Finalize: frees the window (a collective).
void close();
// This rank starts waiting in `what`, and is done waiting.
void enter(const char* what);
void leave();
// What the other ranks of this host are doing, one line each ("rank 1: ..."), "" when the board is closed.
std::string report(int world_rank);

}  // namespace tidal::dist::progress
