#pragma once
// The pictures of a profile, as standalone SVG (no scripts, no external fonts; any browser renders
// them): memory.svg, device memory over one step stacked by category with the forward / backward /
// optimizer phases and the peak marked; timeline.svg, the compute lane (nested ops) against the
// side streams' lanes (copies). The step shown is the one with the out-of-memory error, else the
// one with the peak.
#include <string>

#include "tidal/profile/profiler.h"

namespace tidal::profile {

std::string memory_svg(const ProfileData& data);
std::string timeline_svg(const ProfileData& data);

// The category colors both pictures and the docs use ("#rrggbb").
const char* category_color(MemoryCategory c);

}  // namespace tidal::profile
