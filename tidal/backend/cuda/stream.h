#pragma once
// CUDA streams and events behind the seam (seam/runtime.h; stream.h has the semantics). Kernels and
// copies queue on a cudaStream_t. A side stream also runs host tasks (Stream::enqueue: a disk spill, a
// gradient reduction) in its order: its items go through one worker thread, which issues copies, event
// records and waits to the CUDA stream in order and runs a task once the stream's earlier work is done,
// so later items queue behind it. The compute stream runs tasks inline, as on the CPU.
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "tidal/seam/runtime.h"

namespace tidal {
class Stream;
}

namespace tidal::cuda {

// A stream on the calling thread's current CUDA device.
std::unique_ptr<detail::StreamImpl> make_stream(const std::string& name, bool compute);

// The CUDA stream a kernel launches on: `stream` must be a CUDA device's.
cudaStream_t stream_handle(Stream& stream);

}  // namespace tidal::cuda
