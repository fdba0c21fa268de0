#include "gemv.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "dispatch.h"
#include "convert.h"
#include "runtime/thread_pool.h"
#include "simd/vec_avx2.h"

namespace neuron::kernels {
namespace {

constexpr int64_t kDotTile = 16;   // columns per task unit in the dot form
constexpr int64_t kAxpyTile = 64;  // columns per task unit in the axpy form

// ---- dot form: out[r][c] = sum_k a[r][k] * b[c * ldb + k] ----

template <typename T, int R, int C>
NEURON_AVX2 void dot_avx2(const float* a, int64_t lda, const T* b, int64_t ldb, int64_t k,
                          float* out, int64_t ldo) {
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    __m256 bv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) bv[c] = avx2::load8(b + c * ldb + kk);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_loadu_ps(a + r * lda + kk);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(av, bv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      float s = avx2::hsum(acc[r][c]);
      for (int64_t t = kk; t < k; ++t) s += a[r * lda + t] * static_cast<float>(b[c * ldb + t]);
      out[r * ldo + c] = s;
    }
}

template <typename T>
NEURON_AVX2 void dot_tile_avx2(const float* a, int64_t m, int64_t k, const T* b, int64_t ldb,
                               int64_t ncols, float* out) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) {
    int64_t c = 0;
    for (; c + 2 <= ncols; c += 2)
      dot_avx2<T, 4, 2>(a + r * k, k, b + c * ldb, ldb, k, out + r * ncols + c, ncols);
    for (; c < ncols; ++c)
      dot_avx2<T, 4, 1>(a + r * k, k, b + c * ldb, ldb, k, out + r * ncols + c, ncols);
  }
  for (; r + 2 <= m; r += 2) {
    int64_t c = 0;
    for (; c + 4 <= ncols; c += 4)
      dot_avx2<T, 2, 4>(a + r * k, k, b + c * ldb, ldb, k, out + r * ncols + c, ncols);
    for (; c < ncols; ++c)
      dot_avx2<T, 2, 1>(a + r * k, k, b + c * ldb, ldb, k, out + r * ncols + c, ncols);
  }
  for (; r < m; ++r) {
    int64_t c = 0;
    for (; c + 4 <= ncols; c += 4)
      dot_avx2<T, 1, 4>(a + r * k, k, b + c * ldb, ldb, k, out + r * ncols + c, ncols);
    for (; c < ncols; ++c)
      dot_avx2<T, 1, 1>(a + r * k, k, b + c * ldb, ldb, k, out + r * ncols + c, ncols);
  }
}

// m == 1 with bf16 weights (the decode-time x @ W^T): 16 weights per 256-bit load, widened to
// fp32 in place - the even elements by a left shift, the odd ones by masking the low half - so no
// cross-lane conversion is needed. `a` holds each full 16-block as its 8 even elements then its 8
// odd ones (the tail k % 16 in order).
// One column (row of W) at a time, two 16-blocks per step: each thread reads W strictly
// sequentially, which is what the hardware prefetchers stream best from DRAM.
NEURON_AVX2 float dot_bf16_row_avx2(const float* a, const bf16* b, int64_t k) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  int64_t kk = 0;
  for (; kk + 32 <= k; kk += 32) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + kk));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + kk + 16));
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + kk), _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16)), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + kk + 8), _mm256_castsi256_ps(_mm256_and_si256(w0, hi)), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + kk + 16), _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16)), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + kk + 24), _mm256_castsi256_ps(_mm256_and_si256(w1, hi)), acc3);
  }
  for (; kk + 16 <= k; kk += 16) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + kk));
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + kk), _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16)), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + kk + 8), _mm256_castsi256_ps(_mm256_and_si256(w0, hi)), acc1);
  }
  float s = avx2::hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; kk < k; ++kk) s += a[kk] * static_cast<float>(b[kk]);
  return s;
}

NEURON_AVX2 void dot_tile_bf16_m1_avx2(const float* a, int64_t k, const bf16* b, int64_t ldb,
                                       int64_t ncols, float* out) {
  for (int64_t c = 0; c < ncols; ++c) out[c] = dot_bf16_row_avx2(a, b + c * ldb, k);
}

// a[0, k) rearranged for dot_bf16_row_avx2: each full 16-block as evens then odds.
void split_even_odd16(const float* a, int64_t k, float* out) {
  int64_t kk = 0;
  for (; kk + 16 <= k; kk += 16)
    for (int i = 0; i < 8; ++i) {
      out[kk + i] = a[kk + 2 * i];
      out[kk + 8 + i] = a[kk + 2 * i + 1];
    }
  for (; kk < k; ++kk) out[kk] = a[kk];
}

template <typename T>
void dot_tile_portable(const float* a, int64_t m, int64_t k, const T* b, int64_t ldb, int64_t ncols,
                       float* out) {
  for (int64_t c = 0; c < ncols; ++c) {
    const T* bc = b + c * ldb;
    for (int64_t r = 0; r < m; ++r) {
      const float* ar = a + r * k;
      float s = 0.0f;
      for (int64_t t = 0; t < k; ++t) s += ar[t] * static_cast<float>(bc[t]);
      out[r * ncols + c] = s;
    }
  }
}

// ---- axpy form: out[r][j] = sum_k a[r][k] * b[k * ldb + j] ----

template <typename T, int R, int V>
NEURON_AVX2 void axpy_avx2(const float* a, int64_t lda, const T* b, int64_t ldb, int64_t k,
                           float* out, int64_t ldo) {
  __m256 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t kk = 0; kk < k; ++kk) {
    const T* brow = b + kk * ldb;
    __m256 bv[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) bv[v] = avx2::load8(brow + 8 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * lda + kk);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(out + r * ldo + 8 * v, acc[r][v]);
}

template <typename T>
void axpy_columns_portable(const float* a, int64_t m, int64_t k, const T* b, int64_t ldb,
                           int64_t ncols, float* out, int64_t ldo) {
  for (int64_t r = 0; r < m; ++r) std::fill(out + r * ldo, out + r * ldo + ncols, 0.0f);
  for (int64_t kk = 0; kk < k; ++kk) {
    const T* brow = b + kk * ldb;
    for (int64_t r = 0; r < m; ++r) {
      const float av = a[r * k + kk];
      float* o = out + r * ldo;
      for (int64_t j = 0; j < ncols; ++j) o[j] += av * static_cast<float>(brow[j]);
    }
  }
}

template <typename T>
NEURON_AVX2 void axpy_tile_avx2(const float* a, int64_t m, int64_t k, const T* b, int64_t ldb,
                                int64_t ncols, float* out) {
  int64_t j = 0;
  for (; j + 64 <= ncols; j += 64) {
    int64_t r = 0;
    for (; r + 2 <= m; r += 2) {
      axpy_avx2<T, 2, 4>(a + r * k, k, b + j, ldb, k, out + r * ncols + j, ncols);
      axpy_avx2<T, 2, 4>(a + r * k, k, b + j + 32, ldb, k, out + r * ncols + j + 32, ncols);
    }
    for (; r < m; ++r) axpy_avx2<T, 1, 8>(a + r * k, k, b + j, ldb, k, out + r * ncols + j, ncols);
  }
  for (; j + 8 <= ncols; j += 8)
    for (int64_t r = 0; r < m; ++r)
      axpy_avx2<T, 1, 1>(a + r * k, k, b + j, ldb, k, out + r * ncols + j, ncols);
  if (j < ncols) axpy_columns_portable(a, m, k, b + j, ldb, ncols - j, out + j, ncols);
}

// ---- driver ----

template <typename Out>
void store_tile(const GemmProblem& p, int64_t bi, int64_t j0, int64_t ncols, const float* acc) {
  Out* c = static_cast<Out*>(p.c) + bi * p.c_bs;
  const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
  for (int64_t i = 0; i < p.m; ++i) {
    const float* src = acc + i * ncols;
    Out* row = c + i * p.c_rs + j0 * p.c_cs;
    if (p.c_cs == 1 && alpha == 1.0f && beta == 0.0f) {
      row_from_f32(src, row, p.out_dtype, ncols);
      continue;
    }
    for (int64_t j = 0; j < ncols; ++j) {
      float v = alpha * src[j];
      if (beta != 0.0f) v += beta * static_cast<float>(row[j * p.c_cs]);
      row[j * p.c_cs] = Out(v);
    }
  }
}

template <typename T>
void run(const GemmProblem& p, SimdLevel isa) {
  const bool dot = p.b_rs == 1;
  // A as dense fp32 rows: it is small (m rows), and the kernels then need one layout only.
  std::vector<float> apack(static_cast<size_t>(p.batch * p.m * p.k));
  for (int64_t bi = 0; bi < p.batch; ++bi)
    for (int64_t i = 0; i < p.m; ++i)
      strided_to_f32(static_cast<const T*>(p.a) + bi * p.a_bs + i * p.a_rs, p.in_dtype, p.a_cs,
                     apack.data() + (bi * p.m + i) * p.k, p.k);

  // Decode-time bf16 GEMV: the even/odd form of a (see dot_bf16_row_avx2).
  const bool bf16_m1 = std::is_same_v<T, bf16> && dot && p.m == 1 && isa == SimdLevel::Avx2;
  if (bf16_m1) {
    std::vector<float> split(apack.size());
    for (int64_t bi = 0; bi < p.batch; ++bi)
      split_even_odd16(apack.data() + bi * p.k, p.k, split.data() + bi * p.k);
    apack.swap(split);
  }
  const int64_t tile = dot ? kDotTile : kAxpyTile;
  const int64_t tiles_per_batch = (p.n + tile - 1) / tile;
  const int64_t total = p.batch * tiles_per_batch;
  // Enough columns per thread that a chunk streams at least ~64 KiB of B.
  const int64_t grain =
      std::max<int64_t>(1, (64 * 1024) / std::max<int64_t>(1, tile * p.k * int64_t(sizeof(T))));
  rt::parallel_for(0, total, grain, [&](int64_t t0, int64_t t1) {
    std::vector<float> acc(static_cast<size_t>(p.m * tile));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bi = t / tiles_per_batch;
      const int64_t j0 = (t % tiles_per_batch) * tile;
      const int64_t nc = std::min(tile, p.n - j0);
      const float* a = apack.data() + bi * p.m * p.k;
      const T* b = static_cast<const T*>(p.b) + bi * p.b_bs;
      if (dot) {
        const T* bt = b + j0 * p.b_cs;
        if (bf16_m1) {
          if constexpr (std::is_same_v<T, bf16>) dot_tile_bf16_m1_avx2(a, p.k, bt, p.b_cs, nc, acc.data());
        } else if (isa == SimdLevel::Avx2) {
          dot_tile_avx2(a, p.m, p.k, bt, p.b_cs, nc, acc.data());
        } else {
          dot_tile_portable(a, p.m, p.k, bt, p.b_cs, nc, acc.data());
        }
      } else {
        const T* bt = b + j0;
        if (isa == SimdLevel::Avx2)
          axpy_tile_avx2(a, p.m, p.k, bt, p.b_rs, nc, acc.data());
        else
          axpy_columns_portable(a, p.m, p.k, bt, p.b_rs, nc, acc.data(), nc);
      }
      if (p.out_dtype == DType::Float32)
        store_tile<float>(p, bi, j0, nc, acc.data());
      else if (p.out_dtype == DType::BFloat16)
        store_tile<bf16>(p, bi, j0, nc, acc.data());
      else
        store_tile<f16>(p, bi, j0, nc, acc.data());
    }
  });
}

}  // namespace

bool gemm_small_m_supported(const GemmProblem& p) {
  const bool in_ok =
      p.in_dtype == DType::Float32 || p.in_dtype == DType::BFloat16 || p.in_dtype == DType::Float16;
  const bool out_ok = p.out_dtype == p.in_dtype || p.out_dtype == DType::Float32;
  return in_ok && out_ok && p.k > 0 && (p.b_rs == 1 || p.b_cs == 1);
}

void gemm_small_m(const GemmProblem& p, SimdLevel isa) {
  if (!gemm_small_m_supported(p)) throw std::invalid_argument("gemm_small_m: unsupported problem");
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  switch (p.in_dtype) {
    case DType::Float32:
      return run<float>(p, isa);
    case DType::BFloat16:
      return run<bf16>(p, isa);
    case DType::Float16:
      return run<f16>(p, isa);
    default:
      break;
  }
}

}  // namespace neuron::kernels
