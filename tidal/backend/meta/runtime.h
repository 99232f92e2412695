#pragma once
// The meta device's DeviceRuntime: fake addresses (accounted, never touched) for its device memory
// and for its host side (a dry run's offload and swap-optimizer states: allocator.h host_allocator),
// and streams that run their work in order on the calling thread (nothing to overlap: no threads), whose
// byte copies move nothing — a copy between meta device and meta host memory is ordered like a real
// one and holds what it keeps alive until its turn, but has no bytes to move. It has no kernels:
// seam/kernels.h's kernels_for skips it.
#include "tidal/seam/runtime.h"

namespace tidal::meta {

DeviceRuntime& runtime();

}  // namespace tidal::meta
