// The name of one multi-process communicator, made by one rank and copied to the others.
#pragma once

#include <array>

namespace ccc {

// Where the communicator's bootstrap root listens and a random session tag (docs/runtime.md).
// 128 opaque bytes, as ncclUniqueId, so it travels like one.
struct UniqueId {
  std::array<char, 128> bytes{};
};

}  // namespace ccc
