// `ccc topo [--file F]`: the topology as the cost model sees it - detected through the CUDA
// driver (and NVML for NVLinks), or read from F - in the file format (so the output is itself a
// topology file), preceded by a readable summary as comments.
#include <fmt/format.h>

#include <numeric>
#include <sstream>

#include "cuda_topology.h"
#include "nvrtc_library.h"
#include "topology.h"
#include "cli.h"
#include "commands.h"

namespace ccc::cli {
namespace {

// Which NVRTC compiles this machine's kernels (nvrtc_library.h), or where ccc looked for one.
std::string nvrtc_line() {
  std::string why;
  const NvrtcLibrary* nvrtc = nvrtc_library(&why);
  return nvrtc ? fmt::format("NVRTC {}.{} from {}", nvrtc->major, nvrtc->minor, nvrtc->path) : why;
}

// The local GPUs; a line saying where the NVLink wiring came from goes to `source`.
std::optional<Topology> detect(std::string& source, std::ostream& err) {
  try {
    const CudaDriver& driver = CudaDriver::get();
    std::vector<int> ordinals(static_cast<size_t>(driver.device_count()));
    std::iota(ordinals.begin(), ordinals.end(), 0);
    DriverProbe probe = probe_cuda_devices(driver, ordinals);
    std::string why;
    std::optional<NvlinkReport> nvlinks = query_nvlinks(probe, &why);
    source = nvlinks ? "detected with the CUDA driver and NVML"
                     : fmt::format("detected with the CUDA driver; no NVLink information: {}", why);
    source += "\n" + nvrtc_line();
    return topology_from_probe(probe, nvlinks);
  } catch (const CudaError& e) {
    err << fmt::format("ccc topo: error: {}\n(give --file F to read a topology file instead)\n{}\n", e.what(),
                       nvrtc_line());
    return std::nullopt;
  }
}

int run_topo(const ParsedArgs& args, std::ostream& out, std::ostream& err) {
  const Command& cmd = topo_command();
  if (!args.positional.empty()) return usage_error(cmd, fmt::format("unexpected argument '{}'", args.positional[0]), err);
  std::optional<Topology> topo;
  std::string source;
  if (std::optional<std::string> path = args.get("--file")) {
    std::string errors;
    topo = load_topology(*path, errors);
    err << errors;
  } else {
    topo = detect(source, err);
    if (topo && !validate_topology(*topo).empty())
      source += fmt::format("\nwarning: {}: peer-load kernels cannot run here", validate_topology(*topo));
  }
  if (!topo) return kExitScheduleError;
  if (!source.empty()) source += "\n";
  std::istringstream summary(source + describe_topology(*topo));
  for (std::string line; std::getline(summary, line);) out << "# " << line << "\n";
  out << format_topology(*topo);
  return kExitOk;
}

}  // namespace

const Command& topo_command() {
  static const Command cmd{"topo", "print the detected topology, or a topology file, as the cost model sees it",
                           "ccc topo [--file F]",
                           {{"--file", "F", "read this topology file (docs/topology.md) instead of detecting"}},
                           &run_topo};
  return cmd;
}

}  // namespace ccc::cli
