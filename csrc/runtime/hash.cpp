#include "hash.h"

#include <cstdio>
#include <cstring>

namespace neuron::rt {

namespace {
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t fmix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}
}  // namespace

void Hasher::block(uint64_t w) {
  a_ = rotl(a_ ^ fmix(w), 27) * 0x9e3779b97f4a7c15ull + 0x52dce729ull;
  b_ = rotl(b_ ^ fmix(w + 0x632be59bd9b4e019ull), 31) * 0xc2b2ae3d27d4eb4full + 0x165667b1ull;
}

Hasher& Hasher::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  len_ += n;
  while (n > 0 && ntail_ > 0 && ntail_ < 8) {
    tail_[ntail_++] = *p++;
    --n;
    if (ntail_ == 8) {
      uint64_t w;
      std::memcpy(&w, tail_, 8);
      block(w);
      ntail_ = 0;
    }
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    block(w);
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    tail_[ntail_++] = *p++;
    --n;
  }
  return *this;
}

std::array<uint64_t, 2> Hasher::digest128() const {
  uint64_t a = a_, b = b_;
  uint64_t w = 0;
  std::memcpy(&w, tail_, ntail_);
  a ^= fmix(w ^ (static_cast<uint64_t>(ntail_) << 56));
  b ^= fmix(w + 0x9e3779b97f4a7c15ull);
  a ^= len_;
  b ^= len_ * 0x100000001b3ull;
  a = fmix(a + b);
  b = fmix(b + a);
  return {a, b};
}

std::string Hasher::hex128() const {
  const auto d = digest128();
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(d[0]),
                static_cast<unsigned long long>(d[1]));
  return buf;
}

uint64_t hash64(const void* data, size_t n) { return Hasher().update(data, n).digest64(); }

}  // namespace neuron::rt
