/// \file
/// A stable 64-bit hash (FNV-1a over bytes, then mixed). Stable across runs, processes and
/// platforms of the same endianness, so it can key on-disk caches. Never hash pointers with it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace ember {

class Hasher {
 public:
  Hasher& bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      state_ ^= p[i];
      state_ *= 0x100000001b3ULL;
    }
    return *this;
  }
  Hasher& u64(uint64_t v) { return bytes(&v, sizeof v); }
  Hasher& i64(int64_t v) { return bytes(&v, sizeof v); }
  Hasher& f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return u64(bits);
  }
  /// Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
  Hasher& str(std::string_view s) {
    u64(s.size());
    return bytes(s.data(), s.size());
  }
  uint64_t digest() const {
    uint64_t x = state_;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
  }

 private:
  uint64_t state_ = 0xcbf29ce484222325ULL;
};

}  // namespace ember
