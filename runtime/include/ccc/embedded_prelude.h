// The device prelude (runtime/device/*.h), compiled into the library as text.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace ccc {

struct EmbeddedFile {
  std::string_view name;  // the include name, e.g. "ccc_abi.h"
  std::string_view text;
};

// Every header of runtime/device/, in a stable order.
std::span<const EmbeddedFile> device_prelude_files();

// A hash of every prelude file's name and text: part of each JIT cache key, since generated
// source includes the prelude.
const std::string& device_prelude_hash();

}  // namespace ccc
