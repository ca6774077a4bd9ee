#include "select.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

namespace ccc {
namespace {

std::vector<int> channel_grid(const Topology& t, int nranks, const SelectOptions& o) {
  if (!o.channels.empty()) return o.channels;
  int most = t.gpus[0].max_channels;
  for (int r = 1; r < nranks; ++r) most = std::min(most, t.gpus[r].max_channels);
  std::vector<int> grid;
  for (int c = 1; c <= most; c *= 2) grid.push_back(c);
  return grid;
}

// The fastest parameters; within `tolerance` of it, the fewest channels, then the fewest windows
// (more of either costs SMs and syncs the model does not charge for).
Choice best_params(const CandidateSchedule& cand, int64_t bytes, const Topology& t, const SelectOptions& o) {
  CostModel model(*cand.program, cand.sync, t);
  std::vector<Protocol> protocols = o.protocols;
  if (protocols.empty()) {
    protocols.push_back(Protocol::Simple);
    if (bytes <= kLlMaxBytes) protocols.push_back(Protocol::Ll);
  }
  std::vector<Choice> tried;
  for (Protocol protocol : protocols)
    for (int c : channel_grid(t, cand.program->nranks, o))
      for (int64_t tile : o.tiles.empty() ? kDefaultTiles : o.tiles) {
        CostParams params{c, tile, o.pipeline, protocol, o.epilogue};
        tried.push_back(Choice{&cand, params, model.estimate(bytes, params), false});
      }
  if (tried.empty()) throw std::invalid_argument("empty channel or tile grid");
  double fastest = std::min_element(tried.begin(), tried.end(), [](const Choice& a, const Choice& b) {
                     return a.estimate.time < b.estimate.time;
                   })->estimate.time;
  std::vector<Choice> close;
  for (const Choice& c : tried)
    if (c.estimate.time <= fastest * (1 + o.tolerance)) close.push_back(c);
  return *std::min_element(close.begin(), close.end(), [](const Choice& a, const Choice& b) {
    if (a.params.channels != b.params.channels) return a.params.channels < b.params.channels;
    if (a.estimate.windows != b.estimate.windows) return a.estimate.windows < b.estimate.windows;
    return a.estimate.time < b.estimate.time;
  });
}

}  // namespace

std::vector<Choice> tune_candidates(Collective collective, int64_t bytes, int elem_size, const Topology& topo,
                                    const std::vector<CandidateSchedule>& candidates, const SelectOptions& options) {
  if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8)
    throw std::invalid_argument(fmt::format("element size {} is not 1, 2, 4 or 8 bytes", elem_size));
  if (bytes < 0 || bytes % elem_size != 0)
    throw std::invalid_argument(fmt::format("{} bytes is not a whole number of {}-byte elements", bytes, elem_size));
  std::vector<Choice> out;
  for (const CandidateSchedule& cand : candidates) {
    if (!cand.program) throw std::invalid_argument(fmt::format("candidate '{}' has no step program", cand.name));
    if (cand.program->collective != collective) continue;
    if (!out.empty() && cand.program->nranks != out.front().candidate->program->nranks)
      throw std::invalid_argument(fmt::format("candidates '{}' and '{}' are instantiated for different rank counts",
                                              out.front().name(), cand.name));
    out.push_back(best_params(cand, bytes, topo, options));
  }
  return out;
}

// The fastest of `all`, or the one the forced name (options, then CCC_ALGO) picks.
static Choice pick(std::vector<Choice> all, Collective collective, const SelectOptions& options) {
  if (all.empty())
    throw std::invalid_argument(fmt::format("no candidate schedule implements {}", collective_name(collective)));
  std::string forced = options.algo;
  if (const char* env = std::getenv("CCC_ALGO"); forced.empty() && env && *env) forced = env;
  if (forced.empty())
    return *std::min_element(all.begin(), all.end(),
                             [](const Choice& a, const Choice& b) { return a.estimate.time < b.estimate.time; });
  std::string names;
  for (Choice& c : all) {
    if (c.name() == forced) {
      c.forced = true;
      return c;
    }
    names += (names.empty() ? "" : ", ") + c.name();
  }
  throw std::invalid_argument(
      fmt::format("CCC_ALGO={}: no such {} schedule (candidates: {})", forced, collective_name(collective), names));
}

Choice select_schedule(Collective collective, int64_t bytes, int elem_size, const Topology& topo,
                       const std::vector<CandidateSchedule>& candidates, const SelectOptions& options) {
  return pick(tune_candidates(collective, bytes, elem_size, topo, candidates, options), collective, options);
}

std::vector<TuneRow> tune_table(Collective collective, int elem_size, const Topology& topo,
                                const std::vector<CandidateSchedule>& candidates, const SelectOptions& options) {
  std::vector<TuneRow> rows;
  SelectOptions plain = options;
  plain.epilogue = {};
  const EpilogueShape& epilogue = options.epilogue;
  for (int64_t bytes = std::max<int64_t>(8, epilogue.row_bytes); bytes <= (int64_t{1} << 30); bytes *= 2) {
    TuneRow row{bytes, tune_candidates(collective, bytes, elem_size, topo, candidates, options), {}};
    row.choice = pick(row.per_schedule, collective, options);
    if (epilogue.kind != Epilogue::None) {
      const Choice unfused = select_schedule(collective, bytes, elem_size, topo, candidates, plain);
      row.unfused = unfused.estimate.time +
                    separate_epilogue_seconds(topo, unfused.candidate->program->nranks, bytes, epilogue);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string format_tune_table(const std::vector<TuneRow>& rows, const std::string& title) {
  std::string out = fmt::format("# {}\n# predicted time in us per schedule (best channels and tile for each)\n", title);
  if (rows.empty()) return out;
  std::vector<size_t> width;  // each column as wide as its schedule's name, at least 10
  out += fmt::format("{:>12}", "bytes");
  for (const Choice& c : rows[0].per_schedule) {
    width.push_back(std::max<size_t>(10, c.name().size()));
    out += fmt::format(" {:>{}}", c.name(), width.back());
  }
  const bool unfused = rows[0].unfused > 0;
  if (unfused) out += fmt::format(" {:>10} {:>8}", "unfused", "speedup");
  out += "  choice\n";
  for (const TuneRow& row : rows) {
    out += fmt::format("{:>12}", row.bytes);
    for (size_t i = 0; i < row.per_schedule.size(); ++i)
      out += fmt::format(" {:>{}.2f}", row.per_schedule[i].estimate.time * 1e6, width[i]);
    const Choice& ch = row.choice;
    if (unfused) out += fmt::format(" {:>10.2f} {:>7.2f}x", row.unfused * 1e6, row.unfused / ch.estimate.time);
    out += fmt::format("  {} channels={} tile={} {}busbw={:.1f}GB/s{}\n", ch.name(), ch.params.channels,
                       ch.params.tile_bytes ? fmt::format("{}", ch.params.tile_bytes) : "whole",
                       ch.params.protocol == Protocol::Ll ? "protocol=ll " : "", ch.estimate.busbw / 1e9,
                       ch.forced ? " (forced)" : "");
  }
  return out;
}

std::string format_tune_tsv(const std::vector<TuneRow>& rows) {
  const bool unfused = !rows.empty() && rows[0].unfused > 0;
  std::string out = "bytes\tschedule\tprotocol\ttime_us\tbusbw_gbps\tserial_latencies\tchannels\ttile_bytes\tlaunch_us";
  out += unfused ? "\tepilogue_us\tunfused_us\n" : "\n";
  for (const TuneRow& row : rows) {
    const Choice& ch = row.choice;
    out += fmt::format("{}\t{}\t{}\t{:.3f}\t{:.3f}\t{}\t{}\t{}\t{:.3f}", row.bytes, ch.name(),
                       protocol_name(ch.params.protocol), ch.estimate.time * 1e6,
                       ch.estimate.busbw / 1e9, ch.estimate.serial_latencies, ch.params.channels, ch.params.tile_bytes,
                       ch.estimate.launch * 1e6);
    out += unfused ? fmt::format("\t{:.3f}\t{:.3f}\n", ch.estimate.epilogue * 1e6, row.unfused * 1e6) : "\n";
  }
  return out;
}

}  // namespace ccc
