#include "tidal/dist/mpi_progress_board.h"

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <unistd.h>

namespace tidal::dist::progress {
namespace {

// One rank's slot. Lock-free atomics are address-free, so two processes mapping the same page agree on them.
struct Slot {
  std::atomic<int64_t> entered{0}, left{0};
  std::atomic<int64_t> since_ns{0};  // system clock (shared by the host's processes) of the last enter or leave
  std::atomic<int32_t> world_rank{-1};
  std::atomic<int32_t> pid{0};
  char what[56] = {};  // the operation of the last enter (diagnostics: a torn read only garbles a message)
};
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free);

struct Board {
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Win window = MPI_WIN_NULL;
  Slot* mine = nullptr;
  int local_size = 0;
};
Board board;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Slot* slot_of(int local_rank) {
  MPI_Aint size = 0;
  int unit = 0;
  void* base = nullptr;
  if (MPI_Win_shared_query(board.window, local_rank, &size, &unit, &base) != MPI_SUCCESS || base == nullptr ||
      size < MPI_Aint(sizeof(Slot)))
    return nullptr;
  return static_cast<Slot*>(base);
}

// The state letter of process `pid` in /proc/PID/stat (R running, S sleeping, T stopped, Z zombie, ...); 0 when it is
// gone or unreadable.
char process_state(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (pid <= 0 || !std::getline(stat, text)) return 0;
  const size_t paren = text.rfind(')');  // the command name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < text.size() ? text[paren + 2] : 0;
}

std::string state_words(char state) {
  switch (state) {
    case 0: return "its process is gone";
    case 'T':
    case 't': return "its process is STOPPED";
    case 'Z': return "its process is a zombie (dead)";
    case 'D': return "its process waits in the kernel (I/O)";
    default: return std::string("its process is ") + (state == 'R' ? "running" : "sleeping");
  }
}

}  // namespace

void open() {
  if (board.mine != nullptr) return;
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &board.node) != MPI_SUCCESS) return;
  MPI_Comm_set_errhandler(board.node, MPI_ERRORS_RETURN);
  void* base = nullptr;
  if (MPI_Win_allocate_shared(MPI_Aint(sizeof(Slot)), 1, MPI_INFO_NULL, board.node, &base, &board.window) !=
      MPI_SUCCESS) {
    MPI_Comm_free(&board.node);
    return;
  }
  board.mine = new (base) Slot();
  board.mine->world_rank.store(world_rank);
  board.mine->pid.store(int32_t(::getpid()));
  board.mine->since_ns.store(now_ns());
  MPI_Comm_size(board.node, &board.local_size);
  MPI_Barrier(board.node);  // every slot is constructed before anyone reads one
}

void close() {
  if (board.mine == nullptr) return;
  board.mine = nullptr;
  MPI_Win_free(&board.window);
  MPI_Comm_free(&board.node);
}

void enter(const char* what) {
  Slot* s = board.mine;
  if (s == nullptr) return;
  std::strncpy(s->what, what, sizeof(s->what) - 1);
  s->since_ns.store(now_ns(), std::memory_order_relaxed);
  s->entered.fetch_add(1, std::memory_order_release);
}

void leave() {
  Slot* s = board.mine;
  if (s == nullptr) return;
  s->since_ns.store(now_ns(), std::memory_order_relaxed);
  s->left.fetch_add(1, std::memory_order_release);
}

std::string report(int world_rank) {
  if (board.mine == nullptr) return "";
  std::string out;
  const int64_t now = now_ns();
  const int64_t my_waits = board.mine->entered.load(std::memory_order_acquire);
  for (int r = 0; r < board.local_size; ++r) {
    const Slot* s = slot_of(r);
    if (s == nullptr) continue;
    const int rank = s->world_rank.load(std::memory_order_acquire);
    if (rank == world_rank) continue;
    char what[sizeof(s->what)];
    std::memcpy(what, s->what, sizeof(what));
    what[sizeof(what) - 1] = '\0';
    const double seconds = double(now - s->since_ns.load(std::memory_order_relaxed)) / 1e9;
    const int64_t entered = s->entered.load(std::memory_order_acquire);
    const bool waiting = entered > s->left.load(std::memory_order_acquire);
    const std::string state = state_words(process_state(s->pid.load(std::memory_order_relaxed)));
    char line[384];
    if (!waiting)
      std::snprintf(line, sizeof line, "  rank %d: NOT in a collective for %.1f s (its last was %s); %s\n", rank,
                    seconds, what[0] ? what : "none", state.c_str());
    else if (entered < my_waits)  // the same program waits in the same order: it is behind this rank
      std::snprintf(line, sizeof line,
                    "  rank %d: BEHIND, still in its wait #%lld (%s) for %.1f s, this rank is at #%lld; %s\n", rank,
                    (long long)entered, what, seconds, (long long)my_waits, state.c_str());
    else
      std::snprintf(line, sizeof line, "  rank %d: waiting in %s for %.1f s; %s\n", rank, what, seconds, state.c_str());
    out += line;
  }
  return out;
}

}  // namespace tidal::dist::progress
