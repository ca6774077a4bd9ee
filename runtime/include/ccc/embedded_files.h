// Files compiled into the library as text, so nothing depends on install paths: the device
// prelude (runtime/device/*.h) and the shipped schedules (schedules/*.sched).
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace ccc {

struct EmbeddedFile {
  std::string_view name;  // the file name, e.g. "ccc_abi.h" or "ring.sched"
  std::string_view text;  // NUL-terminated (it views a string literal)
};

// Every header of runtime/device/, by name.
std::span<const EmbeddedFile> device_prelude_files();

// Every schedules/*.sched of the source tree, by name.
std::span<const EmbeddedFile> shipped_schedule_files();

// A hash of every prelude file's name and text: part of each JIT cache key, since generated
// source includes the prelude.
const std::string& device_prelude_hash();

}  // namespace ccc
