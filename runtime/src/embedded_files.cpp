#include "content_hash.h"
#include "embedded_files.h"

namespace ccc {

const std::string& device_prelude_hash() {
  static const std::string hash = [] {
    ContentHash h;
    for (const EmbeddedFile& f : device_prelude_files()) h.add(f.name).add(f.text);
    return h.hex();
  }();
  return hash;
}

}  // namespace ccc
