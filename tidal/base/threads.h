#pragma once
// How many threads kernels use: TIDAL_NUM_THREADS, else OpenMP's default (the number of cores).
namespace tidal {

int num_threads();
void set_num_threads(int n);

// From now on this process's parallel loops (parallel.h) run on the calling thread alone, while
// num_threads() — which sizes the kernels' per-thread workspaces, also as a dry run plans them — keeps
// its value. For a forked child (plan/dry_run_pool.h): the parent's OpenMP threads are not in it.
void run_loops_serially();
bool loops_run_serially();

}  // namespace tidal
