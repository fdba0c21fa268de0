#include "copy.h"

#include <cstring>
#include <stdexcept>

#include "dispatch.h"
#include "strided_loop.h"

namespace neuron::kernels {

namespace {

template <typename To, typename From>
void convert_rows(const LoopPlan<2>& plan) {
  for_each_row(plan, [](std::array<char*, 2> p, int64_t n, const std::array<int64_t, 2>& s) {
    char* d = p[0];
    const char* src = p[1];
    if (s[0] == static_cast<int64_t>(sizeof(To)) && s[1] == static_cast<int64_t>(sizeof(From))) {
      To* dd = reinterpret_cast<To*>(d);
      const From* ss = reinterpret_cast<const From*>(src);
      for (int64_t i = 0; i < n; ++i) dd[i] = convert<To>(ss[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) {
        From v;
        std::memcpy(&v, src + i * s[1], sizeof(From));
        const To o = convert<To>(v);
        std::memcpy(d + i * s[0], &o, sizeof(To));
      }
    }
  });
}

template <size_t Size>
void byte_rows(const LoopPlan<2>& plan) {
  for_each_row(plan, [](std::array<char*, 2> p, int64_t n, const std::array<int64_t, 2>& s) {
    if (s[0] == static_cast<int64_t>(Size) && s[1] == static_cast<int64_t>(Size)) {
      std::memcpy(p[0], p[1], static_cast<size_t>(n) * Size);
    } else {
      for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], p[1] + i * s[1], Size);
    }
  }, /*grain=*/1 << 18);
}

void check_shapes(const TensorRef& dst, const TensorRef& src) {
  if (dst.ndim != src.ndim) throw std::invalid_argument("neuron copy: rank mismatch");
  for (int i = 0; i < dst.ndim; ++i)
    if (dst.sizes[i] != src.sizes[i]) throw std::invalid_argument("neuron copy: shape mismatch");
}

}  // namespace

void copy(const TensorRef& dst, const TensorRef& src) {
  check_shapes(dst, src);
  const LoopPlan<2> plan = make_plan<2>({&dst, &src});
  if (dst.dtype == src.dtype) {
    switch (element_size(dst.dtype)) {
      case 1: return byte_rows<1>(plan);
      case 2: return byte_rows<2>(plan);
      case 4: return byte_rows<4>(plan);
      case 8: return byte_rows<8>(plan);
      case 16: return byte_rows<16>(plan);
      default: throw std::invalid_argument("neuron copy: bad element size");
    }
  }
  dispatch_all(dst.dtype, [&](auto to) {
    dispatch_all(src.dtype, [&](auto from) {
      convert_rows<decltype(to), decltype(from)>(plan);
    });
  });
}

void fill(const TensorRef& dst, const void* value) {
  const LoopPlan<1> plan = make_plan<1>({&dst});
  const size_t es = element_size(dst.dtype);
  unsigned char pattern[16];
  std::memcpy(pattern, value, es);
  bool all_zero = true;
  for (size_t i = 0; i < es; ++i) all_zero &= pattern[i] == 0;
  for_each_row(plan, [&](std::array<char*, 1> p, int64_t n, const std::array<int64_t, 1>& s) {
    if (s[0] == static_cast<int64_t>(es)) {
      if (all_zero) {
        std::memset(p[0], 0, static_cast<size_t>(n) * es);
        return;
      }
      switch (es) {
        case 1: std::memset(p[0], pattern[0], static_cast<size_t>(n)); return;
        case 2: { uint16_t v; std::memcpy(&v, pattern, 2); auto* d = reinterpret_cast<uint16_t*>(p[0]); for (int64_t i = 0; i < n; ++i) d[i] = v; return; }
        case 4: { uint32_t v; std::memcpy(&v, pattern, 4); auto* d = reinterpret_cast<uint32_t*>(p[0]); for (int64_t i = 0; i < n; ++i) d[i] = v; return; }
        case 8: { uint64_t v; std::memcpy(&v, pattern, 8); auto* d = reinterpret_cast<uint64_t*>(p[0]); for (int64_t i = 0; i < n; ++i) d[i] = v; return; }
        default: break;
      }
    }
    for (int64_t i = 0; i < n; ++i) std::memcpy(p[0] + i * s[0], pattern, es);
  }, /*grain=*/1 << 18);
}

}  // namespace neuron::kernels
