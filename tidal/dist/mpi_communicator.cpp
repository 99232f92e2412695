#include "tidal/dist/mpi_communicator.h"

// The C API only: Open MPI's (deprecated) C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/dist/communicator.h"
#include "tidal/dist/mpi_progress_board.h"

namespace tidal::dist {
namespace {

// MPI counts are ints: messages above 1 GiB per rank go in pieces of this many bytes.
constexpr int64_t kPiece = int64_t(1) << 30;

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, size_t(len));
}

void check(int code, const char* what) {
  TIDAL_CHECK(code == MPI_SUCCESS, "[dist] ", what, " failed: ", mpi_error(code));
}

// `bytes` contiguous bytes whose extent is `stride`: one piece of each rank's block.
MPI_Datatype block_piece(int64_t bytes, int64_t stride) {
  MPI_Datatype piece, block;
  MPI_Type_contiguous(int(bytes), MPI_BYTE, &piece);
  MPI_Type_create_resized(piece, 0, MPI_Aint(stride), &block);
  MPI_Type_commit(&block);
  MPI_Type_free(&piece);
  return block;
}

void free_type(MPI_Datatype t) { MPI_Type_free(&t); }

// Waits for `n` requests of `what` on `comm`. Note [Collective timeout]: with a timeout set
// (set_collective_timeout) the requests are tested in a loop that yields the core between tests (so a
// rank waiting for a slow one leaves it the CPU), and past the deadline the job ends: a rank that stopped
// or hangs would otherwise keep every other rank waiting forever. Without one, MPI_Waitall.
void wait_for(MPI_Request* requests, int n, const char* what, MPI_Comm comm) {
  if (n == 0) return;
  const double timeout = collective_timeout();
  if (timeout <= 0) {
    check(MPI_Waitall(n, requests, MPI_STATUSES_IGNORE), what);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  struct Waiting {  // on the progress board while this rank waits (also when a test throws)
    explicit Waiting(const char* w) { progress::enter(w); }
    ~Waiting() { progress::leave(); }
  } waiting(what);
  for (uint64_t polls = 0;; ++polls) {
    int done = 0;
    check(MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE), what);
    if (done) return;
    if (polls % 256 == 255) {
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout) {
        int rank = 0, size = 0, world_rank = 0;
        MPI_Comm_rank(comm, &rank);
        MPI_Comm_size(comm, &size);
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        // The other ranks of this host, from the progress board (Note [Progress board]).
        const std::string others = progress::report(world_rank);
        std::fprintf(stderr,
                     "tidal: [rank %d] %s among %d ranks (this rank is %d of them) did not complete within %.3g "
                     "minutes (--distributed-timeout-minutes): another rank is stuck, stopped or gone; ending the "
                     "job. Raise the timeout if a rank may legitimately pause that long.\n%s",
                     world_rank, what, size, rank, timeout / 60,
                     others.empty() ? "  (where the other ranks are is not visible: they run on other hosts, or "
                                      "this MPI shares no memory)\n"
                                    : ("where the other ranks of this host are:\n" + others +
                                       "  (ranks of other hosts, if any, are not visible from here)\n")
                                          .c_str());
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
        std::_Exit(1);
      }
    }
    std::this_thread::yield();
  }
}

// Runs its function when it goes out of scope (the call's statistics, also when it throws).
struct Recorded {
  std::function<void()> f;
  ~Recorded() { f(); }
};

int64_t total_bytes(const std::vector<Communicator::Transfer>& ts) {
  int64_t n = 0;
  for (const Communicator::Transfer& t : ts) n += t.bytes;
  return n;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct MpiCommunicator::Handle {
  MPI_Comm comm = MPI_COMM_WORLD;
};

MpiCommunicator::MpiCommunicator() : handle_(std::make_unique<Handle>()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    TIDAL_CHECK(provided >= MPI_THREAD_SERIALIZED, "[dist] this MPI library offers thread level ", provided,
                ", tidal needs MPI_THREAD_SERIALIZED at least (collectives run on a stream's worker thread)");
  }
  // Errors come back as codes (turned into tidal::Error) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  progress::open();  // Note [Progress board]
}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Handle> handle) : handle_(std::move(handle)), world_(false) {
  MPI_Comm_set_errhandler(handle_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(handle_->comm, &rank_);
  MPI_Comm_size(handle_->comm, &size_);
}

std::unique_ptr<Communicator> MpiCommunicator::duplicate() {
  int level = 0;
  MPI_Query_thread(&level);
  TIDAL_CHECK(level >= MPI_THREAD_MULTIPLE, "[dist] this MPI library offers thread level ", level,
              ": running collectives on two threads at once (overlapped reduction or gathering) needs "
              "MPI_THREAD_MULTIPLE; run without --overlap-grad-reduce and --overlap-param-gather");
  auto handle = std::make_unique<Handle>();
  {
    std::lock_guard lock(mutex_);
    check(MPI_Comm_dup(handle_->comm, &handle->comm), "MPI_Comm_dup");
  }
  std::unique_ptr<MpiCommunicator> d(new MpiCommunicator(std::move(handle)));
  d->share_stats_of(*this);
  return d;
}

std::unique_ptr<Communicator> MpiCommunicator::subgroup(const std::vector<int>& members) {
  const int index = check_subgroup(members, rank_, size_);
  auto handle = std::make_unique<Handle>();
  {
    std::lock_guard lock(mutex_);  // the groups are named by their first member; ranks keep their order
    check(MPI_Comm_split(handle_->comm, members.front(), rank_, &handle->comm), "MPI_Comm_split");
  }
  std::unique_ptr<MpiCommunicator> d(new MpiCommunicator(std::move(handle)));
  d->share_stats_of(*this);
  TIDAL_CHECK(d->size() == int(members.size()) && d->rank() == index, "[dist] rank ", rank_, "'s group of ",
              members.size(), " ranks from ", members.front(), " has ", d->size(),
              " ranks on the others: every rank must name the same groups");
  return d;
}

MpiCommunicator::~MpiCommunicator() {
  if (world_) {
    finalize();
    return;
  }
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Comm_free(&handle_->comm);
}

void MpiCommunicator::finalize() {
  if (!world_) return;  // a duplicate: the world's finalize ends MPI
  std::lock_guard lock(mutex_);
  if (finalized_) return;
  finalized_ = true;
  int done = 0;
  MPI_Finalized(&done);
  if (done) return;
  progress::close();
  MPI_Finalize();
}

void MpiCommunicator::all_to_all(const void* send, void* recv, int64_t bytes_per_rank) {
  std::lock_guard lock(mutex_);
  const int64_t t0 = now_ns();
  Recorded done{[&] { record(bytes_per_rank * (size_ - 1), bytes_per_rank * (size_ - 1), now_ns() - t0); }};
  const auto* s = static_cast<const char*>(send);
  auto* r = static_cast<char*>(recv);
  if (bytes_per_rank <= kPiece) {
    MPI_Request req;
    check(MPI_Ialltoall(s, int(bytes_per_rank), MPI_BYTE, r, int(bytes_per_rank), MPI_BYTE, handle_->comm, &req),
          "MPI_Alltoall");
    wait_for(&req, 1, "MPI_Alltoall", handle_->comm);
    return;
  }
  // Large blocks go in pieces: piece k of every block per call, as one element of a type whose
  // extent is the block size (MPI's counts and displacements are ints).
  for (int64_t at = 0; at < bytes_per_rank; at += kPiece) {
    const MPI_Datatype block = block_piece(std::min(kPiece, bytes_per_rank - at), bytes_per_rank);
    MPI_Request req;
    const int rc = MPI_Ialltoall(s + at, 1, block, r + at, 1, block, handle_->comm, &req);
    free_type(block);  // freed once the pending call is done with it (MPI keeps it until then)
    check(rc, "MPI_Alltoall");
    wait_for(&req, 1, "MPI_Alltoall", handle_->comm);
  }
}

void MpiCommunicator::all_gather(const void* send, void* recv, int64_t bytes_per_rank) {
  std::lock_guard lock(mutex_);
  const int64_t t0 = now_ns();
  Recorded done{[&] { record(bytes_per_rank * (size_ - 1), bytes_per_rank * (size_ - 1), now_ns() - t0); }};
  const auto* s = static_cast<const char*>(send);
  auto* r = static_cast<char*>(recv);
  if (bytes_per_rank <= kPiece) {
    MPI_Request req;
    check(MPI_Iallgather(s, int(bytes_per_rank), MPI_BYTE, r, int(bytes_per_rank), MPI_BYTE, handle_->comm, &req),
          "MPI_Allgather");
    wait_for(&req, 1, "MPI_Allgather", handle_->comm);
    return;
  }
  for (int64_t at = 0; at < bytes_per_rank; at += kPiece) {
    const int64_t n = std::min(kPiece, bytes_per_rank - at);
    const MPI_Datatype block = block_piece(n, bytes_per_rank);
    MPI_Request req;
    const int rc = MPI_Iallgather(s + at, int(n), MPI_BYTE, r + at, 1, block, handle_->comm, &req);
    free_type(block);
    check(rc, "MPI_Allgather");
    wait_for(&req, 1, "MPI_Allgather", handle_->comm);
  }
}

namespace {

// Point-to-point exchanges of byte ranges of any size (pieces of at most kPiece bytes), so offsets
// and counts are never limited by MPI's ints.
class Exchange {
 public:
  explicit Exchange(MPI_Comm comm) : comm_(comm) {}
  void send(const char* data, int64_t bytes, int peer) { post(const_cast<char*>(data), bytes, peer, true); }
  void receive(char* data, int64_t bytes, int peer) { post(data, bytes, peer, false); }
  void wait_all() {
    wait_for(requests_.data(), int(requests_.size()), "an exchange (MPI_Isend / MPI_Irecv)", comm_);
    requests_.clear();
  }

 private:
  void post(char* data, int64_t bytes, int peer, bool out) {
    for (int64_t done = 0; done < bytes; done += kPiece) {
      const int n = int(std::min(kPiece, bytes - done));
      MPI_Request r;
      check(out ? MPI_Isend(data + done, n, MPI_BYTE, peer, 0, comm_, &r)
                : MPI_Irecv(data + done, n, MPI_BYTE, peer, 0, comm_, &r),
            out ? "MPI_Isend" : "MPI_Irecv");
      requests_.push_back(r);
    }
  }
  MPI_Comm comm_;
  std::vector<MPI_Request> requests_;
};

}  // namespace

void MpiCommunicator::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) {
  std::lock_guard lock(mutex_);
  const int64_t t0 = now_ns();
  Recorded done{[&] { record(total_bytes(sends), total_bytes(receives), now_ns() - t0); }};
  Exchange x(handle_->comm);
  for (const Transfer& t : receives) {
    TIDAL_ASSERT(t.peer != rank_ && t.peer >= 0 && t.peer < size_);
    x.receive(static_cast<char*>(t.data), t.bytes, t.peer);
  }
  for (const Transfer& t : sends) {
    TIDAL_ASSERT(t.peer != rank_ && t.peer >= 0 && t.peer < size_);
    x.send(static_cast<const char*>(t.data), t.bytes, t.peer);
  }
  x.wait_all();
}

void MpiCommunicator::broadcast(void* data, int64_t bytes, int root) {
  std::lock_guard lock(mutex_);
  const int64_t t0 = now_ns();
  Recorded done{[&] { record(rank_ == root ? bytes * (size_ - 1) : 0, rank_ == root ? 0 : bytes, now_ns() - t0); }};
  auto* p = static_cast<char*>(data);
  for (int64_t done = 0; done < bytes; done += kPiece) {
    MPI_Request req;
    check(MPI_Ibcast(p + done, int(std::min(kPiece, bytes - done)), MPI_BYTE, root, handle_->comm, &req), "MPI_Bcast");
    wait_for(&req, 1, "MPI_Bcast", handle_->comm);
  }
}

void MpiCommunicator::barrier() {
  std::lock_guard lock(mutex_);
  const int64_t t0 = now_ns();
  Recorded done{[&] { record(0, 0, now_ns() - t0); }};
  MPI_Request req;
  check(MPI_Ibarrier(handle_->comm, &req), "MPI_Barrier");
  wait_for(&req, 1, "MPI_Barrier", handle_->comm);
}

void MpiCommunicator::abort(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; in case it does
}

}  // namespace tidal::dist
