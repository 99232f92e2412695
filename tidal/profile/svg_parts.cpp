#include "tidal/profile/svg_parts.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "tidal/profile/analysis.h"

namespace tidal::profile {

std::string fmt(const char* f, ...) {
  va_list ap, again;
  va_start(ap, f);
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, f, ap);
  va_end(ap);
  std::string out(size_t(std::max(n, 0)) + 1, '\0');
  std::vsnprintf(out.data(), out.size(), f, again);
  va_end(again);
  out.resize(size_t(std::max(n, 0)));
  return out;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&')
      o += "&amp;";
    else if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

const char* kFont = "font-family=\"DejaVu Sans, Liberation Sans, Arial, sans-serif\"";

std::string header(int w, int h, const std::string& title) {
  return fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" %s "
             "font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
             w, h, w, h, kFont, w, h) +
         fmt("<text x=\"%d\" y=\"24\" font-size=\"15\" font-weight=\"bold\" fill=\"#222\">", 16) + esc(title) +
         "</text>\n";
}

// A "nice" tick step (1, 2 or 5 times a power of ten) for about `n` ticks over [0, span].
double nice_step(double span, int n) {
  if (span <= 0) return 1;
  const double raw = span / n, p = std::pow(10.0, std::floor(std::log10(raw)));
  const double m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

Window chosen_step(const ProfileData& d) {
  Window w{d.start_ns, std::max(d.end_ns, d.start_ns + 1), -1};
  int64_t at = failed_event(d);
  if (at < 0) at = peak_event(d);
  if (at >= 0 && !d.steps.empty()) {
    const int64_t s = step_at(d, d.device[size_t(at)].time_ns);
    for (const StepSpan& st : d.steps)
      if (st.step == s) w = {st.start_ns, std::max(st.end_ns, st.start_ns + 1), s};
  } else if (!d.steps.empty()) {
    w = {d.steps.front().start_ns, std::max(d.steps.front().end_ns, d.steps.front().start_ns + 1),
         d.steps.front().step};
  }
  if (at >= 0 && d.device[size_t(at)].failed()) w.t1 = std::max(w.t1, d.device[size_t(at)].time_ns + 1);
  return w;
}

const char* phase_fill(const std::string& name) {
  if (name == "forward") return "#dce9f7";
  if (name == "backward") return "#fde3cc";
  if (name == "optimizer") return "#dff0d8";
  return "#eeeeee";
}

// Phase bands over [x0, x1] x [y0, y1] for the ranges of kind phase in the window.
std::string phase_bands(const ProfileData& d, const Window& w, double x0, double x1, double y0, double y1,
                        bool labels) {
  std::string out;
  const double sx = (x1 - x0) / double(w.t1 - w.t0);
  for (const RangeRecord& r : d.ranges) {
    if (r.kind != kPhase || r.end_ns <= w.t0 || r.start_ns >= w.t1) continue;
    const double a = x0 + double(std::max(r.start_ns, w.t0) - w.t0) * sx;
    const double b = x0 + double(std::min(r.end_ns, w.t1) - w.t0) * sx;
    out += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"/>\n", a, y0,
               std::max(b - a, 0.5), y1 - y0, phase_fill(r.name));
    if (labels && b - a > 8.0 * double(r.name.size()))
      out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\" font-size=\"12\">%s</text>\n",
                 (a + b) / 2, y0 + 15, esc(r.name).c_str());
  }
  return out;
}

std::string time_axis(const Window& w, double x0, double x1, double y) {
  std::string out = fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", x0, y, x1, y);
  const double span_ms = double(w.t1 - w.t0) / 1e6, step = nice_step(span_ms, 8);
  for (double t = 0; t <= span_ms + 1e-9; t += step) {
    const double x = x0 + (x1 - x0) * t / span_ms;
    out += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>", x, y, x, y + 4);
    out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#333\">%g</text>\n", x, y + 17, t);
  }
  out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#333\">ms into step</text>\n", (x0 + x1) / 2,
             y + 33);
  return out;
}

// Unit for a byte axis: divisor and name.
std::pair<double, const char*> byte_unit(double max) {
  if (max >= 2.0 * (1 << 30)) return {double(1 << 30), "GiB"};
  if (max >= 2.0 * (1 << 20)) return {double(1 << 20), "MiB"};
  return {1024.0, "KiB"};
}

}  // namespace tidal::profile
