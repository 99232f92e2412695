// memory.svg (profile/svg.h): device memory over the step stacked by category.
#include <algorithm>
#include <cmath>
#include <map>

#include "tidal/profile/analysis.h"
#include "tidal/profile/svg.h"
#include "tidal/profile/svg_parts.h"

namespace tidal::profile {
namespace {

const MemoryCategory kStackOrder[] = {
    MemoryCategory::parameter, MemoryCategory::optimizer_state, MemoryCategory::gradient,    MemoryCategory::activation,
    MemoryCategory::logits,    MemoryCategory::temporary,       MemoryCategory::host_offload};

}  // namespace

const char* category_color(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameter: return "#4e79a7";
    case MemoryCategory::gradient: return "#f28e2b";
    case MemoryCategory::optimizer_state: return "#76b7b2";
    case MemoryCategory::activation: return "#e15759";
    case MemoryCategory::logits: return "#edc948";
    case MemoryCategory::temporary: return "#bab0ac";
    case MemoryCategory::host_offload: return "#b07aa1";
  }
  return "#000000";
}

namespace {

// Device memory sampled at one column per pixel: the state at the column's highest total (peaks
// survive the downsampling), the reserved bytes, and the host total (the offload target).
struct MemoryColumns {
  std::vector<CategoryBytes> device;
  std::vector<int64_t> reserved;
  std::vector<int64_t> host;  // empty when the profile has no host events
  double vmax = 1;            // the largest value drawn, bytes
};

int64_t total_bytes(const CategoryBytes& b) {
  int64_t s = 0;
  for (int64_t v : b) s += v;
  return s;
}

MemoryColumns sample_columns(const ProfileData& d, const Window& w, const std::vector<CategoryBytes>& states,
                             int cols) {
  MemoryColumns m;
  m.device.resize(static_cast<size_t>(cols));
  m.reserved.assign(size_t(cols), d.device_reserved_start);
  CategoryBytes cur = d.device_start;
  int64_t cur_reserved = d.device_reserved_start;
  size_t i = 0;
  for (; i < d.device.size() && d.device[i].time_ns < w.t0; ++i)
    if (d.device[i].settled()) cur = states[i], cur_reserved = d.device[i].reserved;
  for (int c = 0; c < cols; ++c) {
    const int64_t tb = w.t0 + int64_t(double(w.t1 - w.t0) * double(c + 1) / cols);
    CategoryBytes best = cur;
    int64_t best_total = total_bytes(cur), best_reserved = cur_reserved;
    for (; i < d.device.size() && d.device[i].time_ns < tb; ++i) {
      if (!d.device[i].settled()) continue;
      cur = states[i];
      cur_reserved = d.device[i].reserved;
      if (total_bytes(cur) > best_total) best = cur, best_total = total_bytes(cur), best_reserved = cur_reserved;
    }
    m.device[size_t(c)] = best;
    m.reserved[size_t(c)] = std::max(best_reserved, cur_reserved);
    m.vmax = std::max({m.vmax, double(best_total), double(m.reserved[size_t(c)])});
  }
  if (d.host.empty()) return m;
  m.host.assign(static_cast<size_t>(cols), 0);
  int64_t h = 0;
  for (int64_t b : d.host_start) h += b;
  size_t j = 0;
  for (int c = 0; c < cols; ++c) {
    const int64_t tb = w.t0 + int64_t(double(w.t1 - w.t0) * double(c + 1) / cols);
    int64_t hmax = h;
    for (; j < d.host.size() && d.host[j].time_ns < tb; ++j) {
      if (d.host[j].settled()) h = d.host[j].allocated;
      hmax = std::max(hmax, h);
    }
    m.host[size_t(c)] = hmax;
    m.vmax = std::max(m.vmax, double(hmax));
  }
  return m;
}

bool category_shown(const MemoryColumns& m, MemoryCategory c) {
  for (const CategoryBytes& b : m.device)
    if (b[size_t(c)] != 0) return true;
  return false;
}

// The vertical geometry: bytes to y between y0 (top) and y1 (bottom).
struct ByteAxis {
  double y0, y1, top, unit, tick;
  const char* unit_name;
  double y(double bytes) const { return y1 - (y1 - y0) * bytes / top; }
};

// The categories as stacked areas, one path each.
std::string stacked_areas(const MemoryColumns& m, const ByteAxis& ax, double x0) {
  std::string out;
  const int cols = int(m.device.size());
  std::vector<double> base(size_t(cols), 0.0);
  for (MemoryCategory c : kStackOrder) {
    if (!category_shown(m, c)) continue;
    std::string top_edge, bottom_edge;
    for (int k = 0; k < cols; ++k) {
      const double hi = base[size_t(k)] + double(m.device[size_t(k)][size_t(c)]);
      top_edge += fmt("%s%.1f,%.1f", k == 0 ? "M" : " L", x0 + k + 0.5, ax.y(hi));
      base[size_t(k)] = hi;
    }
    for (int k = cols - 1; k >= 0; --k)
      bottom_edge += fmt(" L%.1f,%.1f", x0 + k + 0.5, ax.y(base[size_t(k)] - double(m.device[size_t(k)][size_t(c)])));
    out += fmt("<path d=\"%s%s Z\" fill=\"%s\" stroke=\"none\"/>\n", top_edge.c_str(), bottom_edge.c_str(),
               category_color(c));
  }
  return out;
}

// A polyline through one value per column.
std::string column_path(const std::vector<int64_t>& v, const ByteAxis& ax, double x0) {
  std::string path;
  for (size_t k = 0; k < v.size(); ++k)
    path += fmt("%s%.1f,%.1f", k == 0 ? "M" : " L", x0 + double(k) + 0.5, ax.y(double(v[k])));
  return path;
}

// Reserved (allocated + cache + rounding) dashed, the host total, and the device limit.
std::string reference_lines(const ProfileData& d, const MemoryColumns& m, const ByteAxis& ax, double x0, double x1,
                            bool show_limit) {
  std::string out = "<path d=\"" + column_path(m.reserved, ax, x0) +
                    "\" fill=\"none\" stroke=\"#333\" stroke-width=\"1.2\" stroke-dasharray=\"4 3\"/>\n";
  if (!m.host.empty())
    out += "<path d=\"" + column_path(m.host, ax, x0) + "\" fill=\"none\" stroke=\"" +
           category_color(MemoryCategory::host_offload) + "\" stroke-width=\"2\" stroke-dasharray=\"6 3\"/>\n";
  if (show_limit)
    out +=
        fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c00\" stroke-width=\"1.5\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#c00\">limit %s</text>\n",
            x0, ax.y(double(d.device_limit)), x1, ax.y(double(d.device_limit)), x1 - 4,
            ax.y(double(d.device_limit)) - 4, format_bytes(d.device_limit).c_str());
  return out;
}

// The peak and the out-of-memory failure as labelled vertical lines.
std::string event_markers(const ProfileData& d, const Window& w, const ByteAxis& ax, double x0, double x1, int64_t p,
                          int64_t f) {
  std::string out;
  auto marker = [&](int64_t idx, const char* color, const std::string& text, double text_y) {
    const MemEvent& e = d.device[size_t(idx)];
    if (e.time_ns < w.t0 || e.time_ns > w.t1) return;
    const double x = x0 + (x1 - x0) * double(e.time_ns - w.t0) / double(w.t1 - w.t0);
    const bool right = x > (x0 + x1) / 2;
    out +=
        fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\" "
            "stroke-dasharray=\"2 2\"/>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" fill=\"%s\" font-size=\"12\">",
            x, ax.y0, x, ax.y1, color, right ? x - 5 : x + 5, text_y, right ? "end" : "start", color) +
        esc(text) + "</text>\n";
  };
  if (p >= 0) {
    const MemEvent& e = d.device[size_t(p)];
    marker(p, "#222",
           "peak " + format_bytes(e.allocated) + " at " + (e.op.empty() ? "?" : e.op) +
               (e.layer >= 0 ? " (layer " + std::to_string(e.layer) + ")" : ""),
           ax.y0 + 32);
  }
  if (f >= 0) {
    const MemEvent& e = d.device[size_t(f)];
    marker(f, "#c00", "out of memory: " + format_bytes(e.delta) + " for " + (e.op.empty() ? "?" : e.op), ax.y0 + 50);
  }
  return out;
}

std::string byte_axis(const ByteAxis& ax, double x0, double x1) {
  std::string out =
      fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n", x0, ax.y0, x0, ax.y1);
  for (double v = 0; v <= ax.top / ax.unit + 1e-9; v += ax.tick) {
    const double y = ax.y(v * ax.unit);
    out += fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-opacity=\"0.08\"/>", x0, y,
               x1, y);
    out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#333\">%g %s</text>\n", x0 - 6, y + 4, v,
               ax.unit_name);
  }
  return out;
}

// Legend: categories with their bytes at the peak, the lines, the phases.
std::string memory_legend(const MemoryColumns& m, const CategoryBytes& at, double ly) {
  std::string out = fmt("<text x=\"810\" y=\"%.1f\" font-weight=\"bold\" fill=\"#222\">at the peak</text>\n", ly + 4);
  ly += 20;
  for (auto it = std::rbegin(kStackOrder); it != std::rend(kStackOrder); ++it) {
    const MemoryCategory c = *it;
    if (!category_shown(m, c)) continue;
    out += fmt(
        "<rect x=\"810\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\"/>"
        "<text x=\"830\" y=\"%.1f\" fill=\"#222\">%s</text><text x=\"990\" y=\"%.1f\" text-anchor=\"end\" "
        "fill=\"#444\">%s</text>\n",
        ly - 11, category_color(c), ly, std::string(category_name(c)).c_str(), ly, format_bytes(at[size_t(c)]).c_str());
    ly += 20;
  }
  out +=
      fmt("<line x1=\"810\" y1=\"%.1f\" x2=\"824\" y2=\"%.1f\" stroke=\"#333\" stroke-dasharray=\"4 3\"/>"
          "<text x=\"830\" y=\"%.1f\" fill=\"#222\">reserved</text>\n",
          ly - 4, ly - 4, ly);
  if (!m.host.empty()) {
    ly += 20;
    out +=
        fmt("<line x1=\"810\" y1=\"%.1f\" x2=\"824\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\" "
            "stroke-dasharray=\"6 3\"/><text x=\"830\" y=\"%.1f\" fill=\"#222\">host memory</text>\n",
            ly - 4, ly - 4, category_color(MemoryCategory::host_offload), ly);
  }
  ly += 28;
  for (const char* ph : {"forward", "backward", "optimizer"}) {
    out +=
        fmt("<rect x=\"810\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\" stroke=\"#bbb\"/>"
            "<text x=\"830\" y=\"%.1f\" fill=\"#222\">%s</text>\n",
            ly - 11, phase_fill(ph), ly, ph);
    ly += 20;
  }
  return out;
}

}  // namespace

std::string memory_svg(const ProfileData& d) {
  const int W = 1000, H = 480;
  const double x0 = 80, x1 = 790, y0 = 44, y1 = 410;
  const Window w = chosen_step(d);
  const std::vector<CategoryBytes> states = replay_states(d.device_start, d.device);
  const MemoryColumns m = sample_columns(d, w, states, int(x1 - x0));
  double vmax = m.vmax;
  const bool show_limit = d.device_limit > 0 && double(d.device_limit) < 1.6 * vmax;
  if (show_limit) vmax = std::max(vmax, double(d.device_limit));
  const auto [unit, unit_name] = byte_unit(vmax);
  const double tick = nice_step(vmax * 1.05 / unit, 6);
  const ByteAxis ax{y0, y1, std::ceil(vmax * 1.05 / unit / tick) * tick * unit, unit, tick, unit_name};

  const int64_t p = peak_event(d), f = failed_event(d);
  std::string title = "Device memory over step " + std::to_string(w.step);
  if (p >= 0) title += " - peak " + format_bytes(d.device[size_t(p)].allocated);
  std::string out = header(W, H, title);
  out += phase_bands(d, w, x0, x1, y0, y1, true);
  out += stacked_areas(m, ax, x0);
  out += reference_lines(d, m, ax, x0, x1, show_limit);
  out += event_markers(d, w, ax, x0, x1, p, f);
  out += byte_axis(ax, x0, x1);
  out += time_axis(w, x0, x1, y1);
  out += memory_legend(m, p >= 0 ? states[size_t(p)] : d.device_start, y0 + 6);
  return out + "</svg>\n";
}

}  // namespace tidal::profile
