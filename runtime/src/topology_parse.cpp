// The topology text format reader (docs/topology.md). One directive per line:
//   name NAME | gpus COUNT KEY=VALUE... | gpu INDEX KEY=VALUE... | link A B KEY=VALUE... |
//   switch NAME KEY=VALUE...
// and, with the same words and units, calibration files (topology.h):
//   calibration device=TEXT | gpus KEY=VALUE... | fabric KEY=VALUE...
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "topology.h"

namespace ccc {
namespace {

constexpr int kMaxGpus = 4096;                 // the front end's rank limit
constexpr int kMaxNodes = 4096;                // nodes of a network, as GPUs of a node
constexpr size_t kMaxFileBytes = size_t{1} << 20;  // as for schedules: keeps parsing fast

struct Token {
  std::string text;
  int col = 0;
};

// Splits a line into words; "double quoted" text is part of one word (quotes removed).
bool split_words(std::string_view line, int lineno, std::vector<Token>& out, Diagnostics& diags) {
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') { ++i; continue; }
    if (line[i] == '#') break;
    Token t{"", static_cast<int>(i) + 1};
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') {
      if (line[i] == '"') {
        size_t close = line.find('"', i + 1);
        if (close == std::string_view::npos) {
          diags.error({lineno, static_cast<int>(i) + 1}, "unterminated string");
          return false;
        }
        t.text.append(line.substr(i + 1, close - i - 1));
        i = close + 1;
      } else {
        t.text += line[i++];
      }
    }
    out.push_back(std::move(t));
  }
  return true;
}

struct Unit {
  std::string_view suffix;
  double scale;
};
const Unit kBandwidthUnits[] = {{"TB/s", 1e12}, {"GB/s", 1e9}, {"MB/s", 1e6}, {"GiB/s", 1073741824.0}, {"MiB/s", 1048576.0}};
const Unit kLatencyUnits[] = {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1.0}};

class Parser {
 public:
  Parser(const SourceFile& file, Diagnostics& diags) : file_(file), diags_(diags) {}

  std::optional<Topology> run() {
    if (!read_lines()) return std::nullopt;
    finish();
    if (diags_.error_count() > errors_before_) return std::nullopt;
    return topo_;
  }

  std::optional<Calibration> run_calibration() {
    calibration_ = true;
    if (!read_lines() || diags_.error_count() > errors_before_) return std::nullopt;
    return cal_;
  }

 private:
  // Every line's directive; false if the file is too large to read.
  bool read_lines() {
    errors_before_ = diags_.error_count();
    if (file_.text.size() > kMaxFileBytes) {
      diags_.error({}, fmt::format("the file is larger than {} bytes (1 MiB), the limit for a {}", kMaxFileBytes,
                                   calibration_ ? "calibration" : "topology"));
      return false;
    }
    int lineno = 0;
    size_t pos = 0;
    while (pos <= file_.text.size()) {
      size_t end = file_.text.find('\n', pos);
      if (end == std::string::npos) end = file_.text.size();
      line_ = ++lineno;
      std::vector<Token> words;
      if (split_words(std::string_view(file_.text).substr(pos, end - pos), line_, words, diags_) && !words.empty()) {
        if (calibration_)
          calibration_directive(words);
        else
          directive(words);
      }
      pos = end + 1;
    }
    return true;
  }

  // A calibration line: each directive once, each value checked as in a topology.
  void calibration_directive(const std::vector<Token>& w) {
    const std::string& d = w[0].text;
    if (!seen_.insert(d).second && (d == "calibration" || d == "gpus" || d == "fabric"))
      return error(w[0].col, fmt::format("'{}' given twice", d));
    std::map<std::string, Token> kv;
    auto bandwidth = [&](const char* key, std::optional<double>& field) {
      if (auto it = kv.find(key); it != kv.end()) field = quantity(it->second, kBandwidthUnits, false, key);
    };
    auto latency = [&](const char* key, std::optional<double>& field) {
      if (auto it = kv.find(key); it != kv.end()) field = quantity(it->second, kLatencyUnits, false, key);
    };
    if (d == "calibration") {
      if (!keys(w, 1, {"device"}, kv)) return;
      if (auto it = kv.find("device"); it != kv.end()) cal_.device = it->second.text;
    } else if (d == "gpus") {
      if (!keys(w, 1, {"launch", "graph_launch", "memory", "reduce", "channel"}, kv)) return;
      latency("launch", cal_.launch);
      latency("graph_launch", cal_.graph_launch);
      bandwidth("memory", cal_.memory_bandwidth);
      bandwidth("reduce", cal_.reduce_bandwidth);
      bandwidth("channel", cal_.channel_bandwidth);
    } else if (d == "fabric") {
      if (!keys(w, 1, {"latency", "bandwidth"}, kv)) return;
      latency("latency", cal_.latency);
      bandwidth("bandwidth", cal_.bandwidth);
    } else {
      error(w[0].col, fmt::format("unknown directive '{}' in a calibration file (expected calibration, gpus or fabric)", d));
    }
  }

  // Messages quote the user's text; binary garbage in it is shown as '?'.
  void error(int col, std::string message) {
    for (char& c : message)
      if (c < 0x20 || c > 0x7e) c = '?';
    diags_.error({line_, col}, std::move(message));
  }

  void directive(const std::vector<Token>& w) {
    const std::string& d = w[0].text;
    if (d == "name") {
      if (w.size() != 2) return error(w[0].col, "expected 'name NAME'");
      topo_.name = w[1].text;
    } else if (d == "gpus") {
      gpus_directive(w);
    } else if (d == "gpu") {
      gpu_directive(w);
    } else if (d == "link") {
      link_directive(w);
    } else if (d == "switch") {
      switch_directive(w);
    } else if (d == "nodes") {
      nodes_directive(w);
    } else {
      error(w[0].col, fmt::format("unknown directive '{}' (expected name, gpus, gpu, link, switch or nodes)", d));
    }
  }

  // KEY=VALUE words from w[first] on; unknown, duplicate and malformed keys are errors.
  bool keys(const std::vector<Token>& w, size_t first, const std::set<std::string>& allowed,
            std::map<std::string, Token>& out) {
    bool ok = true;
    for (size_t i = first; i < w.size(); ++i) {
      size_t eq = w[i].text.find('=');
      if (eq == std::string::npos || eq == 0) {
        error(w[i].col, fmt::format("expected KEY=VALUE, got '{}'", w[i].text));
        ok = false;
        continue;
      }
      std::string key = w[i].text.substr(0, eq);
      if (!allowed.count(key)) {
        std::string list;
        for (const auto& k : allowed) list += (list.empty() ? "" : ", ") + k;
        error(w[i].col, fmt::format("unknown key '{}' for '{}' (expected {})", key, w[0].text, list));
        ok = false;
      } else if (out.count(key)) {
        error(w[i].col, fmt::format("duplicate key '{}'", key));
        ok = false;
      } else {
        out[key] = Token{w[i].text.substr(eq + 1), w[i].col + static_cast<int>(eq) + 1};
      }
    }
    return ok;
  }

  bool require(const std::vector<Token>& w, const std::map<std::string, Token>& kv,
               std::initializer_list<const char*> needed) {
    for (const char* k : needed)
      if (!kv.count(k)) {
        error(w[0].col, fmt::format("'{}' needs {}=", w[0].text, k));
        return false;
      }
    return true;
  }

  std::optional<long> integer(const Token& t, long lo, long hi, const char* what) {
    long v = 0;
    auto [p, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec != std::errc() || p != t.text.data() + t.text.size() || v < lo || v > hi) {
      error(t.col, fmt::format("{} must be an integer in {}..{}, got '{}'", what, lo, hi, t.text));
      return std::nullopt;
    }
    return v;
  }

  template <size_t K>
  std::optional<double> quantity(const Token& t, const Unit (&units)[K], bool zero_ok, const char* what) {
    double v = 0;
    const char* end = t.text.data() + t.text.size();
    auto [p, ec] = std::from_chars(t.text.data(), end, v);
    std::string_view unit(p, static_cast<size_t>(end - p));
    if (ec != std::errc() || !std::isfinite(v) || v < 0 || (!zero_ok && v == 0)) {
      error(t.col, fmt::format("{} must be a {} number with a unit, got '{}'", what, zero_ok ? "non-negative" : "positive", t.text));
      return std::nullopt;
    }
    for (const Unit& u : units) {
      if (unit != u.suffix) continue;
      // The scaled value is what the cost model divides by and adds: one that overflows to inf or
      // underflows to 0 would make every estimate inf or 0 (or NaN) without a word.
      const double scaled = v * u.scale;
      if (!std::isfinite(scaled) || (v != 0 && scaled == 0)) {
        error(t.col, fmt::format("{} '{}' is out of range: it is {} in {}", what, t.text,
                                 std::isfinite(scaled) ? "0" : "infinite", u.scale > 1 ? "bytes/s" : "seconds"));
        return std::nullopt;
      }
      return scaled;
    }
    std::string list;
    for (const Unit& u : units) list += (list.empty() ? "" : ", ") + std::string(u.suffix);
    error(t.col + static_cast<int>(p - t.text.data()),
          fmt::format("{} '{}' needs a unit ({})", what, t.text, list));
    return std::nullopt;
  }

  std::optional<LinkSpec> link_spec(const std::map<std::string, Token>& kv) {
    auto bw = quantity(kv.at("bandwidth"), kBandwidthUnits, false, "bandwidth");
    auto lat = quantity(kv.at("latency"), kLatencyUnits, true, "latency");
    if (!bw || !lat) return std::nullopt;
    return LinkSpec{*bw, *lat};
  }

  std::optional<FabricKind> fabric(const Token& t, std::initializer_list<FabricKind> allowed) {
    std::string list;
    for (FabricKind k : allowed) {
      if (t.text == fabric_kind_name(k)) return k;
      list += (list.empty() ? "" : ", ") + std::string(fabric_kind_name(k));
    }
    error(t.col, fmt::format("kind must be one of {}, got '{}'", list, t.text));
    return std::nullopt;
  }

  std::optional<int> gpu_index(const Token& t) {
    if (!gpus_line_) {
      error(t.col, "GPU indices need a 'gpus COUNT' line first");
      return std::nullopt;
    }
    auto v = integer(t, 0, topo_.ngpus() - 1, "a GPU index");
    if (!v) return std::nullopt;
    return static_cast<int>(*v);
  }

  // Fills the GPU properties named in kv into g.
  void gpu_keys(const std::map<std::string, Token>& kv, Gpu& g) {
    if (auto it = kv.find("model"); it != kv.end()) g.model = it->second.text;
    if (auto it = kv.find("arch"); it != kv.end()) {
      const Token& t = it->second;
      if (t.text.rfind("sm_", 0) != 0)
        error(t.col, fmt::format("arch must look like sm_90, got '{}'", t.text));
      else if (auto v = integer(Token{t.text.substr(3), t.col + 3}, 10, 999, "the arch number"))
        g.arch = static_cast<int>(*v);
    }
    auto bw = [&](const char* key, double& field) {
      if (auto it = kv.find(key); it != kv.end())
        if (auto v = quantity(it->second, kBandwidthUnits, false, key)) field = *v;
    };
    bw("memory", g.memory_bandwidth);
    bw("reduce", g.reduce_bandwidth);
    bw("channel", g.channel_bandwidth);
    if (auto it = kv.find("channels"); it != kv.end())
      if (auto v = integer(it->second, 1, 1024, "channels")) g.max_channels = static_cast<int>(*v);
    if (auto it = kv.find("launch"); it != kv.end())
      if (auto v = quantity(it->second, kLatencyUnits, true, "launch")) g.launch = *v;
    if (auto it = kv.find("graph_launch"); it != kv.end())
      if (auto v = quantity(it->second, kLatencyUnits, true, "graph_launch")) g.graph_launch = *v;
  }

  const std::set<std::string> kGpuKeys{"model", "arch", "memory", "reduce", "channel", "channels", "launch",
                                       "graph_launch"};

  void gpus_directive(const std::vector<Token>& w) {
    if (gpus_line_) return error(w[0].col, fmt::format("'gpus' given twice (first on line {})", gpus_line_));
    if (w.size() < 2) return error(w[0].col, "expected 'gpus COUNT KEY=VALUE...'");
    auto n = integer(w[1], 1, kMaxGpus, "the GPU count");
    if (!n) return;
    std::map<std::string, Token> kv;
    keys(w, 2, kGpuKeys, kv);
    Gpu g;
    g.launch = kDefaultKernelLaunch;
    gpu_keys(kv, g);
    topo_.gpus.assign(static_cast<size_t>(*n), g);
    gpus_line_ = line_;
  }

  void gpu_directive(const std::vector<Token>& w) {
    if (w.size() < 2) return error(w[0].col, "expected 'gpu INDEX KEY=VALUE...'");
    auto i = gpu_index(w[1]);
    if (!i) return;
    std::map<std::string, Token> kv;
    keys(w, 2, kGpuKeys, kv);
    gpu_keys(kv, topo_.gpus[static_cast<size_t>(*i)]);
  }

  void link_directive(const std::vector<Token>& w) {
    if (w.size() < 3) return error(w[0].col, "expected 'link A B bandwidth=BW latency=T [kind=nvlink|pcie]'");
    auto a = gpu_index(w[1]);
    auto b = gpu_index(w[2]);
    if (!a || !b) return;
    if (*a == *b) return error(w[2].col, fmt::format("a link needs two different GPUs, got {} twice", *a));
    if (!linked_.insert(std::minmax(*a, *b)).second)
      return error(w[0].col, fmt::format("GPUs {} and {} are linked twice (describe one bundle)", *a, *b));
    std::map<std::string, Token> kv;
    if (!keys(w, 3, {"kind", "bandwidth", "latency"}, kv) || !require(w, kv, {"bandwidth", "latency"})) return;
    DirectLink l{*a, *b, FabricKind::NVLink, {}};
    if (kv.count("kind")) {
      auto k = fabric(kv.at("kind"), {FabricKind::NVLink, FabricKind::PCIe});
      if (!k) return;
      l.kind = *k;
    }
    auto spec = link_spec(kv);
    if (!spec) return;
    l.spec = *spec;
    topo_.links.push_back(l);
  }

  // "0-3,5,7"
  std::optional<std::vector<int>> gpu_list(const Token& t) {
    std::vector<int> out;
    // By index, not by searching `out`: a 1 MiB file of 4096-GPU switch lines must parse in
    // linear time.
    std::vector<bool> listed(static_cast<size_t>(topo_.ngpus()));
    size_t pos = 0;
    while (pos <= t.text.size()) {
      size_t comma = t.text.find(',', pos);
      if (comma == std::string::npos) comma = t.text.size();
      std::string item = t.text.substr(pos, comma - pos);
      int col = t.col + static_cast<int>(pos);
      size_t dash = item.find('-');
      auto lo = gpu_index(Token{item.substr(0, dash), col});
      auto hi = dash == std::string::npos ? lo : gpu_index(Token{item.substr(dash + 1), col + static_cast<int>(dash) + 1});
      if (!lo || !hi) return std::nullopt;
      if (*hi < *lo) {
        error(col, fmt::format("empty GPU range '{}'", item));
        return std::nullopt;
      }
      for (int g = *lo; g <= *hi; ++g) {
        if (listed[static_cast<size_t>(g)]) {
          error(col, fmt::format("GPU {} listed twice", g));
          return std::nullopt;
        }
        listed[static_cast<size_t>(g)] = true;
        out.push_back(g);
      }
      pos = comma + 1;
    }
    return out;
  }

  void switch_directive(const std::vector<Token>& w) {
    if (w.size() < 2) return error(w[0].col, "expected 'switch NAME kind=nvswitch|pcie|memory gpus=LIST bandwidth=BW latency=T'");
    std::map<std::string, Token> kv;
    if (!keys(w, 2, {"kind", "gpus", "bandwidth", "latency"}, kv) ||
        !require(w, kv, {"kind", "gpus", "bandwidth", "latency"}))
      return;
    auto kind = fabric(kv.at("kind"), {FabricKind::NVSwitch, FabricKind::PCIe, FabricKind::Memory});
    auto list = gpu_list(kv.at("gpus"));
    auto spec = link_spec(kv);
    if (!kind || !list || !spec) return;
    if (list->size() < 2) return error(kv.at("gpus").col, "a switch needs at least two GPUs");
    topo_.switches.push_back(Switch{w[1].text, *kind, *spec, *list});
  }

  void nodes_directive(const std::vector<Token>& w) {
    if (nodes_line_) return error(w[0].col, fmt::format("'nodes' given twice (first on line {})", nodes_line_));
    if (w.size() < 2) return error(w[0].col, "expected 'nodes COUNT nics=K bandwidth=BW latency=T'");
    std::map<std::string, Token> kv;
    auto n = integer(w[1], 1, kMaxNodes, "the node count");
    if (!keys(w, 2, {"nics", "bandwidth", "latency"}, kv) || !require(w, kv, {"nics", "bandwidth", "latency"}) || !n)
      return;
    auto nics = integer(kv.at("nics"), 1, 64, "nics");
    auto spec = link_spec(kv);
    if (!nics || !spec) return;
    nodes_line_ = line_;
    topo_.network = Network{static_cast<int>(*n), static_cast<int>(*nics), *spec};
  }

  // Whole-file checks: every GPU fully described, every pair reachable.
  void finish() {
    if (diags_.error_count() > errors_before_) return;
    if (!gpus_line_) return diags_.error({}, "no 'gpus COUNT ...' line");
    line_ = gpus_line_;
    for (int i = 0; i < topo_.ngpus(); ++i) {
      const Gpu& g = topo_.gpus[static_cast<size_t>(i)];
      const char* missing = g.arch == 0                 ? "arch"
                            : g.memory_bandwidth == 0   ? "memory"
                            : g.reduce_bandwidth == 0   ? "reduce"
                            : g.channel_bandwidth == 0  ? "channel"
                            : g.max_channels == 0       ? "channels"
                                                        : nullptr;
      if (missing)
        return error(1, fmt::format("gpu {} has no {}= (set it on 'gpus' or on 'gpu {}')", i, missing, i));
    }
    if (std::string why = validate_topology(topo_); !why.empty()) error(1, why);
  }

  const SourceFile& file_;
  Diagnostics& diags_;
  Topology topo_;
  bool calibration_ = false;  // reading a calibration file into cal_
  Calibration cal_;
  std::set<std::string> seen_;  // calibration directives read so far
  std::set<std::pair<int, int>> linked_;  // GPU pairs with a link line
  int errors_before_ = 0;
  int line_ = 0;
  int gpus_line_ = 0;
  int nodes_line_ = 0;
};

}  // namespace

std::optional<Topology> parse_topology(const SourceFile& file, Diagnostics& diags) {
  return Parser(file, diags).run();
}

namespace {

// The file's text, at most one byte past the parsers' limit (which they then refuse: /dev/zero
// or a huge file must not be read to the end, or to the memory's end, first); nullopt with
// `errors` set when it cannot be read. stdio, not iostreams: it reports why a read failed (a
// directory gives EISDIR).
std::optional<SourceFile> read_limited(const std::string& path, const char* what, std::string& errors) {
  std::string text;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f) {
    char buf[4096];
    size_t got = 0;
    while (text.size() <= kMaxFileBytes && (got = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, got);
  }
  if (!f || std::ferror(f)) {
    errors = fmt::format("{}: error: cannot read {} file: {}\n", path, what, std::strerror(errno));
    if (f) std::fclose(f);
    return std::nullopt;
  }
  std::fclose(f);
  return SourceFile{path, std::move(text)};
}

}  // namespace

std::optional<Topology> load_topology(const std::string& path, std::string& errors) {
  std::optional<SourceFile> file = read_limited(path, "topology", errors);
  if (!file) return std::nullopt;
  Diagnostics diags;
  auto topo = parse_topology(*file, diags);
  if (!topo) errors = diags.render(&*file);
  return topo;
}

std::optional<Calibration> parse_calibration(const SourceFile& file, Diagnostics& diags) {
  return Parser(file, diags).run_calibration();
}

std::optional<Calibration> load_calibration(const std::string& path, std::string& errors) {
  std::optional<SourceFile> file = read_limited(path, "calibration", errors);
  if (!file) return std::nullopt;
  Diagnostics diags;
  auto cal = parse_calibration(*file, diags);
  if (!cal) errors = diags.render(&*file);
  return cal;
}

}  // namespace ccc
