// A file compiled into a library as text (cmake/embed_files.cmake), and the device prelude.
#pragma once

#include <span>
#include <string_view>

namespace ccc {

struct EmbeddedFile {
  std::string_view name;  // the file name, e.g. "ccc_abi.h" or "ring.sched"
  std::string_view text;  // NUL-terminated (it views a string literal)
};

// Every header of device/, by name: NVRTC's named headers, the host compile's includes.
std::span<const EmbeddedFile> device_prelude_files();

}  // namespace ccc
