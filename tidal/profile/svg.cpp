#include "tidal/profile/svg.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>

#include "tidal/profile/analysis.h"

namespace tidal::profile {
namespace {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
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

struct Window {
  int64_t t0 = 0, t1 = 1;
  int64_t step = -1;
};

// The step to draw: the one with the out-of-memory error, else the one with the peak.
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

namespace {

// Op colors by family (forward ops and their backward nodes alike); recompute red, waits grey,
// blocking exchanges olive.
const char* op_color(const std::string& name, const std::string& kind) {
  if (is_recompute(name)) return "#e15759";
  if (kind == kWait) return "#7f7f7f";
  if (kind == kComm) return "#bcbd22";  // a blocking exchange between ranks
  std::string n;
  for (char c : name) n += char(std::tolower(static_cast<unsigned char>(c)));
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (has("matmul") || has("linear") || has("lm_head") || has("mm")) return "#4e79a7";
  if (has("attention") || has("softmax") || has("rope")) return "#b07aa1";
  if (has("norm")) return "#59a14f";
  if (has("loss") || has("cross_entropy")) return "#f28e2b";
  if (has("embedding") || has("index") || has("gather")) return "#9c755f";
  if (has("adamw") || has("clip") || has("grad_norm")) return "#76b7b2";
  if (has("gelu") || has("silu") || has("swiglu") || has("dropout")) return "#ff9da7";
  return "#bab0ac";
}

// Draws one lane row: wide ranges as rectangles (labelled when there is room), narrow ones as the
// dominant color of each pixel column, merged into runs.
struct Item {
  int64_t a, b;
  const char* color;
  std::string label;
};

std::string lane_row(const std::vector<Item>& items, const Window& w, double x0, double x1, double y, double h) {
  std::string out;
  const double sx = (x1 - x0) / double(w.t1 - w.t0);
  const int cols = int(x1 - x0);
  std::vector<std::map<std::string, double>> narrow(static_cast<size_t>(cols));
  for (const Item& it : items) {
    if (it.b <= w.t0 || it.a >= w.t1) continue;
    const double a = x0 + double(std::max(it.a, w.t0) - w.t0) * sx, b = x0 + double(std::min(it.b, w.t1) - w.t0) * sx;
    if (b - a >= 1.5) {
      out +=
          fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"#fff\" "
              "stroke-width=\"0.4\"/>\n",
              a, y, b - a, h, it.color);
      const size_t fit = size_t((b - a - 4) / 6.2);
      if (!it.label.empty() && (fit >= it.label.size() || fit >= 7))
        out += fmt("<text x=\"%.1f\" y=\"%.1f\" fill=\"#fff\" font-size=\"10\">", a + 2, y + h - 4) +
               esc(it.label.size() > fit ? it.label.substr(0, fit - 1) + "~" : it.label) + "</text>\n";
    } else {
      const int c = std::clamp(int(a - x0), 0, cols - 1);
      narrow[size_t(c)][it.color] += b - a;
    }
  }
  for (int c = 0; c < cols;) {
    if (narrow[size_t(c)].empty()) {
      ++c;
      continue;
    }
    auto dominant = [&](int k) {
      std::string best;
      double bw = 0;
      for (const auto& [color, width] : narrow[size_t(k)])
        if (width > bw) best = color, bw = width;
      return best;
    };
    const std::string color = dominant(c);
    int e = c + 1;
    while (e < cols && !narrow[size_t(e)].empty() && dominant(e) == color) ++e;
    out += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\"/>\n", x0 + c, y, e - c, h,
               color.c_str());
    c = e;
  }
  return out;
}

}  // namespace

std::string timeline_svg(const ProfileData& d) {
  const int W = 1000;
  const double x0 = 120, x1 = 985, row = 18;
  const Window w = chosen_step(d);

  // Nesting depth of the compute lane's ranges.
  std::vector<const RangeRecord*> lane;
  for (const RangeRecord& r : d.ranges)
    if (r.thread == 0 && r.kind != kPhase && r.end_ns > w.t0 && r.start_ns < w.t1) lane.push_back(&r);
  std::sort(lane.begin(), lane.end(), [](const RangeRecord* a, const RangeRecord* b) {
    return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
  });
  constexpr int kMaxDepth = 6;
  std::vector<std::vector<Item>> depth_items(kMaxDepth);
  std::vector<int64_t> open;  // end times of the enclosing ranges
  int depth_used = 1;
  for (const RangeRecord* r : lane) {
    while (!open.empty() && open.back() <= r->start_ns) open.pop_back();
    const int depth = int(open.size());
    open.push_back(r->end_ns);
    if (depth >= kMaxDepth) continue;
    depth_used = std::max(depth_used, depth + 1);
    std::string label = r->name;
    if (r->layer >= 0 && depth == 0) label.append(" L").append(std::to_string(r->layer));
    depth_items[size_t(depth)].push_back({r->start_ns, r->end_ns, op_color(r->name, r->kind), label});
  }
  // Layer spans: consecutive top-level ranges of the same layer.
  std::vector<Item> layers;
  for (const RangeRecord* r : lane) {
    if (r->layer < 0) continue;
    std::string label = std::to_string(r->layer);
    label.insert(0, 1, 'L');
    if (!layers.empty() && layers.back().label == label && r->start_ns - layers.back().b < 50000)
      layers.back().b = std::max(layers.back().b, r->end_ns);
    else
      layers.push_back({r->start_ns, r->end_ns, r->layer % 2 ? "#8d99ae" : "#5c677d", label});
  }
  std::map<std::string, std::vector<Item>> streams;
  for (const StreamTaskEvent& t : d.tasks) streams[t.stream].push_back({t.start_ns, t.end_ns, "#edc948", t.label});

  const double y_phase = 44, y_layers = y_phase + 26, y_compute = y_layers + 22,
               y_streams = y_compute + depth_used * row + 16;
  const double y_end = y_streams + std::max<size_t>(streams.size(), 1) * 26 + 8;
  const int H = int(y_end + 70);
  std::string title = "Compute and copy lanes, step " + std::to_string(w.step);
  std::string out = header(W, H, title);
  out += phase_bands(d, w, x0, x1, y_phase, y_phase + 22, true);
  out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#222\">phases</text>\n", x0 - 8, y_phase + 15);
  out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#222\">layers</text>\n", x0 - 8, y_layers + 13);
  out += lane_row(layers, w, x0, x1, y_layers, 16);
  out += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f7f7f7\"/>\n", x0, y_compute, x1 - x0,
             depth_used * row);
  out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#222\">compute</text>\n", x0 - 8, y_compute + 13);
  out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#777\" font-size=\"10\">(nested ops)</text>\n",
             x0 - 8, y_compute + 27);
  for (int k = 0; k < depth_used; ++k) out += lane_row(depth_items[size_t(k)], w, x0, x1, y_compute + k * row, row - 2);
  double y = y_streams;
  if (streams.empty()) {
    out +=
        fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"20\" fill=\"#f7f7f7\"/>"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#222\">copy streams</text>"
            "<text x=\"%.1f\" y=\"%.1f\" fill=\"#777\">no side-stream work in this step</text>\n",
            x0, y, x1 - x0, x0 - 8, y + 14, x0 + 8, y + 14);
  }
  for (const auto& [name, items] : streams) {
    out += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"20\" fill=\"#f7f7f7\"/>", x0, y, x1 - x0);
    out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#222\">", x0 - 8, y + 14) + esc(name) +
           "</text>\n";  // the stream's own name ("offload d2h", "swap h2d"): the lane is a stream
    out += lane_row(items, w, x0, x1, y, 20);
    y += 26;
  }
  out += time_axis(w, x0, x1, y_end);

  // Legend.
  double lx = 16;
  const double ly = y_end + 52;
  for (auto [label, color] : {std::pair{"matmul/linear", "#4e79a7"},
                              {"attention", "#b07aa1"},
                              {"norm", "#59a14f"},
                              {"activation", "#ff9da7"},
                              {"loss", "#f28e2b"},
                              {"embedding/index", "#9c755f"},
                              {"optimizer", "#76b7b2"},
                              {"recompute", "#e15759"},
                              {"wait", "#7f7f7f"},
                              {"copy", "#edc948"}}) {
    out +=
        fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\" "
            "fill=\"#222\" font-size=\"11\">%s</text>\n",
            lx, ly - 10, color, lx + 16, ly, label);
    lx += 16 + 6.5 * double(std::char_traits<char>::length(label)) + 14;
  }
  return out + "</svg>\n";
}

}  // namespace tidal::profile
