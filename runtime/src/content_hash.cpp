#include "content_hash.h"

#include <fmt/format.h>

namespace ccc {

namespace {
const unsigned __int128 kFnv128Prime = (static_cast<unsigned __int128>(1) << 88) | 0x13b;
}

void ContentHash::mix(std::string_view bytes) {
  for (unsigned char b : bytes) {
    state_ ^= b;
    state_ *= kFnv128Prime;
  }
}

ContentHash& ContentHash::add(std::string_view field) {
  add(static_cast<uint64_t>(field.size()));
  mix(field);
  return *this;
}

ContentHash& ContentHash::add(uint64_t field) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(field >> (8 * i));
  mix({bytes, 8});
  return *this;
}

std::string ContentHash::hex() const {
  return fmt::format("{:016x}{:016x}", static_cast<uint64_t>(state_ >> 64),
                     static_cast<uint64_t>(state_));
}

uint64_t checksum64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char b : bytes) {
    h ^= b;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace ccc
