// libFuzzer target for the topology reader: any bytes must give a topology or diagnostics - never
// a crash, hang or sanitizer report. A topology that parses must format to text that parses to
// the same text again, and price a one-step program on it without crashing.
// Build and run: see docs/topology.md ("Fuzzing the reader").
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cost_model.h"
#include "topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ccc::SourceFile file{"fuzz.topo", std::string(reinterpret_cast<const char*>(data), size)};
  ccc::Diagnostics diags;
  std::optional<ccc::Topology> topo = ccc::parse_topology(file, diags);
  (void)diags.render(&file);
  if (!topo) return 0;

  std::string printed = ccc::format_topology(*topo);
  ccc::SourceFile again{"printed.topo", printed};
  ccc::Diagnostics diags2;
  std::optional<ccc::Topology> reparsed = ccc::parse_topology(again, diags2);
  if (!reparsed || ccc::format_topology(*reparsed) != printed) {
    std::fprintf(stderr, "formatted topology does not round-trip:\n%s\n%s", printed.c_str(),
                 diags2.render(&again).c_str());
    std::abort();
  }

  // Every rank reduces its successor's input in one step (a ring shift), on up to 64 GPUs.
  ccc::StepProgram p;
  p.nranks = std::min(topo->ngpus(), 64);
  p.nchunks = 1;
  p.steps.resize(1);
  p.ops.resize(static_cast<size_t>(p.nranks));
  for (int r = 0; r < p.nranks; ++r)
    p.ops[r].push_back({ccc::Op{ccc::OpKind::Reduce, {0, 1}, (r + 1) % p.nranks, ccc::Buffer::Input,
                                ccc::Buffer::Output, {}}});
  ccc::Estimate e = ccc::estimate_cost(p, nullptr, *topo, int64_t{1} << 20, {4, 64 << 10});
  if (!(e.time >= 0)) std::abort();
  return 0;
}
