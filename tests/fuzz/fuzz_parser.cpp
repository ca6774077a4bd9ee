// libFuzzer target for the front end: any bytes must give a schedule or diagnostics - never a
// crash, hang or sanitizer report. A schedule that parses must also print back to text that
// parses to the same tree, and instantiate (at N = 1 + first byte % 8) without crashing.
// Build and run: see docs/dsl.md ("Fuzzing the front end").
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>

#include "instantiate.h"
#include "parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ccc::SourceFile file{"fuzz.sched", std::string(reinterpret_cast<const char*>(data), size)};
  ccc::Diagnostics diags;
  std::optional<ccc::ast::Schedule> schedule = ccc::parse_schedule(file, diags);
  (void)diags.render(&file);
  if (!schedule) return 0;

  std::string printed = ccc::ast::print_schedule(*schedule);
  ccc::SourceFile again{"printed.sched", printed};
  ccc::Diagnostics diags2;
  std::optional<ccc::ast::Schedule> reparsed = ccc::parse_schedule(again, diags2);
  if (!reparsed || ccc::ast::print_schedule(*reparsed) != printed) {
    std::fprintf(stderr, "printed schedule does not round-trip:\n%s\n%s", printed.c_str(), diags2.render(&again).c_str());
    std::abort();
  }

  // Smaller work limits than the documented ones keep every input fast under the sanitizers;
  // the limit checks themselves are the same code.
  ccc::InstantiateOptions options;
  options.nranks = 1 + (size > 0 ? data[0] % 8 : 0);
  options.limits = {1 << 16, 1 << 16, 1 << 20};
  ccc::Diagnostics diags3;
  (void)ccc::instantiate(*schedule, options, file, diags3);
  return 0;
}
