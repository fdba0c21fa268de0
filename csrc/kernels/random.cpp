#include "random.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "convert.h"
#include "random_internal.h"
#include "runtime/thread_pool.h"
#include "simd.h"

namespace neuron::kernels {

// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint64_t counter) {
  return philox4x32_10({static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

namespace {

int mantissa_digits(DType t) {
  switch (t) {
    case DType::Float16:
      return 11;
    case DType::BFloat16:
      return 8;
    case DType::Float32:
      return 24;
    case DType::Float64:
      return 53;
    default:
      return 0;
  }
}

uint64_t int_max(DType t) {
  switch (t) {
    case DType::UInt8:
      return 255;
    case DType::Int8:
      return 127;
    case DType::Int16:
      return 32767;
    case DType::Int32:
      return 2147483647;
    case DType::Int64:
      return static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    case DType::UInt16:
      return 65535;
    case DType::UInt32:
      return 4294967295u;
    default:
      return 0;
  }
}

bool wide(DType t) { return t == DType::Int64 || t == DType::Float64 || t == DType::UInt64; }

GenSpec make_spec(RandOp op, const RandParams& p, DType out) {
  GenSpec g{op, 4, DType::Float32, p};
  switch (op) {
    case RandOp::Uniform:
    case RandOp::Normal:
    case RandOp::LogNormal:
      g.buf = out == DType::Float64 ? DType::Float64 : DType::Float32;
      g.V = out == DType::Float64 ? 2 : 4;
      break;
    case RandOp::Exponential:
    case RandOp::Geometric:
    case RandOp::Cauchy:
      g.buf = DType::Float64;
      g.V = out == DType::Float64 ? 2 : 4;
      break;
    case RandOp::Bernoulli:
    case RandOp::Dropout:
      g.buf = DType::Bool;
      g.threshold = static_cast<uint32_t>(std::ceil(std::clamp(p.a, 0.0, 1.0) * 16777216.0));
      break;
    case RandOp::RandomRange:
      g.buf = DType::Int64;
      g.base = static_cast<uint64_t>(p.ia);
      g.modulus = p.ib;
      g.V = (p.ib == 0 || p.ib > 0xffffffffull) ? 2 : 4;
      break;
    case RandOp::RandomDefault:
      g.V = wide(out) ? 2 : 4;
      if (out == DType::Bool) {
        g.buf = DType::Bool;
      } else {
        g.buf = DType::Int64;
        g.modulus = is_floating(out) ? (1ull << mantissa_digits(out)) + 1 : int_max(out) + 1;
      }
      break;
  }
  return g;
}

}  // namespace

int rand_values_per_block(RandOp op, DType dtype) { return make_spec(op, RandParams{}, dtype).V; }

uint64_t rand_blocks(RandOp op, DType dtype, int64_t n) {
  // Reserve for 2 values per block when the range may need 64-bit draws.
  const int v = op == RandOp::RandomRange ? 2 : rand_values_per_block(op, dtype);
  return static_cast<uint64_t>((n + v - 1) / v);
}

bool rand_supports(RandOp op, DType dtype) {
  if (dtype == DType::Undefined || is_complex(dtype) || dtype == DType::Float8_e4m3fn ||
      dtype == DType::Float8_e5m2)
    return false;
  switch (op) {
    case RandOp::Uniform:
    case RandOp::Normal:
    case RandOp::Exponential:
    case RandOp::Cauchy:
    case RandOp::LogNormal:
    case RandOp::Dropout:
      return is_floating(dtype);
    default:
      return true;
  }
}

void random_fill(RandOp op, const RandParams& p, uint64_t seed, uint64_t offset,
                 const TensorRef& out, const TensorRef* prob, const TensorRef* in,
                 const TensorRef* mask) {
  if (!rand_supports(op, out.dtype))
    throw std::invalid_argument("neuron random: unsupported dtype " +
                                std::string(dtype_name(out.dtype)));
  auto same_shape = [&](const TensorRef* r) {
    if (!r) return;
    bool ok = r->ndim == out.ndim;
    for (int d = 0; ok && d < out.ndim; ++d) ok = r->sizes[d] == out.sizes[d];
    if (!ok) throw std::invalid_argument("neuron random: operand shapes differ");
  };
  same_shape(prob);
  same_shape(in);
  same_shape(mask);
  if (op == RandOp::Dropout && !in)
    throw std::invalid_argument("neuron random: dropout needs an input");
  const int64_t n = out.numel();
  if (n == 0) return;

  const GenSpec g = make_spec(op, p, out.dtype);
  const auto gen = simd_level() == SimdLevel::Avx2 ? &avx2::gen_values : &portable::gen_values;
  const int64_t bes = static_cast<int64_t>(element_size(g.buf));
  const ConvertFn store = find_convert(out.dtype, g.buf);
  const ConvertFn load_prob = prob ? find_convert(DType::Float64, prob->dtype) : nullptr;
  const DType xdt = in && in->dtype == DType::Float64 ? DType::Float64 : DType::Float32;
  const ConvertFn load_in = in ? find_convert(xdt, in->dtype) : nullptr;
  const ConvertFn store_in = in ? find_convert(out.dtype, xdt) : nullptr;
  const ConvertFn store_mask = mask ? find_convert(mask->dtype, DType::Bool) : nullptr;
  if (!store || (prob && !load_prob) || (in && (!load_in || !store_in)) || (mask && !store_mask))
    throw std::invalid_argument("neuron random: unsupported operand dtype");

  // Logical row-major traversal: rows along the last dim.
  const int nd = out.ndim;
  const int64_t row_len = nd ? out.sizes[nd - 1] : 1;
  auto inner_stride = [&](const TensorRef* r) {
    return r && nd ? r->strides[nd - 1] * static_cast<int64_t>(element_size(r->dtype)) : 0;
  };
  auto row_base = [&](const TensorRef* r, int64_t row) -> char* {
    int64_t off = 0;
    for (int d = nd - 2; d >= 0; --d) {
      off += (row % r->sizes[d]) * r->strides[d];
      row /= r->sizes[d];
    }
    return static_cast<char*>(r->data) + off * static_cast<int64_t>(element_size(r->dtype));
  };

  rt::parallel_for(0, n, 16384, [&](int64_t b, int64_t e) {
    alignas(64) unsigned char vals[kGenChunk * 8];
    alignas(64) double pv[kGenChunk];
    alignas(64) double x[kGenChunk];
    int64_t i = b;
    while (i < e) {
      const int64_t row = i / row_len, col = i % row_len;
      const int64_t m = std::min({kGenChunk, row_len - col, e - i});
      if (prob)
        load_prob(pv, 8, row_base(prob, row) + col * inner_stride(prob), inner_stride(prob), m);
      gen(g, seed, offset, static_cast<uint64_t>(i), m, vals, prob ? pv : nullptr);
      char* dst = row_base(&out, row) + col * inner_stride(&out);
      if (op == RandOp::Dropout) {
        const bool* keep = reinterpret_cast<const bool*>(vals);
        load_in(x, static_cast<int64_t>(element_size(xdt)),
                row_base(in, row) + col * inner_stride(in), inner_stride(in), m);
        if (xdt == DType::Float64) {
          for (int64_t k = 0; k < m; ++k) x[k] = keep[k] ? x[k] * p.b : 0.0;
        } else {
          float* xf = reinterpret_cast<float*>(x);
          const float scale = static_cast<float>(p.b);
          for (int64_t k = 0; k < m; ++k) xf[k] = keep[k] ? xf[k] * scale : 0.0f;
        }
        store_in(dst, inner_stride(&out), x, static_cast<int64_t>(element_size(xdt)), m);
        if (mask)
          store_mask(row_base(mask, row) + col * inner_stride(mask), inner_stride(mask), keep, 1,
                     m);
      } else {
        store(dst, inner_stride(&out), vals, bes, m);
      }
      i += m;
    }
  });
}

void randperm(int64_t n, uint64_t seed, uint64_t offset, const TensorRef& out) {
  if (out.ndim != 1 || out.sizes[0] != n)
    throw std::invalid_argument("neuron randperm: output must have n elements");
  if (n == 0) return;
  const ConvertFn store = find_convert(out.dtype, DType::Int64);
  if (!store) throw std::invalid_argument("neuron randperm: unsupported dtype");
  std::unique_ptr<int64_t[]> perm(new int64_t[static_cast<size_t>(n)]);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  // Fisher-Yates from the top: swap k (for position n-1-k) uses 64-bit value k.
  std::array<uint32_t, 4> w{};
  for (int64_t k = 0; k < n - 1; ++k) {
    const int64_t pos = n - 1 - k;
    if (k % 2 == 0) w = philox4x32(seed, offset + static_cast<uint64_t>(k) / 2);
    const uint64_t lane = (static_cast<uint64_t>(k) % 2) * 2;
    const uint64_t r = static_cast<uint64_t>(w[lane]) | (static_cast<uint64_t>(w[lane + 1]) << 32);
    const int64_t j = static_cast<int64_t>(r % static_cast<uint64_t>(pos + 1));
    std::swap(perm[pos], perm[j]);
  }
  store(out.data, out.strides[0] * static_cast<int64_t>(element_size(out.dtype)), perm.get(), 8, n);
}

}  // namespace neuron::kernels
