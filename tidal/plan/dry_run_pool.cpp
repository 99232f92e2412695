#include "tidal/plan/dry_run_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "tidal/base/error.h"
#include "tidal/base/threads.h"

namespace tidal::plan {
namespace {

// Note [Dry runs in children]: the bytes a worker sends are read by its parent alone, which is the same
// program image (fork): KernelCost::kernel, a pointer to a static string, is sent as its address.
static_assert(std::is_trivially_copyable_v<MemoryStats>);

class Writer {
 public:
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod(uint64_t(s.size()));
    out_ += s;
  }
  template <class T>
  void vec(const std::vector<T>& v) {
    pod(uint64_t(v.size()));
    for (const T& x : v) pod(x);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <class T>
  T pod() {
    T v;
    TIDAL_CHECK(at_ + sizeof v <= in_.size(), "tidal plan: a dry run's result from its process is cut short");
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string str() {
    const uint64_t n = pod<uint64_t>();
    TIDAL_CHECK(n <= in_.size() - at_, "tidal plan: a dry run's result from its process is cut short");
    std::string s = in_.substr(at_, n);
    at_ += n;
    return s;
  }
  template <class T>
  std::vector<T> vec() {
    const uint64_t n = pod<uint64_t>();
    TIDAL_CHECK(n <= (in_.size() - at_) / std::max<size_t>(1, sizeof(T)),
                "tidal plan: a dry run's result from its process is cut short");
    std::vector<T> v;
    v.reserve(n);
    for (uint64_t i = 0; i < n; ++i) v.push_back(pod<T>());
    return v;
  }
  bool done() const { return at_ == in_.size(); }

 private:
  const std::string& in_;
  size_t at_ = 0;
};

void write_all(int fd, const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + at, bytes.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the parent is gone: nothing to tell
    at += size_t(n);
  }
}

// The 8 bytes of `v` (a job index to a worker, a result's length back).
std::string u64_bytes(uint64_t v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }

// A result's first byte: the job's outcome follows, or the message of an exception that ended it.
constexpr char kOutcome = 'O', kFailure = 'X';

bool read_exact(int fd, void* into, size_t n) {
  char* p = static_cast<char*>(into);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

// A worker's life: a job index in, its result out (length first), until the parent closes the pipe.
[[noreturn]] void run_worker(const std::function<DryRunOutcome(size_t)>& job, int in, int out) {
  run_loops_serially();  // the parent's OpenMP threads are not in this process (the thread count stays:
                         // it sizes the per-thread workspaces a dry run plans)
  uint64_t i = 0;
  while (read_exact(in, &i, sizeof i)) {
    std::string bytes;
    try {
      bytes = kOutcome + encode_outcome(job(size_t(i)));
    } catch (const std::exception& e) {
      bytes = std::string(1, kFailure) + e.what();
    } catch (...) {
      bytes = std::string(1, kFailure) + "an unknown exception";
    }
    write_all(out, u64_bytes(bytes.size()) + bytes);
  }
  ::_exit(0);
}

}  // namespace

std::string encode_outcome(const DryRunOutcome& o) {
  Writer w;
  w.str(o.error);
  w.pod(uint8_t(o.run.has_value()));
  if (!o.run) return w.take();
  const DryRun& d = *o.run;
  w.pod(d.device);
  w.pod(d.host);
  w.vec(d.activation_bytes_per_layer);
  w.pod(d.activation_bytes_outside_layers);
  w.pod(d.steps);
  w.pod(d.rank);
  w.pod(d.ranks);
  w.vec(d.ranks_run);
  w.pod(d.sharding);
  w.vec(d.parameter_numels);
  w.pod(uint64_t(d.expert_parameter.size()));
  for (const bool e : d.expert_parameter) w.pod(uint8_t(e));
  w.pod(d.recorded_kernels);
  w.pod(uint64_t(d.kernels.size()));
  for (const StepKernel& k : d.kernels) {
    w.pod(k.cost);
    w.pod(k.phase);
    w.pod(k.layer);
    w.str(k.module);
    w.str(k.op);
    w.pod(k.count);
    w.pod(uint8_t(k.head));
  }
  return w.take();
}

DryRunOutcome decode_outcome(const std::string& bytes) {
  Reader r(bytes);
  DryRunOutcome o;
  o.error = r.str();
  if (r.pod<uint8_t>() == 0) return o;
  DryRun d;
  d.device = r.pod<MemoryStats>();
  d.host = r.pod<MemoryStats>();
  d.activation_bytes_per_layer = r.vec<int64_t>();
  d.activation_bytes_outside_layers = r.pod<int64_t>();
  d.steps = r.pod<int64_t>();
  d.rank = r.pod<int>();
  d.ranks = r.pod<int>();
  d.ranks_run = r.vec<int>();
  d.sharding = r.pod<parallel::ShardingStrategy>();
  d.parameter_numels = r.vec<int64_t>();
  for (const uint8_t e : r.vec<uint8_t>()) d.expert_parameter.push_back(e != 0);
  d.recorded_kernels = r.pod<int64_t>();
  const uint64_t n = r.pod<uint64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    StepKernel k;
    k.cost = r.pod<KernelCost>();
    k.phase = r.pod<StepPhase>();
    k.layer = r.pod<int>();
    k.module = r.str();
    k.op = r.str();
    k.count = r.pod<int64_t>();
    k.head = r.pod<uint8_t>() != 0;
    d.kernels.push_back(std::move(k));
  }
  TIDAL_CHECK(r.done(), "tidal plan: a dry run's result from its process has bytes left over");
  o.run = std::move(d);
  return o;
}

int dry_run_workers() {
  if (const char* v = std::getenv("TIDAL_PLAN_JOBS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    TIDAL_CHECK(end != v && *end == '\0' && n >= 1 && n <= 4096,
                "TIDAL_PLAN_JOBS must be a number of processes from 1 to 4096, got '", v, "'");
    return int(n);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
}

DryRunWorkers::DryRunWorkers(int workers, std::function<DryRunOutcome(size_t)> job) {
  for (int w = 0; w < workers; ++w) {
    int jobs[2], results[2];
    TIDAL_CHECK(::pipe2(jobs, O_CLOEXEC) == 0, "tidal plan: no pipe for a dry run's process: ", std::strerror(errno));
    if (::pipe2(results, O_CLOEXEC) != 0) {
      ::close(jobs[0]);
      ::close(jobs[1]);
      throw Error(std::string("tidal plan: no pipe for a dry run's process: ") + std::strerror(errno));
    }
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (const Worker& other : workers_) {  // the earlier workers' pipes are not this one's
        ::close(other.to);
        ::close(other.from);
      }
      ::close(jobs[1]);
      ::close(results[0]);
      run_worker(job, jobs[0], results[1]);
    }
    ::close(jobs[0]);
    ::close(results[1]);
    if (pid < 0) {
      ::close(jobs[1]);
      ::close(results[0]);
      throw Error(std::string("tidal plan: could not start a process for dry runs: ") + std::strerror(errno) +
                  "; TIDAL_PLAN_JOBS=1 runs them in tidal plan's own process");
    }
    workers_.push_back({pid, jobs[1], results[0]});
  }
}

DryRunWorkers::~DryRunWorkers() {
  for (Worker& w : workers_) {
    ::close(w.to);
    ::close(w.from);
    if (w.pid < 0) continue;
    ::kill(w.pid, SIGKILL);  // idle (its jobs' end read), or in a job whose result nobody waits for
    int status = 0;
    while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

std::vector<DryRunOutcome> DryRunWorkers::run(const std::vector<size_t>& jobs,
                                              const std::function<void(size_t)>& done) {
  std::vector<DryRunOutcome> out(jobs.size());
  constexpr size_t kIdle = SIZE_MAX;
  std::vector<size_t> on(workers_.size(), kIdle);  // the job each worker runs
  std::vector<std::string> bytes(workers_.size());
  size_t next = 0, finished = 0;
  while (finished < jobs.size()) {
    for (size_t w = 0; w < workers_.size() && next < jobs.size(); ++w) {
      if (on[w] != kIdle) continue;
      write_all(workers_[w].to, u64_bytes(jobs[next]));
      on[w] = next++;
      bytes[w].clear();
    }
    std::vector<pollfd> polls;
    std::vector<size_t> busy;
    for (size_t w = 0; w < workers_.size(); ++w)
      if (on[w] != kIdle) {
        polls.push_back({workers_[w].from, POLLIN, 0});
        busy.push_back(w);
      }
    if (::poll(polls.data(), polls.size(), -1) < 0) {
      TIDAL_CHECK(errno == EINTR, "tidal plan: waiting for the dry runs' processes failed: ", std::strerror(errno));
      continue;
    }
    for (size_t k = 0; k < busy.size(); ++k) {
      if (polls[k].revents == 0) continue;
      const size_t w = busy[k];
      char buffer[1 << 16];
      const ssize_t n = ::read(workers_[w].from, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // the end of its results: it ended (reaped here, so its signal can be named)
        int status = 0;
        while (::waitpid(workers_[w].pid, &status, 0) < 0 && errno == EINTR) {
        }
        workers_[w].pid = -1;  // reaped: the destructor leaves it
        const std::string signal = WIFSIGNALED(status) ? " by signal " + std::to_string(WTERMSIG(status)) : "";
        throw Error("tidal plan: the process of dry run " + std::to_string(on[w] + 1) + " ended" + signal +
                    (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? " (the out-of-memory killer?)" : "") +
                    " without its result: nothing was planned; TIDAL_PLAN_JOBS=1 runs the dry runs in tidal plan's "
                    "own process");
      }
      bytes[w].append(buffer, size_t(n));
      uint64_t length = 0;
      if (bytes[w].size() < sizeof length) continue;
      std::memcpy(&length, bytes[w].data(), sizeof length);
      if (bytes[w].size() < sizeof length + length) continue;
      TIDAL_CHECK(bytes[w].size() == sizeof length + length,
                  "tidal plan: a dry run's process sent more than its result");
      const std::string result = bytes[w].substr(sizeof length);
      const size_t job = on[w];
      on[w] = kIdle;
      ++finished;
      TIDAL_CHECK(!result.empty() && (result[0] == kOutcome || result[0] == kFailure), "tidal plan: dry run ", job + 1,
                  " sent an unreadable result");
      if (result[0] == kFailure)
        throw Error("tidal plan: dry run " + std::to_string(job + 1) + " failed: " + result.substr(1));
      out[job] = decode_outcome(result.substr(1));
      if (done) done(job);
    }
  }
  return out;
}

}  // namespace tidal::plan
