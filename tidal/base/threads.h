#pragma once
// How many threads kernels use: TIDAL_NUM_THREADS, else OpenMP's default (the number of cores).
namespace tidal {

int num_threads();
void set_num_threads(int n);

}  // namespace tidal
