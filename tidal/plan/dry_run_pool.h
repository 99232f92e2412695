#pragma once
// Dry runs on every core: a dry run takes the process's meta allocators and cost sink for itself
// (dry_run.h), so two cannot share a process; they run in worker processes (fork: the model's
// configuration and the search's state are there already), several at once, each sending back what the
// planner keeps of a dry run (no saved-tensor table). Results come back in the jobs' order, so a search
// makes the same choices with any number of workers.
//
// Only for a process that runs no other threads' work and no MPI (tidal plan): a worker has the
// forking thread alone. The workers run their loops on one thread (the OpenMP pool is not theirs;
// base/threads.h run_loops_serially) and leave with _exit (nothing of the parent's is flushed or
// destroyed twice).
#include <sys/types.h>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tidal/plan/dry_run.h"

namespace tidal::plan {

// Worker processes forked once that run jobs named by an index, one after another: each keeps its heap between
// them (a fresh process per dry run faults in every page it touches: on a 2-core machine that doubled a MoE
// model's dry runs). The workers see this process as it was when they were made: `job(i)` must be resolvable
// from that state (tidal plan's search makes them once every candidate is enumerated).
class DryRunWorkers {
 public:
  DryRunWorkers(int workers, std::function<DryRunOutcome(size_t)> job);
  ~DryRunWorkers();  // ends and reaps the workers
  DryRunWorkers(const DryRunWorkers&) = delete;
  DryRunWorkers& operator=(const DryRunWorkers&) = delete;

  // job(i) for each index, on the workers at once; results in the indexes' order, `done(k)` after the k-th's is
  // in. Throws tidal::Error when a worker dies or any other exception than tidal::Error ends a job.
  std::vector<DryRunOutcome> run(const std::vector<size_t>& jobs, const std::function<void(size_t)>& done = {});

 private:
  struct Worker {
    pid_t pid = -1;
    int to = -1, from = -1;  // the job indexes it reads; its results (a length, then encode_outcome's bytes)
  };
  std::vector<Worker> workers_;
};

// The processes tidal plan runs dry runs on: TIDAL_PLAN_JOBS, else the cores this process may use.
int dry_run_workers();

// The bytes of a result and back (what crosses from a child; exposed for the tests).
std::string encode_outcome(const DryRunOutcome& o);
DryRunOutcome decode_outcome(const std::string& bytes);

}  // namespace tidal::plan
