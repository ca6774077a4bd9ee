// Content hashes for JIT cache keys and cache-entry checksums.
//
// FNV-1a, not a cryptographic hash: keys are built from our own inputs and the checksum guards
// entries against truncation and corruption, not against an attacker who can write the cache.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ccc {

// A 128-bit hash of a sequence of fields. Each field is length-prefixed, so ("ab", "c") and
// ("a", "bc") hash differently.
class ContentHash {
 public:
  ContentHash& add(std::string_view field);
  ContentHash& add(uint64_t field);
  std::string hex() const;  // 32 lowercase hex digits

 private:
  void mix(std::string_view bytes);
  unsigned __int128 state_ = (static_cast<unsigned __int128>(0x6c62272e07bb0142ULL) << 64) |
                             0x62b821756295c58dULL;  // the FNV-1a 128 offset basis
};

// 64-bit FNV-1a of `bytes`: the checksum stored in each disk cache entry.
uint64_t checksum64(std::string_view bytes);

}  // namespace ccc
