//===- ScheduleSvg.cpp - Draw a simulated pipeline schedule -----*- C++ -*-===//

#include "passes/Pipeline/ScheduleSvg.h"

#include "llvm/Support/Format.h"

using namespace mlir;
using namespace mlir::loom;

/// Text safe inside an XML element or attribute.
static std::string escapeXml(StringRef text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

void mlir::loom::writeScheduleSvg(const PipelineModel &model,
                                  const Timeline &timeline, StringRef title,
                                  raw_ostream &os) {
  // Forward blues and backward greens, one shade per local chunk.
  static const char *const kForward[] = {"#4e79a7", "#86bcf0", "#2b4c6f",
                                         "#a0cbe8"};
  static const char *const kBackward[] = {"#59a14f", "#8cd17d", "#2f6b29",
                                          "#b6e3a8"};
  const double left = 80, top = 40, rowHeight = 32, gap = 6, width = 960;
  const double scale = timeline.makespan > 0 ? width / timeline.makespan : 0;
  int64_t p = timeline.stages.size();
  double height = top + p * (rowHeight + gap) + 30;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\""
     << llvm::format("%.0f", left + width + 20) << "\" height=\""
     << llvm::format("%.0f", height) << "\" font-family=\"sans-serif\">\n"
     << "  <title>" << escapeXml(title) << "</title>\n"
     << "  <text x=\"" << left << "\" y=\"24\" font-size=\"14\">"
     << escapeXml(title) << "</text>\n";
  for (int64_t s = 0; s < p; ++s) {
    double y = top + s * (rowHeight + gap);
    os << "  <text x=\"8\" y=\"" << llvm::format("%.1f", y + rowHeight * 0.65)
       << "\" font-size=\"12\">stage " << s << "</text>\n"
       << "  <rect class=\"idle\" x=\"" << left << "\" y=\""
       << llvm::format("%.1f", y) << "\" width=\"" << width
       << "\" height=\"" << rowHeight << "\" fill=\"#e6e6e6\"/>\n";
    for (const ActionTiming &t : timeline.stages[s].actions) {
      const PipelineAction &a = t.action;
      double x = left + t.start * scale, w = (t.end - t.start) * scale;
      const char *fill =
          (a.backward ? kBackward : kForward)[a.chunk % 4];
      os << "  <rect class=\"" << (a.backward ? "bwd" : "fwd") << "\" x=\""
         << llvm::format("%.2f", x) << "\" y=\"" << llvm::format("%.1f", y)
         << "\" width=\"" << llvm::format("%.2f", w) << "\" height=\""
         << rowHeight << "\" fill=\"" << fill
         << "\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>stage " << s
         << " " << a.str(model.virtualStages > 1) << "</title></rect>\n";
      if (w >= 10)
        os << "  <text x=\"" << llvm::format("%.2f", x + w / 2) << "\" y=\""
           << llvm::format("%.1f", y + rowHeight * 0.65)
           << "\" font-size=\"11\" text-anchor=\"middle\" fill=\"#ffffff\">"
           << a.microbatch << "</text>\n";
    }
  }
  double legend = top + p * (rowHeight + gap) + 16;
  os << "  <text x=\"" << left << "\" y=\"" << llvm::format("%.1f", legend)
     << "\" font-size=\"12\"><tspan fill=\"" << kForward[0]
     << "\">forward</tspan>  <tspan fill=\"" << kBackward[0]
     << "\">backward</tspan>  <tspan fill=\"#999999\">idle "
     << "(bubble)</tspan></text>\n"
     << "</svg>\n";
}
