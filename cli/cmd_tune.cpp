// `ccc tune --topo F`: every candidate schedule's predicted time per message size, and the choice.
#include <fmt/format.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>

#include "data_type.h"
#include "hierarchy_model.h"
#include "schedule_menu.h"
#include "shipped_schedules.h"
#include "cli.h"
#include "commands.h"
#include "suggest.h"

namespace ccc::cli {
namespace {


// Every *.sched in dir, by name; unreadable ones are reported and left out.
std::vector<SourceFile> read_schedules(const std::string& dir, std::ostream& err) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".sched") paths.push_back(entry.path().string());
  if (ec) err << fmt::format("ccc tune: error: cannot list '{}': {}\n", dir, ec.message());
  std::sort(paths.begin(), paths.end());
  std::vector<SourceFile> files;
  for (const std::string& path : paths) {
    Diagnostics diags;
    if (std::optional<SourceFile> f = read_source(path, diags)) files.push_back(std::move(*f));
    err << diags.render(nullptr);
  }
  return files;
}

// A topology of several nodes: an allreduce hierarchical (ccc within each node, NCCL between)
// against NCCL's ring over every rank (hierarchy_model.h).
int tune_across_nodes(const ParsedArgs& args, const Topology& topo, Collective collective, DataType dtype,
                      std::ostream& out, std::ostream& err) {
  const Command& cmd = tune_command();
  if (collective != Collective::AllReduce)
    return usage_error(cmd, fmt::format("across nodes ccc tune prices allreduce only (ccc's hierarchy), not {}",
                                        collective_name(collective)),
                       err);
  for (const char* option : {"--ranks", "--schedules", "--define", "--algo"})
    if (args.get(option))
      return usage_error(cmd, fmt::format("{} is for one node; this topology has {}", option, topo.network.nodes), err);
  std::vector<SourceFile> sources;
  for (const ShippedSchedule& s : shipped_schedules()) sources.push_back(s.file);
  const ScheduleMenu reduce_scatter(Collective::ReduceScatter, topo.ngpus(), sources);
  const ScheduleMenu all_gather(Collective::AllGather, topo.ngpus(), sources);
  try {
    const auto rows = hierarchy_table(static_cast<int>(data_type_size(dtype)), topo, reduce_scatter.candidates(),
                                      all_gather.candidates());
    out << format_hierarchy_table(
        rows, fmt::format("{}: {} nodes x {} ranks of {}, {} NICs of {:.0f} GB/s each, allreduce {}, the shipped "
                          "schedules",
                          topo.name, topo.network.nodes, topo.ngpus(), topo.gpus[0].model, topo.network.nics,
                          topo.network.nic.bandwidth / 1e9, data_type_name(dtype)));
  } catch (const std::invalid_argument& e) {
    err << fmt::format("ccc tune: error: {}\n", e.what());
    return kExitScheduleError;
  }
  return kExitOk;
}

// --epilogue E [--hidden H]: a fused allreduce, priced with its epilogue (the norm writes
// residual_out, as ccc-bench's calls do) beside the unfused alternative.
int epilogue_option(const ParsedArgs& args, Collective collective, int elem_size, EpilogueShape& shape,
                    std::ostream& err) {
  const Command& cmd = tune_command();
  const std::optional<std::string> name = args.get("--epilogue");
  const std::optional<std::string> hidden = args.get("--hidden");
  if (!name) return hidden ? usage_error(cmd, "--hidden is for --epilogue residual-rmsnorm[-fp8]", err) : kExitOk;
  const bool fp8 = *name == "residual-rmsnorm-fp8";
  std::string error;
  const std::optional<Epilogue> kind =
      fp8 ? Epilogue::ResidualRmsNorm : named_value("--epilogue", *name, kAllEpilogues, &epilogue_name, error);
  if (!kind) return usage_error(cmd, error + ", residual-rmsnorm-fp8", err);
  if (*kind != Epilogue::None && collective != Collective::AllReduce)
    return usage_error(cmd, fmt::format("--epilogue: only allreduce has one, not {}", collective_name(collective)), err);
  shape.kind = *kind;
  shape.elem_size = elem_size;
  if (*kind != Epilogue::ResidualRmsNorm)
    return hidden ? usage_error(cmd, "--hidden is for --epilogue residual-rmsnorm[-fp8]", err) : kExitOk;
  if (!hidden) return usage_error(cmd, fmt::format("--epilogue {} needs --hidden H (the row length)", *name), err);
  const std::optional<int> h = parse_int(*hidden, 1, 1 << 24);
  if (!h) return usage_error(cmd, fmt::format("--hidden expects a row length of 1 .. 2^24 elements, not '{}'", *hidden), err);
  shape.row_bytes = static_cast<int64_t>(*h) * elem_size;
  shape.residual_out = true;
  shape.quant_out = fp8;
  return kExitOk;
}

int run_tune(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const Command& cmd = tune_command();
  if (!args.positional.empty()) return usage_error(cmd, fmt::format("unexpected argument '{}'", args.positional[0]), err);
  std::optional<std::string> topo_path = args.get("--topo");
  if (!topo_path) return usage_error(cmd, "--topo F is required", err);

  std::string error;
  const std::optional<Collective> collective = named_value(
      "--collective", args.get("--collective").value_or("allreduce"), kAllCollectives, &collective_name, error);
  if (!collective) return usage_error(cmd, error, err);
  const std::optional<DataType> dtype =
      named_value("--dtype", args.get("--dtype").value_or("f32"), kAllDataTypes, &data_type_name, error);
  if (!dtype) return usage_error(cmd, error, err);
  const int elem_size = static_cast<int>(data_type_size(*dtype));
  const std::string format = args.get("--format").value_or("table");
  if (format != "table" && format != "tsv")
    return usage_error(cmd, fmt::format("--format is table or tsv, not '{}'", format), err);

  std::string errors;
  std::optional<Topology> topo = load_topology(*topo_path, errors);
  if (!topo) {
    err << errors;
    return kExitScheduleError;
  }
  if (std::optional<std::string> cal_path = args.get("--calibration")) {
    std::optional<Calibration> cal = load_calibration(*cal_path, errors);
    if (!cal) {
      err << errors;
      return kExitScheduleError;
    }
    apply_calibration(*topo, *cal);
  }
  if (args.has("--graph")) price_graph_replays(*topo);
  if (topo->network.nodes > 1) return tune_across_nodes(args, *topo, *collective, *dtype, out, err);
  int nranks = topo->ngpus();
  if (std::optional<std::string> ranks = args.get("--ranks")) {
    std::optional<int> n = parse_int(*ranks, 1, topo->ngpus());
    if (!n) return usage_error(cmd, fmt::format("--ranks must be 1 .. {} (the topology's GPUs), not '{}'", topo->ngpus(), *ranks), err);
    nranks = *n;
  }

  std::optional<std::string> dir = args.get("--schedules");
  std::vector<SourceFile> sources;
  if (dir) {
    sources = read_schedules(*dir, err);
  } else {
    for (const ShippedSchedule& s : shipped_schedules()) sources.push_back(s.file);
  }
  std::map<std::string, int64_t> defines;
  if (std::optional<std::string> text = args.get("--define"))
    if (std::string msg = parse_defines(*text, defines); !msg.empty()) return usage_error(cmd, msg, err);
  ScheduleMenu menu(*collective, nranks, sources, 0, defines);
  for (const auto& [name, value] : defines) {
    if (menu.parameters().count(name) != 0) continue;
    const std::vector<std::string> known(menu.parameters().begin(), menu.parameters().end());
    return usage_error(cmd,
                       known.empty() ? fmt::format("--define {}: no {} schedule here has parameters", name,
                                                   collective_name(*collective))
                                     : fmt::format("--define {}: no {} schedule here has such a parameter{} (they have: {})",
                                                   name, collective_name(*collective), did_you_mean(name, known),
                                                   fmt::join(known, ", ")),
                       err);
  }
  SelectOptions options;
  options.algo = args.get("--algo").value_or("");
  if (int rc = epilogue_option(args, *collective, elem_size, options.epilogue, err); rc != kExitOk) return rc;
  try {
    auto rows = tune_table(*collective, elem_size, *topo, menu.candidates(), options);
    std::string title = fmt::format("{}: {} ranks of {}, {} {}, {} schedules", topo->name, nranks,
                                    topo->gpus[0].model, collective_name(*collective), data_type_name(*dtype),
                                    dir ? "the " + *dir : std::string("the shipped"));
    for (const auto& [name, value] : defines) title += fmt::format(", {} = {}", name, value);
    if (options.epilogue.kind != Epilogue::None)
      title += fmt::format("\n# fused with epilogue {}{}{}; unfused: the plain allreduce's choice, then the epilogue "
                           "as a kernel of its own (one more launch, each buffer once at the memory's bandwidth); "
                           "speedup: unfused / fused",
                           epilogue_name(options.epilogue.kind),
                           options.epilogue.row_bytes > 0
                               ? fmt::format(" over rows of {} elements, residual_out written", options.epilogue.row_bytes / elem_size)
                               : "",
                           options.epilogue.quant_out ? ", fp8 output" : "");
    for (const std::string& s : menu.skipped()) title += "\n# skipped " + s;
    out << (format == "tsv" ? format_tune_tsv(rows) : format_tune_table(rows, title));
  } catch (const std::invalid_argument& e) {
    err << fmt::format("ccc tune: error: {}\n", e.what());
    return kExitScheduleError;
  }
  return kExitOk;
}

}  // namespace

const Command& tune_command() {
  static const Command cmd{
      "tune",
      "predict every schedule's time per message size on a topology, and the choice",
      "ccc tune --topo F [--calibration F] [--graph] [--collective C] [--ranks N] [--dtype D] [--schedules DIR] "
      "[--define NAME=V,...] [--algo NAME] [--epilogue E --hidden H] [--format tsv]",
      {{"--topo", "F", "topology file (see docs/topology.md; topologies/ has examples)"},
       {"--calibration", "F", "measured constants replacing the topology's (the GPU check writes one)"},
       {"--graph", "", "price each call replayed from a CUDA graph (the GPUs' graph_launch=, else launch=)"},
       {"--collective", "C", "allreduce (default), reduce_scatter, allgather, broadcast, reduce or alltoall"},
       {"--ranks", "N", "ranks, at most the topology's GPUs (default: all of them)"},
       {"--dtype", "D", "element type: f64 f32 (default) f16 bf16 i64 u64 i32 u32 i8 u8 f8e4m3 f8e5m2"},
       {"--schedules", "DIR", "take the candidates from DIR/*.sched (default: the shipped schedules)"},
       {"--define", "NAME=V,...", "set 'param NAME' to the integer V in every schedule that declares it"},
       {"--algo", "NAME", "force this schedule, as CCC_ALGO does"},
       {"--epilogue", "E", "allreduce fused with residual, residual-rmsnorm or residual-rmsnorm-fp8 (docs/epilogue.md): "
                           "each schedule priced with it, beside the unfused allreduce and a kernel of its own"},
       {"--hidden", "H", "residual-rmsnorm[-fp8]: the row length in elements (sizes start at one row)"},
       {"--format", "F", "table (default: every schedule's time per size) or tsv (the choice per size: bytes, "
                         "schedule, protocol, time_us, busbw_gbps, serial_latencies, channels, tile_bytes, launch_us; with "
                         "--epilogue also epilogue_us and unfused_us)"}},
      &run_tune};
  return cmd;
}

}  // namespace ccc::cli
