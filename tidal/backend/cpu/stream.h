#pragma once
// CPU streams (seam/runtime.h): the compute stream runs work inline on the calling thread; a side
// stream runs it on a worker thread of its own, so copies really overlap compute.
#include <memory>
#include <string>

#include "tidal/seam/runtime.h"

namespace tidal::cpu {

std::unique_ptr<detail::StreamImpl> make_stream(const std::string& name, bool compute);

}  // namespace tidal::cpu
