#pragma once
// The drawing pieces both pictures of a profile share (profile/svg.h: memory_svg.cpp and
// timeline_svg.cpp): formatting, the SVG header, axes, the phase bands of the step shown. Not for use
// outside those two files.
#include <cstdint>
#include <string>
#include <utility>

#include "tidal/profile/profiler.h"

namespace tidal::profile {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string esc(const std::string& s);  // XML-escaped text
std::string header(int w, int h, const std::string& title);
// A round step (1, 2 or 5 times a power of ten) for about `n` ticks over `span`.
double nice_step(double span, int n);

// The step drawn: [t0, t1] on tidal's clock.
struct Window {
  int64_t t0 = 0, t1 = 1;
  int64_t step = -1;
};
// The step to draw: the one with the out-of-memory error, else the one with the peak.
Window chosen_step(const ProfileData& d);
const char* phase_fill(const std::string& name);
std::string phase_bands(const ProfileData& d, const Window& w, double x0, double x1, double y0, double y1, bool labels);
std::string time_axis(const Window& w, double x0, double x1, double y);
// Unit for a byte axis: divisor and name.
std::pair<double, const char*> byte_unit(double max);

}  // namespace tidal::profile
