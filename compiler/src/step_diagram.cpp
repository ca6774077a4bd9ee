#include "step_diagram.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string_view>

#include "describe.h"

namespace ccc {
namespace {

constexpr int kMaxLanes = 128;        // more ranks: every k-th is drawn
constexpr int kMaxColumns = 128;      // more steps: every k-th is drawn
constexpr int kMaxBoxesPerCell = 16;  // more ops in one cell: the last box says "+k"
constexpr int kLeft = 48;             // room for the lane labels
constexpr int kTop = 64;              // room for the title, the phase names and the step numbers
constexpr int kBoxPitch = 30;         // one op box and its gap
constexpr int kMinColumn = 36;
constexpr int kGridHeight = 576;      // what the lanes share once they are thinner than the maximum
constexpr int kMaxLaneHeight = 36;
constexpr int kReadableLane = 20;     // thinner lanes drop labels, arrows and waits
constexpr int kCompactGridWidth = 960;
constexpr int kLegendWidth = 760;   // the longest legend: with arrows and waits

std::string xml_escape(std::string_view s) {
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

// Chunks spread evenly around the colour wheel: at N = 8 every chunk has its own hue, and at
// large N a schedule's pattern (a ring's diagonals) shows as bands of similar colour. Light
// enough for black numbers on them.
std::string chunk_colour(int64_t chunk, int64_t nchunks) {
  nchunks = std::max<int64_t>(1, nchunks);
  const double h = 6.0 * static_cast<double>(chunk % nchunks) / static_cast<double>(nchunks);
  const double s = 0.65, l = 0.62;
  const double c = (1 - std::fabs(2 * l - 1)) * s;
  const double x = c * (1 - std::fabs(std::fmod(h, 2.0) - 1));
  double r = 0, g = 0, b = 0;
  switch (static_cast<int>(h)) {
    case 0: r = c, g = x; break;
    case 1: r = x, g = c; break;
    case 2: g = c, b = x; break;
    case 3: g = x, b = c; break;
    case 4: r = x, b = c; break;
    default: r = c, b = x; break;
  }
  const double m = l - c / 2;
  auto byte = [m](double v) { return static_cast<int>(std::lround((v + m) * 255)); };
  return fmt::format("#{:02x}{:02x}{:02x}", byte(r), byte(g), byte(b));
}

std::string chunk_label(ChunkRange c) {
  return c.count == 1 ? fmt::format("{}", c.begin) : fmt::format("{}..{}", c.begin, c.end() - 1);
}

// Whether `text` fits `width` pixels of 11px sans-serif.
bool fits(const std::string& text, int width) { return static_cast<int>(text.size()) * 7 <= width; }

// A buffer's initial in a box ("i3": input chunk 3).
char buffer_initial(Buffer b) { return b == Buffer::Input ? 'i' : b == Buffer::Scratch ? 's' : 'o'; }

// Which ranks and steps are drawn, and where.
struct Layout {
  std::vector<int> ranks, steps;       // the drawn ones, in order
  std::vector<int> lane_of, column_of; // rank -> lane, step -> column; -1 when not drawn
  int rank_stride = 1, step_stride = 1;
  int lane_h = kMaxLaneHeight;
  bool detailed = true;                // boxes per op with labels, arrows, waits
  std::vector<int> x;                  // x[i]: left edge of column i; x.back(): right edge

  int lane_y(size_t lane) const { return kTop + static_cast<int>(lane) * lane_h; }
  int centre(int rank) const { return lane_y(lane_of[rank]) + lane_h / 2; }
  int bottom() const { return lane_y(ranks.size()); }
};

// Every `stride`-th of 0 .. n-1, and the inverse map.
std::vector<int> sample(int n, int stride, std::vector<int>& index_of) {
  std::vector<int> drawn;
  index_of.assign(n, -1);
  for (int i = 0; i < n; i += stride) {
    index_of[i] = static_cast<int>(drawn.size());
    drawn.push_back(i);
  }
  return drawn;
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

int boxes_in(const std::vector<Op>& cell) {
  return std::min(static_cast<int>(cell.size()), kMaxBoxesPerCell);
}

Layout plan_layout(const StepProgram& p) {
  Layout L;
  L.rank_stride = ceil_div(p.nranks, kMaxLanes);
  L.step_stride = std::max(1, ceil_div(p.nsteps(), kMaxColumns));
  L.ranks = sample(p.nranks, L.rank_stride, L.lane_of);
  L.steps = sample(p.nsteps(), L.step_stride, L.column_of);
  const int lanes = static_cast<int>(L.ranks.size());
  L.lane_h = std::clamp(kGridHeight / std::max(1, lanes), 2, kMaxLaneHeight);
  L.detailed = L.rank_stride == 1 && L.step_stride == 1 && L.lane_h >= kReadableLane;
  const int columns = static_cast<int>(L.steps.size());
  const int cell_w = std::clamp(kCompactGridWidth / std::max(1, columns), 2, kMinColumn);
  L.x.push_back(kLeft);
  for (int k : L.steps) {
    int width = cell_w;
    if (L.detailed) {
      int boxes = 0;
      for (int r = 0; r < p.nranks; ++r) boxes = std::max(boxes, boxes_in(p.ops[r][k]));
      width = std::max(kMinColumn, 6 + boxes * kBoxPitch);
    }
    L.x.push_back(L.x.back() + width);
  }
  return L;
}

class Writer {
 public:
  Writer(const StepProgram& p, const SyncPlan* syncs) : p_(p), syncs_(syncs), L_(plan_layout(p)) {
    // A phase whose name does not fit over its columns is named by a key ("P2"), which the
    // legend spells out: a name is never cut.
    for (size_t col = 0; col < L_.steps.size();) {
      const int phase = p_.steps[L_.steps[col]].phase;
      size_t end = col;
      while (end < L_.steps.size() && p_.steps[L_.steps[end]].phase == phase) ++end;
      const std::string& name = p_.phases[phase].name;
      std::string label = name;
      if (!fits(name, L_.x[end] - L_.x[col] - 4)) {
        label = fmt::format("P{}", phase + 1);
        keys_.push_back(label + ": " + name);
      }
      runs_.push_back({col, end, phase, label});
      col = end;
    }
  }

  std::string svg() {
    const int width = std::max(L_.x.back() + 24, kLeft + kLegendWidth);
    const int height = L_.bottom() + 48 + (L_.detailed ? 18 : 0) + (keys_.empty() ? 0 : 18);
    put(R"(<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}">
<title>{2}</title>
<defs>
<marker id="head" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L8,4L0,8z" fill="#333"/></marker>
<marker id="wait" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0L8,4L0,8z" fill="#c0392b"/></marker>
<style>
text{{font-family:sans-serif;font-size:11px;fill:#222}}
.n{{font-size:9px;text-anchor:middle}}
.s{{font-size:9px;text-anchor:middle;fill:#666}}
.f{{font-size:8px;text-anchor:middle;fill:#444}}
.l{{text-anchor:end}}
.c{{fill-opacity:.3;stroke-width:2}}
.p{{fill-opacity:.3}}
.a{{stroke:#333;stroke-width:1.2;stroke-opacity:.7;marker-end:url(#head)}}
.w{{stroke:#c0392b;stroke-width:1.2;stroke-dasharray:4 3;marker-end:url(#wait)}}
.ph{{stroke:#888}}
.b{{fill:#f2f2f2}}
.st{{fill:#fdf2d0}}
</style>
</defs>
<rect width="100%" height="100%" fill="#fff"/>
)",
        width, height, xml_escape(title()));
    header();
    lanes();
    ops();
    if (L_.detailed && syncs_) waits();
    legend();
    put("</svg>\n");
    return std::move(out_);
  }

 private:
  template <typename... Args>
  void put(fmt::format_string<Args...> f, Args&&... args) {
    fmt::format_to(std::back_inserter(out_), f, std::forward<Args>(args)...);
  }

  std::string title() const {
    std::string t = fmt::format("{} ({}), N = {}{}", p_.schedule, collective_name(p_.collective), p_.nranks,
                                params_text(p_.params));
    if (p_.root >= 0) t += fmt::format(", root {}", p_.root);
    auto count = [](int64_t n, const char* what) { return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s"); };
    return t + fmt::format(": {}, {}", count(p_.nsteps(), "step"), count(p_.nchunks, "chunk"));
  }

  // The title line, then each phase's name over its columns, then the step numbers.
  void header() {
    std::string sampled;
    if (L_.rank_stride > 1) sampled += fmt::format("1 rank in {}", L_.rank_stride);
    if (L_.step_stride > 1) sampled += fmt::format("{}1 step in {}", sampled.empty() ? "" : ", ", L_.step_stride);
    put("<text x=\"8\" y=\"16\" font-weight=\"bold\">{}</text>\n", xml_escape(title()));
    if (!sampled.empty()) put("<text x=\"8\" y=\"30\" fill=\"#666\">(showing {})</text>\n", sampled);
    for (const PhaseRun& run : runs_)
      put("<g><title>phase {0}</title><line class=\"ph\" x1=\"{1}\" y1=\"44\" x2=\"{2}\" y2=\"44\"/>"
          "<text x=\"{1}\" y=\"40\">{3}</text></g>\n",
          xml_escape(p_.phases[run.phase].name), L_.x[run.begin] + 2, L_.x[run.end] - 2, xml_escape(run.label));
    if (!L_.detailed) return;
    for (size_t col = 0; col < L_.steps.size(); ++col)
      put("<text class=\"s\" x=\"{}\" y=\"58\"><title>{}</title>{}</text>\n", (L_.x[col] + L_.x[col + 1]) / 2,
          xml_escape(describe_step(p_, L_.steps[col])), step_number(L_.steps[col]));
  }

  // Lane labels, and a shaded band for every other lane so a row can be followed across.
  void lanes() {
    const int label_every = ceil_div(12, L_.lane_h);
    for (size_t lane = 0; lane < L_.ranks.size(); ++lane) {
      const int y = L_.lane_y(lane);
      if (lane % 2 == 1)
        put("<rect class=\"b\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", kLeft, y, L_.x.back() - kLeft,
            L_.lane_h);
      if (lane % label_every == 0)
        put("<text class=\"l\" x=\"{}\" y=\"{}\">r{}</text>\n", kLeft - 6, L_.centre(L_.ranks[lane]) + 4,
            L_.ranks[lane]);
    }
    // The steps the sync planner inserted, apart from the schedule's own: a tinted column.
    for (size_t col = 0; col < L_.steps.size(); ++col)
      if (p_.steps[L_.steps[col]].staged)
        put("<rect class=\"st\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}: inserted by the sync "
            "planner, staging writes through scratch</title></rect>\n",
            L_.x[col], kTop, L_.x[col + 1] - L_.x[col], L_.bottom() - kTop, xml_escape(describe_step(p_, L_.steps[col])));
  }

  void ops() {
    for (int r : L_.ranks)
      for (size_t col = 0; col < L_.steps.size(); ++col) {
        const std::vector<Op>& cell = p_.ops[r][L_.steps[col]];
        if (cell.empty()) continue;
        if (L_.detailed)
          detailed_cell(r, col, cell);
        else
          compact_cell(r, col, cell.front());
      }
  }

  // One plain cell, coloured by the chunk the first op reads (the data that moves, wherever a
  // remap puts it): solid for reduce, pale for copy.
  void compact_cell(int r, size_t col, const Op& op) {
    const int w = L_.x[col + 1] - L_.x[col], h = L_.lane_h;
    put("<rect{} x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n",
        op.kind == OpKind::Reduce ? "" : " class=\"p\"", L_.x[col], L_.lane_y(L_.lane_of[r]), w > 3 ? w - 1 : w,
        h > 3 ? h - 1 : h, chunk_colour(op.read_chunks().begin, p_.nchunks));
  }

  // One box per op with its chunk number, and where it reads a peer, an arrow from that peer's
  // lane. Several ops in one cell (a fan-in, e.g. one-shot's N - 1 reduces) would draw a fan of
  // crossing arrows, so their boxes name the peer instead (a left arrow and its number). A box is a
  // group whose title says the whole op (a browser shows it on hover).
  void detailed_cell(int r, size_t col, const std::vector<Op>& cell) {
    const int y = L_.lane_y(L_.lane_of[r]) + 5, h = L_.lane_h - 10, w = kBoxPitch - 4;
    const int shown = boxes_in(cell) - (static_cast<int>(cell.size()) > kMaxBoxesPerCell ? 1 : 0);
    for (int i = 0; i < shown; ++i) {
      const Op& op = cell[i];
      const int x = L_.x[col] + 5 + i * kBoxPitch;
      const std::string colour = chunk_colour(op.read_chunks().begin, p_.nchunks);
      const std::string line = describe_line(p_, op.loc);
      put("<g><title>r{} {}: {}{}</title>", r, xml_escape(describe_step(p_, L_.steps[col])),
          xml_escape(describe_op(op, r)), line.empty() ? "" : " (" + xml_escape(line) + ")");
      if (op.kind == OpKind::Reduce)
        put("<rect class=\"r\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>", x, y, w, h, colour);
      else
        put("<rect class=\"c\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"{}\"/>", x + 1, y + 1,
            w - 2, h - 2, colour, colour);
      // The chunk written (its buffer's initial unless the output), and below it, where they
      // differ from that, the peer (a fan-in) and the buffer and chunk read.
      const bool fan_in = cell.size() > 1 && op.peer != r;
      const bool read_elsewhere = op.src != Buffer::Output || op.shift != 0;
      const bool second = (fan_in || read_elsewhere) && h >= 20;
      put("<text class=\"n\" x=\"{}\" y=\"{}\">{}{}</text>", x + w / 2, y + h / 2 + (second ? -2 : 3),
          op.dst == Buffer::Output ? "" : std::string(1, buffer_initial(op.dst)), chunk_label(op.chunks));
      if (second)
        put("<text class=\"f\" x=\"{}\" y=\"{}\">{}{}</text>", x + w / 2, y + h / 2 + 8,
            fan_in ? fmt::format("\u2190{}", op.peer) : "",
            read_elsewhere ? fmt::format("{}{}{}", fan_in ? " " : "", buffer_initial(op.src), chunk_label(op.read_chunks()))
                           : "");
      put("</g>\n");
      if (cell.size() == 1 && op.peer != r) arrow(L_.x[col] + 2, op.peer, x + w / 2, r, y, h);
    }
    if (shown < static_cast<int>(cell.size()))
      put("<text class=\"n\" x=\"{}\" y=\"{}\"><title>{} more ops</title>+{}</text>\n",
          L_.x[col] + 5 + shown * kBoxPitch + w / 2, y + h / 2 + 3, cell.size() - shown, cell.size() - shown);
  }

  // From the peer's lane at the column's left edge to the nearer edge of the box.
  void arrow(int x0, int peer, int x1, int r, int box_y, int box_h) {
    const int y1 = L_.lane_of[peer] < L_.lane_of[r] ? box_y - 1 : box_y + box_h + 1;
    put("<line class=\"a\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>\n", x0, L_.centre(peer), x1, y1);
  }

  // Rank r waits, before step k, until the peer has finished step w.step: from the end of that
  // step in the peer's lane to the start of step k in r's (entry waits start at the grid's left
  // edge, exit waits end past its right edge).
  void waits() {
    const int S = p_.nsteps();
    for (int r : L_.ranks)
      for (int k = 0; k <= S; ++k)
        for (const Wait& w : syncs_->waits[r][k]) {
          const int x0 = w.step < 0 ? L_.x.front() : L_.x[L_.column_of[w.step] + 1];
          const int x1 = k < S ? L_.x[L_.column_of[k]] : L_.x.back() + 12;
          put("<line class=\"w\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"><title>r{} {}: {}</title></line>\n", x0,
              L_.centre(w.peer), x1, L_.centre(r), r, xml_escape(k < S ? "before " + describe_step(p_, k) : "before exit"),
              xml_escape(wait_why(w, p_.steps, p_.file)));
        }
  }

  void legend() {
    const int y = L_.bottom() + 20;
    int x = kLeft;
    auto item = [&](int swatch_width, const std::string& text) {
      put("<text x=\"{}\" y=\"{}\">{}</text>\n", x + swatch_width + 6, y + 10, text);
      x += swatch_width + 12 + static_cast<int>(text.size()) * 6;
    };
    const std::string colour = chunk_colour(0, 1);
    put("<rect class=\"r\" x=\"{}\" y=\"{}\" width=\"16\" height=\"12\" fill=\"{}\"/>\n", x, y, colour);
    item(16, "reduce");
    put("<rect class=\"c\" x=\"{}\" y=\"{}\" width=\"16\" height=\"12\" fill=\"{}\" stroke=\"{}\"/>\n", x, y, colour,
        colour);
    item(16, "copy");
    if (!L_.detailed) {
      item(0, "colour: the chunk of the cell's first op; empty: idle");
      if (syncs_) item(0, "(waits are not drawn at this size)");
      phase_keys(y + 18);
      return;
    }
    put("<line class=\"a\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>\n", x, y + 6, x + 24, y + 6);
    item(24, "reads from that rank");
    if (syncs_) {
      put("<line class=\"w\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>\n", x, y + 6, x + 24, y + 6);
      item(24, "waits for that rank's step");
    }
    if (std::any_of(p_.steps.begin(), p_.steps.end(), [](const StepInfo& s) { return s.staged; })) {
      put("<rect class=\"st\" x=\"{}\" y=\"{}\" width=\"16\" height=\"12\"/>\n", x, y);
      item(16, "staging the sync planner inserted");
    }
    put("<text x=\"{}\" y=\"{}\">number: the chunk written (s3: scratch chunk 3); under it, where they differ, the "
        "peer (\u2190p) and the chunk read (i3: input chunk 3); empty: idle</text>\n", kLeft, y + 28);
    phase_keys(y + 36);
  }

  // A step's number as `--emit steps` shows it (a staged step: the number of the step it stages).
  int step_number(int k) const { return p_.steps[k].number >= 0 ? p_.steps[k].number : k; }

  // The phases named by a key in the header, spelled out.
  void phase_keys(int y) {
    if (keys_.empty()) return;
    std::string text = "phases: ";
    for (size_t i = 0; i < keys_.size(); ++i) text += (i ? "; " : "") + keys_[i];
    put("<text x=\"{}\" y=\"{}\">{}</text>\n", kLeft, y + 10, xml_escape(text));
  }

  // A phase's run of columns and what its header says (the name, or a key).
  struct PhaseRun {
    size_t begin, end;
    int phase;
    std::string label;
  };

  const StepProgram& p_;
  const SyncPlan* syncs_;
  const Layout L_;
  std::vector<PhaseRun> runs_;
  std::vector<std::string> keys_;  // "P2: reduce_scatter d=1", for the legend
  std::string out_;
};

}  // namespace

std::string step_diagram_svg(const StepProgram& p, const SyncPlan* syncs) { return Writer(p, syncs).svg(); }

}  // namespace ccc
