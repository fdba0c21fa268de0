#include "gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "blas.h"
#include "simd.h"
#include "dispatch.h"
#include "gemv.h"
#include "convert.h"
#include "runtime/thread_pool.h"

namespace neuron::kernels {
namespace {

bool is_blas_float(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::BFloat16 || t == DType::Float16;
}
bool is_int(DType t) {
  return t == DType::UInt8 || t == DType::Int8 || t == DType::Int16 || t == DType::Int32 ||
         t == DType::Int64 || t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64;
}

void validate(const GemmProblem& p) {
  if (p.batch < 0 || p.m < 0 || p.n < 0 || p.k < 0)
    throw std::invalid_argument("gemm: negative size");
  if (!gemm_supports(p.in_dtype, p.out_dtype)) {
    throw std::invalid_argument(std::string("gemm: unsupported dtypes ") +
                                std::string(dtype_name(p.in_dtype)) + " -> " +
                                std::string(dtype_name(p.out_dtype)));
  }
}

// ---- portable kernel ----

template <typename In, typename Acc, typename Out>
void reference_typed(const GemmProblem& p) {
  const int64_t total_rows = p.batch * p.m;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.n * p.k / 64 + 1));
  rt::parallel_for(0, total_rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<Acc> acc(static_cast<size_t>(p.n));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t bi = r / p.m, i = r % p.m;
      std::fill(acc.begin(), acc.end(), Acc(0));
      const In* a = static_cast<const In*>(p.a) + bi * p.a_bs + i * p.a_rs;
      const In* b = static_cast<const In*>(p.b) + bi * p.b_bs;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const Acc av = static_cast<Acc>(a[kk * p.a_cs]);
        const In* brow = b + kk * p.b_rs;
        for (int64_t j = 0; j < p.n; ++j) acc[j] += av * static_cast<Acc>(brow[j * p.b_cs]);
      }
      Out* c = static_cast<Out*>(p.c) + bi * p.c_bs + i * p.c_rs;
      for (int64_t j = 0; j < p.n; ++j) {
        Acc v = acc[j];
        if (p.alpha != 1.0) v = static_cast<Acc>(static_cast<Acc>(p.alpha) * v);
        if (p.beta != 0.0)
          v += static_cast<Acc>(static_cast<Acc>(p.beta) * static_cast<Acc>(c[j * p.c_cs]));
        c[j * p.c_cs] = convert<Out>(v);
      }
    }
  });
}

// ---- BLAS ----

// A row-major [rows, cols] matrix with element strides (rs, cs) seen as a Fortran operand
// op(X) of the same shape: 'N' when it is column-major (rs == 1), 'T' when row-major (cs == 1).
struct FortranOperand {
  char trans = 'N';
  int ld = 0;
  bool ok = false;
};

FortranOperand as_fortran(int64_t rs, int64_t cs, int64_t rows, int64_t cols) {
  constexpr int64_t lim = std::numeric_limits<int>::max();
  const int64_t r1 = std::max<int64_t>(rows, 1), c1 = std::max<int64_t>(cols, 1);
  if (rows == 1 && cs == 1) return {'T', static_cast<int>(c1), true};  // a single row: any rs
  if (cols == 1 && rs == 1) return {'N', static_cast<int>(r1), true};  // a single column: any cs
  if (rs == 1 && cs >= r1 && cs <= lim) return {'N', static_cast<int>(cs), true};
  if (cs == 1 && rs >= c1 && rs <= lim) return {'T', static_cast<int>(rs), true};
  if (rows == 1 && cs >= 1 && cs <= lim) return {'N', static_cast<int>(cs), true};
  if (cols == 1 && rs >= 1 && rs <= lim) return {'T', static_cast<int>(rs), true};
  return {};
}

// Copies a strided [rows, cols] matrix into dense row-major storage.
template <typename T>
void pack(const T* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs, T* dst) {
  rt::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
                   [&](int64_t r0, int64_t r1) {
                     for (int64_t i = r0; i < r1; ++i) {
                       const T* s = src + i * rs;
                       T* d = dst + i * cols;
                       if (cs == 1) {
                         std::memcpy(d, s, static_cast<size_t>(cols) * sizeof(T));
                       } else {
                         for (int64_t j = 0; j < cols; ++j) d[j] = s[j * cs];
                       }
                     }
                   });
}

// An operand ready for BLAS: the original memory, or a dense copy.
template <typename T>
struct BlasMatrix {
  const T* ptr;
  FortranOperand f;
  std::vector<T> packed;

  BlasMatrix(const T* p, int64_t rs, int64_t cs, int64_t rows, int64_t cols)
      : ptr(p), f(as_fortran(rs, cs, rows, cols)) {
    if (!f.ok) {
      packed.resize(static_cast<size_t>(rows * cols));
      pack(p, rows, cols, rs, cs, packed.data());
      ptr = packed.data();
      f = as_fortran(cols, 1, rows, cols);
    }
  }
};

// The BLAS entry for storage type T, computing X = alpha * op(P) op(Q) + beta * X with X
// column-major [xm, xn].
template <typename T>
struct BlasCall;
template <>
struct BlasCall<float> {
  using Acc = float;
  static bool available() { return blas::functions().sgemm != nullptr; }
  static void call(char tp, char tq, int xm, int xn, int k, float alpha, const float* P, int ldp,
                   const float* Q, int ldq, float beta, float* X, int ldx) {
    blas::functions().sgemm(&tp, &tq, &xm, &xn, &k, &alpha, P, &ldp, Q, &ldq, &beta, X, &ldx);
  }
};
template <>
struct BlasCall<double> {
  using Acc = double;
  static bool available() { return blas::functions().dgemm != nullptr; }
  static void call(char tp, char tq, int xm, int xn, int k, double alpha, const double* P, int ldp,
                   const double* Q, int ldq, double beta, double* X, int ldx) {
    blas::functions().dgemm(&tp, &tq, &xm, &xn, &k, &alpha, P, &ldp, Q, &ldq, &beta, X, &ldx);
  }
};
template <typename T16, bool IsBf16>
struct BlasCall16 {
  using Acc = float;
  static blas::gemm16_fn fn() {
    return IsBf16 ? blas::functions().gemm_bf16 : blas::functions().gemm_f16;
  }
  static bool available() { return fn() != nullptr; }
  static void call(char tp, char tq, int xm, int xn, int k, float alpha, const T16* P, int ldp,
                   const T16* Q, int ldq, float beta, float* X, int ldx) {
    fn()(&tp, &tq, &xm, &xn, &k, &alpha, reinterpret_cast<const uint16_t*>(P), &ldp,
         reinterpret_cast<const uint16_t*>(Q), &ldq, &beta, X, &ldx);
  }
};
template <>
struct BlasCall<bf16> : BlasCall16<bf16, true> {};
template <>
struct BlasCall<f16> : BlasCall16<f16, false> {};

// out = alpha * buf + beta * out, converting from the accumulation type.
template <typename Out, typename Acc>
void store_output(const GemmProblem& p, int64_t bi, const Acc* buf) {
  Out* base = static_cast<Out*>(p.c) + bi * p.c_bs;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(p.n, 1));
  rt::parallel_for(0, p.m, grain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const Acc* src = buf + i * p.n;
      Out* dst = base + i * p.c_rs;
      if constexpr (std::is_same_v<Acc, float>) {
        if (p.alpha == 1.0 && p.beta == 0.0 && p.c_cs == 1) {
          row_from_f32(src, dst, p.out_dtype, p.n);
          continue;
        }
      }
      for (int64_t j = 0; j < p.n; ++j) {
        Acc v = static_cast<Acc>(p.alpha) * src[j];
        if (p.beta != 0.0) v += static_cast<Acc>(p.beta) * static_cast<Acc>(dst[j * p.c_cs]);
        dst[j * p.c_cs] = convert<Out>(v);
      }
    }
  });
}

template <typename T>
void blas_one(const GemmProblem& p, int64_t bi) {
  using Call = BlasCall<T>;
  using Acc = typename Call::Acc;
  const T* a = static_cast<const T*>(p.a) + bi * p.a_bs;
  const T* b = static_cast<const T*>(p.b) + bi * p.b_bs;
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  constexpr bool direct_dtype = std::is_same_v<T, Acc>;
  const bool direct = direct_dtype && p.out_dtype == p.in_dtype;
  constexpr int64_t lim = std::numeric_limits<int>::max();
  if (direct && p.c_cs == 1 && p.c_rs >= std::max<int64_t>(p.n, 1) && p.c_rs <= lim) {
    // C^T (column-major [n, m], ld c_rs) = B^T A^T
    BlasMatrix<T> P(b, p.b_cs, p.b_rs, p.n, p.k), Q(a, p.a_cs, p.a_rs, p.k, p.m);
    Acc* c = reinterpret_cast<Acc*>(static_cast<T*>(p.c) + bi * p.c_bs);
    Call::call(P.f.trans, Q.f.trans, n, m, k, static_cast<Acc>(p.alpha), P.ptr, P.f.ld, Q.ptr,
               Q.f.ld, static_cast<Acc>(p.beta), c, static_cast<int>(p.c_rs));
    return;
  }
  if (direct && p.c_rs == 1 && p.c_cs >= std::max<int64_t>(p.m, 1) && p.c_cs <= lim) {
    // C (column-major [m, n], ld c_cs) = A B
    BlasMatrix<T> P(a, p.a_rs, p.a_cs, p.m, p.k), Q(b, p.b_rs, p.b_cs, p.k, p.n);
    Acc* c = reinterpret_cast<Acc*>(static_cast<T*>(p.c) + bi * p.c_bs);
    Call::call(P.f.trans, Q.f.trans, m, n, k, static_cast<Acc>(p.alpha), P.ptr, P.f.ld, Q.ptr,
               Q.f.ld, static_cast<Acc>(p.beta), c, static_cast<int>(p.c_cs));
    return;
  }
  // Accumulate into a dense row-major buffer, then scale, add and convert into C.
  // Uninitialised: BLAS writes every element with beta = 0 (no memset of a large temporary).
  std::unique_ptr<Acc[]> buf(new Acc[static_cast<size_t>(p.m * p.n)]);
  BlasMatrix<T> P(b, p.b_cs, p.b_rs, p.n, p.k), Q(a, p.a_cs, p.a_rs, p.k, p.m);
  Call::call(P.f.trans, Q.f.trans, n, m, k, Acc(1), P.ptr, P.f.ld, Q.ptr, Q.f.ld, Acc(0),
             buf.get(), std::max(n, 1));
  switch (p.out_dtype) {
    case DType::Float32:
      return store_output<float>(p, bi, buf.get());
    case DType::Float64:
      return store_output<double>(p, bi, buf.get());
    case DType::BFloat16:
      return store_output<bf16>(p, bi, buf.get());
    case DType::Float16:
      return store_output<f16>(p, bi, buf.get());
    default:
      throw std::invalid_argument("gemm: bad output dtype");
  }
}

// Runs `fn` with the BLAS limited to one thread on this thread (restored afterwards).
template <typename F>
void with_one_blas_thread(F&& fn) {
  const auto set = blas::functions().set_num_threads_local;
  if (!set) return fn();
  const int prev = set(1);
  try {
    fn();
  } catch (...) {
    set(prev);
    throw;
  }
  set(prev);
}

// Columns [j0, j1) (along_n) or rows [j0, j1) of C of product `bi`: the same problem on
// sub-matrices of B and C (or A and C).
GemmProblem part_of(const GemmProblem& p, bool along_n, int64_t j0, int64_t j1) {
  GemmProblem q = p;
  const size_t in_sz = element_size(p.in_dtype), out_sz = element_size(p.out_dtype);
  if (along_n) {
    q.n = j1 - j0;
    q.b = static_cast<const char*>(p.b) + static_cast<size_t>(j0 * p.b_cs) * in_sz;
    q.c = static_cast<char*>(p.c) + static_cast<size_t>(j0 * p.c_cs) * out_sz;
  } else {
    q.m = j1 - j0;
    q.a = static_cast<const char*>(p.a) + static_cast<size_t>(j0 * p.a_rs) * in_sz;
    q.c = static_cast<char*>(p.c) + static_cast<size_t>(j0 * p.c_rs) * out_sz;
  }
  return q;
}

// Per-part work (multiply-adds) below which splitting a product costs more than it gains
// (waking a helper is a few microseconds; 2^19 MACs take ~10 us on one core).
constexpr double kPartWork = 524288.0;

// True when the calling thread's BLAS thread count was set to one (by with_one_blas_thread or
// a caller's own MKL_Set_Num_Threads_Local).
bool blas_limited_to_one_thread() {
  const auto set = blas::functions().set_num_threads_local;
  if (!set) return false;
  const int prev = set(1);
  set(prev);
  return prev == 1;
}

template <typename T>
void blas_batched(const GemmProblem& p) {
  const double work =
      static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  const bool nested = rt::in_parallel_region();
  const int64_t threads = rt::num_threads();
  // The BLAS always runs one thread per call and the parts of the work go to the host pool:
  // MKL's OpenMP team would otherwise spin between calls (for milliseconds) on the cores the
  // pool's helpers need for the steps in between, and the two pools starve each other.
  // Products side by side when there are enough of them; otherwise each product split into
  // column (or row) blocks of C. The split depends on the shape and the host's thread count
  // only, and every part is one BLAS call on sub-matrices.
  // A caller that limited this thread's BLAS to one thread (NKI's tile GEMMs, which split
  // their tiles themselves) gets its products unsplit.
  int64_t parts = 1;
  if (!nested && threads > 1 && p.batch < threads && !blas_limited_to_one_thread()) {
    const double want = std::floor(work / kPartWork);
    parts = static_cast<int64_t>(std::clamp(want, 1.0, static_cast<double>(threads)));
  }
  const bool along_n = p.n >= p.m;
  const int64_t side = along_n ? p.n : p.m;
  // Near-equal blocks of whole 16-element groups (the BLAS kernels' vector width), so no part
  // is a sliver that the BLAS would compute another way.
  const int64_t block = std::max<int64_t>(16, ((side + parts - 1) / parts + 15) / 16 * 16);
  parts = (side + block - 1) / block;
  const int64_t tasks = p.batch * parts;
  rt::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    with_one_blas_thread([&] {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t bi = t / parts, j0 = (t % parts) * block;
        if (parts == 1) {
          blas_one<T>(p, bi);
        } else {
          blas_one<T>(part_of(p, along_n, j0, std::min(side, j0 + block)), bi);
        }
      }
    });
  });
}

bool fits_int(const GemmProblem& p) {
  const int64_t lim = std::numeric_limits<int>::max();
  return p.m <= lim && p.n <= lim && p.k <= lim;
}

bool blas_available(DType t) {
  switch (t) {
    case DType::Float32:
      return BlasCall<float>::available();
    case DType::Float64:
      return BlasCall<double>::available();
    case DType::BFloat16:
      return BlasCall<bf16>::available();
    case DType::Float16:
      return BlasCall<f16>::available();
    default:
      return false;
  }
}

// The same problem with the roles of A and B swapped: C^T = B^T A^T.
GemmProblem transposed(const GemmProblem& p) {
  GemmProblem q = p;
  q.m = p.n;
  q.n = p.m;
  q.a = p.b;
  q.a_bs = p.b_bs;
  q.a_rs = p.b_cs;
  q.a_cs = p.b_rs;
  q.b = p.a;
  q.b_bs = p.a_bs;
  q.b_rs = p.a_cs;
  q.b_cs = p.a_rs;
  q.c_rs = p.c_cs;
  q.c_cs = p.c_rs;
  return q;
}

// Up to 16 rows the bandwidth-bound kernels beat MKL on the hosts measured (MKL converts 16-bit
// operands and packs B on every call): the "batch 16" row of benchmarks/eager_ops.py.
constexpr int64_t kSmallSide = 16;

// The small-side problem gemm() hands to gemm_small_m (with the small side as m), if any.
bool small_route(const GemmProblem& p, GemmProblem* out) {
  if (p.in_dtype == DType::Float64 || !is_blas_float(p.in_dtype) || p.k == 0) return false;
  if (p.m <= kSmallSide && gemm_small_m_supported(p)) {
    *out = p;
    return true;
  }
  if (p.n <= kSmallSide) {
    GemmProblem t = transposed(p);
    if (gemm_small_m_supported(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

}  // namespace

bool gemm_supports(DType in, DType out) {
  if (is_blas_float(in))
    return out == in || (out == DType::Float32 && (in == DType::BFloat16 || in == DType::Float16));
  return is_int(in) && out == in;
}

void gemm_reference(const GemmProblem& p) {
  validate(p);
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  switch (p.in_dtype) {
    case DType::Float32:
      return reference_typed<float, float, float>(p);
    case DType::Float64:
      return reference_typed<double, double, double>(p);
    case DType::BFloat16:
      return p.out_dtype == DType::Float32 ? reference_typed<bf16, float, float>(p)
                                           : reference_typed<bf16, float, bf16>(p);
    case DType::Float16:
      return p.out_dtype == DType::Float32 ? reference_typed<f16, float, float>(p)
                                           : reference_typed<f16, float, f16>(p);
    default:
      dispatch_all(p.in_dtype, [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          using Acc = std::conditional_t<std::is_unsigned_v<T>, uint64_t, int64_t>;
          reference_typed<T, Acc, T>(p);
        }
      });
  }
}

const char* gemm_route(const GemmProblem& p) {
  GemmProblem s;
  if (p.batch == 0 || p.m == 0 || p.n == 0 || p.k == 0) return "reference";
  if (small_route(p, &s)) return "small";
  if (is_blas_float(p.in_dtype) && fits_int(p) && blas_available(p.in_dtype)) return "blas";
  return "reference";
}

void gemm(const GemmProblem& p) {
  validate(p);
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  GemmProblem s;
  if (p.k == 0) return gemm_reference(p);  // C = beta * C
  if (small_route(p, &s)) return gemm_small_m(s, simd_level());
  if (!is_blas_float(p.in_dtype) || !fits_int(p) || !blas_available(p.in_dtype))
    return gemm_reference(p);
  switch (p.in_dtype) {
    case DType::Float32:
      return blas_batched<float>(p);
    case DType::Float64:
      return blas_batched<double>(p);
    case DType::BFloat16:
      return blas_batched<bf16>(p);
    case DType::Float16:
      return blas_batched<f16>(p);
    default:
      break;
  }
}

}  // namespace neuron::kernels
