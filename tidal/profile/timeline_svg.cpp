// timeline.svg (profile/svg.h): the compute lane against the side streams' lanes.
#include <algorithm>
#include <cmath>
#include <map>

#include "tidal/profile/analysis.h"
#include "tidal/profile/svg.h"
#include "tidal/profile/svg_parts.h"

namespace tidal::profile {
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
  if (has("gelu") || has("silu") || has("swiglu") || has("geglu") || has("dropout")) return "#ff9da7";
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

// The compute lane's ranges in the window, in start order (enclosing first), each at its nesting depth
// (up to kMaxDepth rows).
struct ComputeLane {
  static constexpr int kMaxDepth = 6;
  std::vector<const RangeRecord*> ranges;
  std::vector<std::vector<Item>> depth_items = std::vector<std::vector<Item>>(kMaxDepth);
  int depth_used = 1;
};

ComputeLane compute_lane(const ProfileData& d, const Window& w) {
  ComputeLane c;
  for (const RangeRecord& r : d.ranges)
    if (r.thread == 0 && r.kind != kPhase && r.end_ns > w.t0 && r.start_ns < w.t1) c.ranges.push_back(&r);
  std::sort(c.ranges.begin(), c.ranges.end(), [](const RangeRecord* a, const RangeRecord* b) {
    return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
  });
  std::vector<int64_t> open;  // end times of the enclosing ranges
  for (const RangeRecord* r : c.ranges) {
    while (!open.empty() && open.back() <= r->start_ns) open.pop_back();
    const int depth = int(open.size());
    open.push_back(r->end_ns);
    if (depth >= ComputeLane::kMaxDepth) continue;
    c.depth_used = std::max(c.depth_used, depth + 1);
    std::string label = r->name;
    if (r->layer >= 0 && depth == 0) label.append(" L").append(std::to_string(r->layer));
    c.depth_items[size_t(depth)].push_back({r->start_ns, r->end_ns, op_color(r->name, r->kind), label});
  }
  return c;
}

// Layer spans: consecutive ranges of the same layer, merged.
std::vector<Item> layer_spans(const std::vector<const RangeRecord*>& lane) {
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
  return layers;
}

// One 26-pixel row per side stream from y, or one saying there was none.
std::string stream_rows(const std::map<std::string, std::vector<Item>>& streams, const Window& w, double x0, double x1,
                        double y) {
  std::string out;
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
  return out;
}

// The op families' colors, in one row at y.
std::string legend(double ly) {
  std::string out;
  double lx = 16;
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
  return out;
}

}  // namespace

std::string timeline_svg(const ProfileData& d) {
  const int W = 1000;
  const double x0 = 120, x1 = 985, row = 18;
  const Window w = chosen_step(d);
  const ComputeLane lane = compute_lane(d, w);
  const int depth_used = lane.depth_used;
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
  out += lane_row(layer_spans(lane.ranges), w, x0, x1, y_layers, 16);
  out += fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f7f7f7\"/>\n", x0, y_compute, x1 - x0,
             depth_used * row);
  out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#222\">compute</text>\n", x0 - 8, y_compute + 13);
  out += fmt("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#777\" font-size=\"10\">(nested ops)</text>\n",
             x0 - 8, y_compute + 27);
  for (int k = 0; k < depth_used; ++k)
    out += lane_row(lane.depth_items[size_t(k)], w, x0, x1, y_compute + k * row, row - 2);
  out += stream_rows(streams, w, x0, x1, y_streams);
  out += time_axis(w, x0, x1, y_end);
  out += legend(y_end + 52);
  return out + "</svg>\n";
}

}  // namespace tidal::profile
