#include "copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "dispatch.h"
#include "runtime/thread_pool.h"
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

// A copy that transposes (dst has unit stride along its last dim, src along another one, e.g.
// `w.t().contiguous()` or a compiled graph materialising a transposed weight): row by row it
// would read src one element per cache line. Blocks of kTile x kTile elements keep both sides
// in L1 (a 4 MB fp32 [1024, 1024] transpose: ~8 ms -> ~1 ms on this host). Same dtype only.
constexpr int64_t kTile = 32;

template <typename T>
void transpose_tiles(const TensorRef& dst, const TensorRef& src, int li, int lj) {
  const int nd = dst.ndim;
  int other[kMaxDims];
  int n_other = 0;
  int64_t outer = 1;
  for (int d = 0; d < nd; ++d)
    if (d != li && d != lj) {
      other[n_other++] = d;
      outer *= dst.sizes[d];
    }
  const int64_t ni = dst.sizes[li], nj = dst.sizes[lj];
  const int64_t jblocks = (nj + kTile - 1) / kTile;
  const int64_t dsj = dst.strides[lj], ssi = src.strides[li];
  T* const dbase = static_cast<T*>(dst.data);
  const T* const sbase = static_cast<const T*>(src.data);
  rt::parallel_for(0, outer * jblocks, 1, [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      int64_t o = w / jblocks, doff = 0, soff = 0;
      for (int k = n_other - 1; k >= 0; --k) {
        const int d = other[k];
        const int64_t idx = o % dst.sizes[d];
        o /= dst.sizes[d];
        doff += idx * dst.strides[d];
        soff += idx * src.strides[d];
      }
      const int64_t j0 = (w % jblocks) * kTile, j1 = std::min(nj, j0 + kTile);
      // 8 x 8 micro tiles through a local buffer: 8 source lines read, then 8 destination
      // lines written (strides of 4 KB map every line of a tile to one L1 set; 8 at a time
      // stay within its ways).
      for (int64_t i0 = 0; i0 < ni; i0 += 8) {
        const int64_t i1 = std::min(ni, i0 + 8);
        for (int64_t jj = j0; jj < j1; jj += 8) {
          const int64_t jn = std::min<int64_t>(8, j1 - jj);
          T tile[8][8];
          for (int64_t i = i0; i < i1; ++i) {
            const T* s = sbase + soff + i * ssi + jj;
            for (int64_t j = 0; j < jn; ++j) tile[j][i - i0] = s[j];
          }
          for (int64_t j = 0; j < jn; ++j) {
            T* d = dbase + doff + (jj + j) * dsj + i0;
            for (int64_t i = 0; i < i1 - i0; ++i) d[i] = tile[j][i];
          }
        }
      }
    }
  });
}

// Takes the copy when it is a transpose worth tiling; false leaves it to the row loops.
bool copy_transposed(const TensorRef& dst, const TensorRef& src) {
  if (dst.dtype != src.dtype || dst.ndim < 2 || dst.numel() < 4096) return false;
  const int li = dst.ndim - 1;
  if (dst.strides[li] != 1 || src.strides[li] == 1 || src.strides[li] == 0 || dst.sizes[li] < kTile) return false;
  int lj = -1;
  for (int d = 0; d < li; ++d)
    if (src.strides[d] == 1 && dst.sizes[d] >= kTile) lj = d;
  if (lj < 0 || dst.strides[lj] == 0) return false;
  switch (element_size(dst.dtype)) {
    case 2: transpose_tiles<uint16_t>(dst, src, li, lj); return true;
    case 4: transpose_tiles<uint32_t>(dst, src, li, lj); return true;
    case 8: transpose_tiles<uint64_t>(dst, src, li, lj); return true;
    default: return false;
  }
}

// Orders the dims of both views by the destination's strides (largest outermost), so that the
// row loops walk dst in memory order: two column-major views (strides [1, n]) copy as one
// contiguous block instead of one element per cache line. Size-1 dims keep their place.
void order_by_dst(TensorRef& dst, TensorRef& src) {
  int pos[kMaxDims], dims[kMaxDims], n = 0;
  for (int i = 0; i < dst.ndim; ++i)
    if (dst.sizes[i] != 1) pos[n] = dims[n] = i, ++n;
  std::stable_sort(dims, dims + n, [&](int a, int b) { return dst.strides[a] > dst.strides[b]; });
  const TensorRef d0 = dst, s0 = src;
  for (int k = 0; k < n; ++k) {
    dst.sizes[pos[k]] = d0.sizes[dims[k]];
    dst.strides[pos[k]] = d0.strides[dims[k]];
    src.sizes[pos[k]] = s0.sizes[dims[k]];
    src.strides[pos[k]] = s0.strides[dims[k]];
  }
}

void check_shapes(const TensorRef& dst, const TensorRef& src) {
  if (dst.ndim != src.ndim) throw std::invalid_argument("neuron copy: rank mismatch");
  for (int i = 0; i < dst.ndim; ++i)
    if (dst.sizes[i] != src.sizes[i]) throw std::invalid_argument("neuron copy: shape mismatch");
}

}  // namespace

void copy(const TensorRef& dst_in, const TensorRef& src_in) {
  check_shapes(dst_in, src_in);
  TensorRef dst = dst_in, src = src_in;
  order_by_dst(dst, src);
  if (copy_transposed(dst, src)) return;
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
