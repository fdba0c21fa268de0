// Non-cryptographic 64/128-bit content hashes for cache keys and cache-file checksums (NEFF,
// frontend index, NKI traces).
// Deterministic across processes and platforms of the same endianness.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace neuron::rt {

class Hasher {
 public:
  Hasher& update(const void* data, size_t n);
  Hasher& update(std::string_view s) {
    const uint64_t n = s.size();
    update(&n, sizeof(n));
    return update(s.data(), s.size());
  }
  std::array<uint64_t, 2> digest128() const;
  uint64_t digest64() const { return digest128()[0]; }
  std::string hex128() const;  // 32 lowercase hex digits

 private:
  void block(uint64_t w);
  uint64_t a_ = 0x243f6a8885a308d3ull, b_ = 0x13198a2e03707344ull;
  uint64_t len_ = 0;
  uint8_t tail_[8] = {};
  size_t ntail_ = 0;
};

uint64_t hash64(const void* data, size_t n);

}  // namespace neuron::rt
