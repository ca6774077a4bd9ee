#include "cost_model_util.h"

#include <gtest/gtest.h>


#include "front_end_util.h"

namespace ccc::test {

StepProgram shipped_program(const char* name, int n) {
  FrontEndResult r = compile_schedule(name, n);
  EXPECT_TRUE(r.program.has_value()) << r.errors;
  return r.program.value_or(StepProgram{});
}

std::vector<SourceFile> shipped_schedule_sources() {
  std::vector<SourceFile> files;
  for (const std::string& name : shipped_schedule_names()) {
    Diagnostics diags;
    auto f = read_source(schedule_path(name), diags);
    EXPECT_TRUE(f.has_value()) << diags.render(nullptr);
    if (f) files.push_back(std::move(*f));
  }
  return files;
}

PlannedProgram shipped_planned(const char* name, int n) {
  Diagnostics diags;
  auto planned = run_analysis(shipped_program(name, n), SyncOptions{}, diags);
  EXPECT_TRUE(planned.has_value()) << diags.render(nullptr);
  return planned.value_or(PlannedProgram{});
}

static Topology uniform_gpus(int n, double reduce_bandwidth) {
  Topology t;
  t.name = "uniform";
  t.gpus.assign(static_cast<size_t>(n), Gpu{"test", 90, 1e15, reduce_bandwidth, 1e15, 64});
  return t;
}

Topology uniform_switch(int n, double bandwidth, double latency, double reduce_bandwidth) {
  Topology t = uniform_gpus(n, reduce_bandwidth);
  Switch s{"sw", FabricKind::NVSwitch, {bandwidth, latency}, {}};
  for (int g = 0; g < n; ++g) s.gpus.push_back(g);
  t.switches.push_back(s);
  return t;
}

Topology full_mesh(int n, double bandwidth, double latency, double reduce_bandwidth) {
  Topology t = uniform_gpus(n, reduce_bandwidth);
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) t.links.push_back(DirectLink{a, b, FabricKind::NVLink, {bandwidth, latency}});
  return t;
}

Topology shipped_topology(const char* name) {
  std::string errors;
  auto t = load_topology(std::string(CCC_SOURCE_DIR) + "/topologies/" + name + ".topo", errors);
  EXPECT_TRUE(t.has_value()) << errors;
  return t.value_or(Topology{});
}

}  // namespace ccc::test
