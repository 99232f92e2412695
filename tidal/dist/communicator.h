#pragma once
// The ranks of a distributed run and the byte-moving collectives between them: the seam between
// tidal and a distributed runtime (MPI now, NCCL on GPUs later). Tensor-level collectives with a
// deterministic reduction order are built on these in dist/collectives.h. See docs/distributed.md.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tidal::dist {

// What a communicator moved and how long its calls took (this rank's view): summary.comm.
struct CommStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0, bytes_received = 0;  // to and from other ranks
  int64_t busy_ns = 0;                         // inside collectives, waiting included
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  // Everything this communicator and its duplicates moved.
  CommStats stats() const {
    std::lock_guard lock(stats_->mutex);
    return stats_->stats;
  }
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "mpi", "single", "nccl"
  // Whether its collectives take device memory (NCCL); otherwise a cuda tensor goes through the host.
  virtual bool reads_device_memory() const { return false; }
  // A communicator over the same ranks whose messages never match this one's (MPI_Comm_dup): a
  // stream's worker thread can run collectives on it while another thread runs them here. A
  // collective: every rank calls it, in the same order. Statistics are shared with this one.
  virtual std::unique_ptr<Communicator> duplicate() = 0;
  // A communicator over `members`: ranks of this one, ascending, this rank among them; its rank is
  // this rank's index in `members`. A collective: every rank of this one calls it, in the same order,
  // each with the members of its own group, and the groups partition the ranks (expert-parallel and
  // context-parallel groups, and the data-parallel groups across them). Throws tidal::Error on a
  // list that is not such a group. Statistics are shared with this one.
  virtual std::unique_ptr<Communicator> subgroup(const std::vector<int>& members) = 0;

  // Every rank sends `bytes_per_rank` bytes to every rank (block r of `send` goes to rank r) and
  // receives rank r's block into block r of `recv`. Blocking; buffers are device memory.
  virtual void all_to_all(const void* send, void* recv, int64_t bytes_per_rank) = 0;
  // Every rank's `bytes_per_rank` bytes of `send` land in block r of `recv` on every rank.
  virtual void all_gather(const void* send, void* recv, int64_t bytes_per_rank) = 0;
  // Point to point, any sizes: posts every send and receive at once and waits for all of them.
  // Messages between two ranks match in the order they are listed (the receiver lists them in the
  // sender's order). No transfer to or from this rank itself.
  struct Transfer {
    int peer;
    void* data;
    int64_t bytes;
  };
  virtual void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives) = 0;
  // `bytes` of `data` from rank `root` to every rank.
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the run with `exit_code` (after this rank printed why): a failing rank must
  // never leave the others waiting in a collective.
  [[noreturn]] virtual void abort(int exit_code) = 0;
  virtual void finalize() {}  // shuts the runtime down (MPI_Finalize); collectives fail after it

 protected:
  // Implementations count every call.
  void record(int64_t sent, int64_t received, int64_t ns) {
    std::lock_guard lock(stats_->mutex);
    CommStats& s = stats_->stats;
    ++s.calls;
    s.bytes_sent += sent;
    s.bytes_received += received;
    s.busy_ns += ns;
  }
  struct SharedStats {
    std::mutex mutex;
    CommStats stats;
  };
  // A duplicate counts into its original's statistics.
  void share_stats_of(const Communicator& original) { stats_ = original.stats_; }

 private:
  std::shared_ptr<SharedStats> stats_ = std::make_shared<SharedStats>();
};

// The process's communicator: MPI's world when the process was started by mpirun (or another MPI
// launcher), a one-rank communicator otherwise — a single process without mpirun behaves exactly
// as it did before distributed training existed.
Communicator& world();
// Whether an MPI launcher started this process (its environment says so).
bool launched_by_mpi_launcher();
// Shuts the distributed runtime down cleanly (MPI_Finalize); call once at the end of main.
void finalize();

// The collective timeout (Megatron's --distributed-timeout-minutes; 0: none, the default until set): an
// MPI collective or exchange that has not completed after this long ends the whole job with a message
// naming the rank that gave up and the operation (a stuck, stopped or vanished rank would otherwise hang
// every other one forever). Process-wide; the trainer sets it from its flag.
void set_collective_timeout(double seconds);
double collective_timeout();

// Throws tidal::Error unless `members` is ascending, without repeats, within [0, size) and holds `rank`;
// returns `rank`'s index in it. For Communicator::subgroup's implementations.
int check_subgroup(const std::vector<int>& members, int rank, int size);

// Every rank's string, in rank order (error messages, per-rank summaries).
std::vector<std::string> all_gather_strings(Communicator& comm, const std::string& mine);

}  // namespace tidal::dist
