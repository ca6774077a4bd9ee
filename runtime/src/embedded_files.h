// Files compiled into the libraries as text, so nothing depends on install paths: the device
// prelude (device/*.h, in the compiler library) and the shipped schedules
// (schedules/*.sched).
#pragma once

#include <span>
#include <string>

#include "embedded_file.h"

namespace ccc {

// Every schedules/*.sched of the source tree, by name.
std::span<const EmbeddedFile> shipped_schedule_files();

// A hash of every prelude file's name and text: part of each JIT cache key, since generated
// source includes the prelude.
const std::string& device_prelude_hash();

}  // namespace ccc
