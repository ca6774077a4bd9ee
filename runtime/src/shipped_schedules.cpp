#include "shipped_schedules.h"

#include <fmt/format.h>

#include "ccc/errors.h"
#include "embedded_files.h"
#include "parser.h"

namespace ccc {

const std::vector<ShippedSchedule>& shipped_schedules() {
  static const std::vector<ShippedSchedule> all = [] {
    std::vector<ShippedSchedule> list;
    for (const EmbeddedFile& f : shipped_schedule_files()) {
      SourceFile file{"schedules/" + std::string(f.name), std::string(f.text)};
      Diagnostics diags;
      if (std::optional<ast::Schedule> s = parse_schedule(file, diags))
        list.push_back({s->collective, s->name, std::move(file)});
    }
    return list;
  }();
  return all;
}

const ShippedSchedule& find_shipped_schedule(Collective collective, const std::string& name) {
  std::string names;
  for (const ShippedSchedule& s : shipped_schedules()) {
    if (s.collective != collective) continue;
    if (s.name == name) return s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  throw Error(ErrorKind::InvalidArgument,
              fmt::format("no shipped {} schedule named '{}' (there {}: {})", collective_name(collective),
                          name, names.find(',') == std::string::npos ? "is" : "are",
                          names.empty() ? "none" : names));
}

}  // namespace ccc
