#include "svg.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

namespace koila_cli {
namespace {

constexpr double kWidth = 1200, kLeft = 100, kRight = 30, kPanelHeight = 300, kTop = 70;

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// The top of the byte axis: 4 ticks of a round step (1 to 200 KiB or MiB, 256 or 512 MiB,
// 1 to 500 GiB) that reach `bytes`.
uint64_t axis_top(uint64_t bytes) {
  constexpr uint64_t KiB = 1 << 10, MiB = 1 << 20, GiB = uint64_t{1} << 30;
  std::vector<uint64_t> steps;
  for (uint64_t unit : {KiB, MiB})
    for (uint64_t m : {1, 2, 5, 10, 20, 50, 100, 200}) steps.push_back(m * unit);
  steps.push_back(256 * MiB);
  steps.push_back(512 * MiB);
  for (uint64_t m : {1, 2, 5, 10, 20, 50, 100, 200, 500}) steps.push_back(m * GiB);
  for (uint64_t step : steps)
    if (4 * step >= bytes) return 4 * step;
  return (bytes + 3) / 4 * 4;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string text(double x, double y, const std::string& s, const char* extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" " + extra + ">" + escaped(s) + "</text>\n";
}

std::string hline(double x0, double x1, double y, const char* style) {
  return "<line x1=\"" + num(x0) + "\" y1=\"" + num(y) + "\" x2=\"" + num(x1) + "\" y2=\"" + num(y) + "\" " + style +
         "/>\n";
}

// One panel: the timeline `t` in the box whose top is at `top`, bytes up to `scale`.
std::string panel(const TimelineData& t, const std::string& title, double top, uint64_t scale, uint64_t budget,
                  uint64_t estimate) {
  std::ostringstream o;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kPanelHeight - 70;
  const double y0 = top + 30, bottom = y0 + plot_h;
  auto y_of = [&](uint64_t bytes) { return bottom - plot_h * static_cast<double>(bytes) / static_cast<double>(scale); };
  const size_t n = t.events.size();
  auto x_of = [&](size_t i) { return kLeft + plot_w * (static_cast<double>(i) + 0.5) / static_cast<double>(n); };
  o << text(kLeft, top + 18, title, "class=\"title\"");
  o << "<rect x=\"" << num(kLeft) << "\" y=\"" << num(y0) << "\" width=\"" << num(plot_w) << "\" height=\""
    << num(plot_h) << "\" class=\"plot\"/>\n";
  // Backward stretches shaded, chunk starts marked.
  for (size_t i = 0; i < n;) {
    if (!t.events[i].backward) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < n && t.events[j].backward) ++j;
    const double xa = kLeft + plot_w * static_cast<double>(i) / static_cast<double>(n);
    const double xb = kLeft + plot_w * static_cast<double>(j) / static_cast<double>(n);
    o << "<rect x=\"" << num(xa) << "\" y=\"" << num(y0) << "\" width=\"" << num(xb - xa) << "\" height=\""
      << num(plot_h) << "\" class=\"backward\"/>\n";
    i = j;
  }
  for (size_t i = 1; i < n; ++i)
    if (t.events[i].chunk != t.events[i - 1].chunk) {
      const double x = kLeft + plot_w * static_cast<double>(i) / static_cast<double>(n);
      o << "<line x1=\"" << num(x) << "\" y1=\"" << num(y0) << "\" x2=\"" << num(x) << "\" y2=\"" << num(bottom)
        << "\" class=\"chunk\"/>\n";
      o << text(x + 4, y0 + 14, "chunk " + std::to_string(t.events[i].chunk + 1), "class=\"small\"");
    }
  // Axis ticks.
  for (int k = 0; k <= 4; ++k) {
    const uint64_t b = scale / 4 * static_cast<uint64_t>(k);  // scale is a multiple of 4 round steps
    const double y = y_of(b);
    o << hline(kLeft - 5, kLeft + plot_w, y, "class=\"grid\"");
    o << text(kLeft - 8, y + 4, human_bytes(b), "class=\"tick\" text-anchor=\"end\"");
  }
  // The curves: the most held during each op (temporaries included), and what is held after it.
  std::string peak_points, live_points;
  for (size_t i = 0; i < n; ++i) {
    const double xa = kLeft + plot_w * static_cast<double>(i) / static_cast<double>(n);
    const double xb = kLeft + plot_w * static_cast<double>(i + 1) / static_cast<double>(n);
    peak_points +=
        num(xa) + "," + num(y_of(t.events[i].peak)) + " " + num(xb) + "," + num(y_of(t.events[i].peak)) + " ";
    live_points +=
        num(xa) + "," + num(y_of(t.events[i].live)) + " " + num(xb) + "," + num(y_of(t.events[i].live)) + " ";
  }
  o << "<polyline points=\"" << peak_points << "\" class=\"peak\"/>\n";
  o << "<polyline points=\"" << live_points << "\" class=\"live\"/>\n";
  // In use before the run, the estimate, the budget.
  const uint64_t base = t.parts[KOILA_PART_IN_USE];
  o << hline(kLeft, kLeft + plot_w, y_of(base), "class=\"base\"");
  o << text(kLeft + plot_w - 4, y_of(base) - 4, "in use before the run " + human_bytes(base),
            "class=\"small\" text-anchor=\"end\"");
  o << hline(kLeft, kLeft + plot_w, y_of(estimate), "class=\"estimate\"");
  // Below its line when the budget's line is too close above it for a label between them.
  const bool crowded = budget <= scale && budget >= estimate && y_of(estimate) - y_of(budget) < 18;
  o << text(kLeft + 6, crowded ? y_of(estimate) + 15 : y_of(estimate) - 5,
            "estimated peak " + human_bytes(estimate) + " (simulated " + human_bytes(t.events[t.peak_index].peak) +
                " + backend workspaces " + human_bytes(t.parts[KOILA_PART_BEYOND_SIMULATION]) + ")",
            "class=\"label estimate-label\"");
  if (budget <= scale) {
    o << hline(kLeft, kLeft + plot_w, y_of(budget), "class=\"budget\"");
    o << text(kLeft + plot_w - 4, y_of(budget) - 5, "budget " + human_bytes(budget),
              "class=\"label budget-label\" text-anchor=\"end\"");
  } else {
    o << text(kLeft + plot_w - 4, y0 + 14, "budget " + human_bytes(budget) + " (above the chart)",
              "class=\"label budget-label\" text-anchor=\"end\"");
  }
  // The peak, named.
  const TimelineEvent& p = t.events[t.peak_index];
  const double px = x_of(t.peak_index), py = y_of(p.peak);
  o << "<circle cx=\"" << num(px) << "\" cy=\"" << num(py) << "\" r=\"5\" class=\"peak-dot\"/>\n";
  // Named under the plot, where no curve runs, beside a dot like the one on the curve.
  std::string label = "peak at " + p.op + " (" + (p.backward ? "backward" : "forward");
  const bool chunked =
      std::any_of(t.events.begin(), t.events.end(), [](const TimelineEvent& e) { return e.chunk > 0; });
  if (!t.unsplit && chunked) label += ", chunk " + std::to_string(p.chunk + 1);
  label += "): " + human_bytes(p.peak) + " simulated";
  o << "<circle cx=\"" << num(kLeft + 5) << "\" cy=\"" << num(bottom + 18) << "\" r=\"5\" class=\"peak-dot\"/>\n";
  o << text(kLeft + 15, bottom + 23, label, "class=\"label peak-label\"");
  o << text(kLeft + plot_w, bottom + 23, "operators in execution order (" + std::to_string(n) + "); shaded: backward",
            "class=\"tick\" text-anchor=\"end\"");
  return o.str();
}

}  // namespace

std::string timeline_svg(const PlanReport& r, const Session& session) {
  std::vector<std::pair<const TimelineData*, std::string>> panels;
  const std::string mode = session.options().mode == KOILA_MODE_TRAINING ? "forward and backward" : "forward";
  // The run that will happen first: in chunks or recomputing, the planned timeline (with the ops
  // run again in the backward); then the batch at once without recomputation, for comparison.
  const bool recomputing = r.recomputed > 0;
  if ((r.chunks > 1 || recomputing) && r.planned.available)
    panels.push_back({&r.planned, r.chunks > 1 ? "Planned: " + std::to_string(r.chunks) + " chunks of " +
                                                     std::to_string(r.chunk) + (recomputing ? ", recomputing" : "") +
                                                     " (" + mode + " of the first two chunks, as simulated)"
                                               : "Planned: the batch of " + std::to_string(r.batch) +
                                                     " at once, recomputing (" + mode + ", as simulated; fits)"});
  if (r.unsplit.available)
    panels.push_back({&r.unsplit, std::string("Unsplit") + (recomputing ? " without recomputation" : "") +
                                      ": the batch of " + std::to_string(r.batch) + " at once (" + mode +
                                      (r.chunks > 1 || recomputing ? "; does not fit" : "; fits, as planned") + ")"});
  if (panels.empty()) throw CliError("--svg: no timeline for this plan: " + r.planned.why_not);
  uint64_t top_bytes = 0;
  for (const auto& [t, title] : panels)
    top_bytes = std::max(top_bytes, std::max(t->total(), t->events[t->peak_index].peak));
  // The budget is drawn when it is within reach of the curves (else named at the top).
  if (r.budget <= top_bytes * 3) top_bytes = std::max(top_bytes, r.budget);
  const uint64_t scale = axis_top(top_bytes + top_bytes / 20 + 1);
  const double height = kTop + kPanelHeight * static_cast<double>(panels.size()) + 40;
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(kWidth) << "\" height=\"" << num(height)
    << "\" viewBox=\"0 0 " << num(kWidth) << " " << num(height) << "\">\n"
    << "<style>\n"
       "text { font-family: 'DejaVu Sans', Arial, sans-serif; fill: #222; }\n"
       ".heading { font-size: 20px; font-weight: bold; }\n"
       ".title { font-size: 15px; font-weight: bold; }\n"
       ".label { font-size: 13px; }\n"
       ".label, .small { paint-order: stroke; stroke: #ffffff; stroke-width: 3px; stroke-linejoin: round; }\n"
       ".tick, .small { font-size: 12px; fill: #444; }\n"
       ".plot { fill: #ffffff; stroke: #999; }\n"
       ".grid { stroke: #e4e4e4; }\n"
       ".backward { fill: #fff1df; }\n"
       ".chunk { stroke: #888; stroke-dasharray: 3 3; }\n"
       ".peak { fill: none; stroke: #9cc3e6; stroke-width: 1.5; }\n"
       ".live { fill: none; stroke: #1f5fa8; stroke-width: 2; }\n"
       ".base { stroke: #777; stroke-dasharray: 2 3; }\n"
       ".estimate { stroke: #7b3fa0; stroke-width: 1.5; stroke-dasharray: 8 4; }\n"
       ".estimate-label { fill: #7b3fa0; }\n"
       ".budget { stroke: #d62728; stroke-width: 2; }\n"
       ".budget-label { fill: #d62728; font-weight: bold; }\n"
       ".peak-dot { fill: #d62728; stroke: #fff; stroke-width: 1.5; }\n"
       ".peak-label { font-weight: bold; }\n"
       "</style>\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"#fafafa\"/>\n";
  const Options& opt = session.options();
  o << text(kLeft, 30, "koila plan: " + opt.model + ", batch " + std::to_string(r.batch) + " on " + opt.device,
            "class=\"heading\"");
  o << text(kLeft, 52,
            "bytes on the device op by op: dark line after each op, light line the most during it (temporaries)",
            "class=\"small\"");
  double top = kTop;
  for (const auto& [t, title] : panels) {
    o << panel(*t, title, top, scale, r.budget, t->total());
    top += kPanelHeight;
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace koila_cli
