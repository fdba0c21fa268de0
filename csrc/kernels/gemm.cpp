#include "gemm.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "blas.h"
#include "dispatch.h"
#include "runtime/thread_pool.h"

namespace neuron::kernels {
namespace {

void validate(const GemmProblem& p) {
  if (p.batch < 0 || p.m < 0 || p.n < 0 || p.k < 0) throw std::invalid_argument("gemm: negative size");
  const bool in_ok = p.in_dtype == DType::Float32 || p.in_dtype == DType::Float64 ||
                     p.in_dtype == DType::BFloat16 || p.in_dtype == DType::Float16;
  const bool out_ok = p.out_dtype == p.in_dtype ||
                      (p.out_dtype == DType::Float32 && (p.in_dtype == DType::BFloat16 || p.in_dtype == DType::Float16));
  if (!in_ok || !out_ok) {
    throw std::invalid_argument(std::string("gemm: unsupported dtypes ") + std::string(dtype_name(p.in_dtype)) +
                                " -> " + std::string(dtype_name(p.out_dtype)));
  }
}

// Portable kernel: rows of C in parallel, k-outer loop over a row of B for locality.
template <typename In, typename Acc>
void reference_typed(const GemmProblem& p) {
  const int64_t total_rows = p.batch * p.m;
  rt::parallel_for(0, total_rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.n * p.k / 64 + 1)),
                   [&](int64_t r0, int64_t r1) {
    std::vector<Acc> acc(static_cast<size_t>(p.n));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t bi = r / std::max<int64_t>(1, p.m), i = r % std::max<int64_t>(1, p.m);
      std::fill(acc.begin(), acc.end(), Acc(0));
      const auto* a = static_cast<const In*>(p.a) + bi * p.a_bs + i * p.a_rs;
      const auto* b = static_cast<const In*>(p.b) + bi * p.b_bs;
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const Acc av = static_cast<Acc>(a[kk * p.a_cs]);
        const In* brow = b + kk * p.b_rs;
        for (int64_t j = 0; j < p.n; ++j) acc[j] += av * static_cast<Acc>(brow[j * p.b_cs]);
      }
      char* crow = static_cast<char*>(p.c);
      const size_t osz = element_size(p.out_dtype);
      for (int64_t j = 0; j < p.n; ++j) {
        char* cp = crow + (bi * p.c_bs + i * p.c_rs + j * p.c_cs) * static_cast<int64_t>(osz);
        dispatch_all(p.out_dtype, [&](auto tag) {
          using O = decltype(tag);
          if constexpr (std::is_same_v<O, float> || std::is_same_v<O, double> || std::is_same_v<O, bf16> ||
                        std::is_same_v<O, f16>) {
            Acc v = static_cast<Acc>(p.alpha) * acc[j];
            if (p.beta != 0.0f) v += static_cast<Acc>(p.beta) * static_cast<Acc>(*reinterpret_cast<O*>(cp));
            O o = convert<O>(v);
            std::memcpy(cp, &o, sizeof(O));
          }
        });
      }
    }
  });
}

// Column-major view of a row-major problem: C^T = B^T A^T. A matrix with (rs, cs) strides is,
// seen column-major, "N" with ld = rs when cs == 1, or "T" with ld = cs when rs == 1.
struct FortranOperand {
  char trans;
  int ld;
  bool ok;
};

FortranOperand fortran_operand(int64_t rs, int64_t cs, int64_t rows, int64_t cols) {
  // Row-major [rows, cols] with strides (rs, cs) -> as a column-major [cols, rows] matrix X^T.
  if (cs == 1 && rs >= std::max<int64_t>(1, cols) && rs <= std::numeric_limits<int>::max())
    return {'N', static_cast<int>(std::max<int64_t>(rs, 1)), true};
  if (rs == 1 && cs >= std::max<int64_t>(1, rows) && cs <= std::numeric_limits<int>::max())
    return {'T', static_cast<int>(std::max<int64_t>(cs, 1)), true};
  if (rows == 1 && cs == 1) return {'N', static_cast<int>(std::max<int64_t>(cols, 1)), true};
  if (cols == 1 && rs == 1) return {'T', static_cast<int>(std::max<int64_t>(rows, 1)), true};
  return {'N', 0, false};
}

// Copies a strided [rows, cols] matrix of T into a dense row-major buffer.
template <typename T>
std::vector<T> pack(const T* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  std::vector<T> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[static_cast<size_t>(i * cols + j)] = src[i * rs + j * cs];
  return out;
}

bool fits_int(const GemmProblem& p) {
  const int64_t lim = std::numeric_limits<int>::max();
  return p.m <= lim && p.n <= lim && p.k <= lim;
}

// One batch entry through a Fortran BLAS call. T is the input storage type, Acc the output type
// of the BLAS routine (float or double).
template <typename T, typename Acc, typename Fn>
void blas_one(const GemmProblem& p, int64_t bi, Fn call, Acc* cbuf, int64_t ldc_buf) {
  const T* a = static_cast<const T*>(p.a) + bi * p.a_bs;
  const T* b = static_cast<const T*>(p.b) + bi * p.b_bs;
  std::vector<T> apack, bpack;
  FortranOperand fa = fortran_operand(p.a_rs, p.a_cs, p.m, p.k);
  FortranOperand fb = fortran_operand(p.b_rs, p.b_cs, p.k, p.n);
  if (!fa.ok) {
    apack = pack(a, p.m, p.k, p.a_rs, p.a_cs);
    a = apack.data();
    fa = {'N', static_cast<int>(std::max<int64_t>(p.k, 1)), true};
  }
  if (!fb.ok) {
    bpack = pack(b, p.k, p.n, p.b_rs, p.b_cs);
    b = bpack.data();
    fb = {'N', static_cast<int>(std::max<int64_t>(p.n, 1)), true};
  }
  const int m = static_cast<int>(p.n), n = static_cast<int>(p.m), k = static_cast<int>(p.k);
  const int ldc = static_cast<int>(ldc_buf);
  call(&fb.trans, &fa.trans, &m, &n, &k, b, &fb.ld, a, &fa.ld, cbuf, &ldc);
}

template <typename Out, typename Acc>
void store_output(const GemmProblem& p, int64_t bi, const Acc* buf, int64_t ldb) {
  char* base = static_cast<char*>(p.c);
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      Out* dst = reinterpret_cast<Out*>(base) + bi * p.c_bs + i * p.c_rs + j * p.c_cs;
      Acc v = static_cast<Acc>(p.alpha) * buf[i * ldb + j];
      if (p.beta != 0.0f) v += static_cast<Acc>(p.beta) * static_cast<Acc>(*dst);
      *dst = convert<Out>(v);
    }
  }
}

bool try_blas(const GemmProblem& p) {
  const auto& f = blas::functions();
  if (!fits_int(p)) return false;
  const bool c_dense_rows = p.c_cs == 1 && p.c_rs >= std::max<int64_t>(p.n, 1) && p.c_rs <= std::numeric_limits<int>::max();
  switch (p.in_dtype) {
    case DType::Float32: {
      if (!f.sgemm) return false;
      for (int64_t bi = 0; bi < p.batch; ++bi) {
        if (c_dense_rows) {  // write straight into C with alpha/beta
          float* c = static_cast<float*>(p.c) + bi * p.c_bs;
          const float alpha = p.alpha, beta = p.beta;
          blas_one<float, float>(p, bi, [&](const char* ta, const char* tb, const int* m, const int* n, const int* k,
                                            const float* b, const int* ldb, const float* a, const int* lda, float* cc,
                                            const int* ldc) { f.sgemm(ta, tb, m, n, k, &alpha, b, ldb, a, lda, &beta, cc, ldc); },
                                 c, p.c_rs);
        } else {
          std::vector<float> buf(static_cast<size_t>(p.m * p.n));
          const float one = 1.0f, zero = 0.0f;
          blas_one<float, float>(p, bi, [&](const char* ta, const char* tb, const int* m, const int* n, const int* k,
                                            const float* b, const int* ldb, const float* a, const int* lda, float* cc,
                                            const int* ldc) { f.sgemm(ta, tb, m, n, k, &one, b, ldb, a, lda, &zero, cc, ldc); },
                                 buf.data(), std::max<int64_t>(p.n, 1));
          store_output<float, float>(p, bi, buf.data(), std::max<int64_t>(p.n, 1));
        }
      }
      return true;
    }
    case DType::Float64: {
      if (!f.dgemm) return false;
      for (int64_t bi = 0; bi < p.batch; ++bi) {
        std::vector<double> buf(static_cast<size_t>(p.m * p.n));
        const double one = 1.0, zero = 0.0;
        blas_one<double, double>(p, bi, [&](const char* ta, const char* tb, const int* m, const int* n, const int* k,
                                            const double* b, const int* ldb, const double* a, const int* lda, double* cc,
                                            const int* ldc) { f.dgemm(ta, tb, m, n, k, &one, b, ldb, a, lda, &zero, cc, ldc); },
                                 buf.data(), std::max<int64_t>(p.n, 1));
        store_output<double, double>(p, bi, buf.data(), std::max<int64_t>(p.n, 1));
      }
      return true;
    }
    case DType::BFloat16:
    case DType::Float16: {
      const blas::gemm16_fn g = p.in_dtype == DType::BFloat16 ? f.gemm_bf16 : f.gemm_f16;
      if (!g) return false;
      for (int64_t bi = 0; bi < p.batch; ++bi) {
        std::vector<float> buf(static_cast<size_t>(p.m * p.n));
        const float one = 1.0f, zero = 0.0f;
        blas_one<uint16_t, float>(p, bi, [&](const char* ta, const char* tb, const int* m, const int* n, const int* k,
                                             const uint16_t* b, const int* ldb, const uint16_t* a, const int* lda, float* cc,
                                             const int* ldc) { g(ta, tb, m, n, k, &one, b, ldb, a, lda, &zero, cc, ldc); },
                                  buf.data(), std::max<int64_t>(p.n, 1));
        if (p.out_dtype == DType::Float32) {
          store_output<float, float>(p, bi, buf.data(), std::max<int64_t>(p.n, 1));
        } else if (p.out_dtype == DType::BFloat16) {
          store_output<bf16, float>(p, bi, buf.data(), std::max<int64_t>(p.n, 1));
        } else {
          store_output<f16, float>(p, bi, buf.data(), std::max<int64_t>(p.n, 1));
        }
      }
      return true;
    }
    default:
      return false;
  }
}

}  // namespace

void gemm_reference(const GemmProblem& p) {
  validate(p);
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  switch (p.in_dtype) {
    case DType::Float32: return reference_typed<float, float>(p);
    case DType::Float64: return reference_typed<double, double>(p);
    case DType::BFloat16: return reference_typed<bf16, float>(p);
    case DType::Float16: return reference_typed<f16, float>(p);
    default: break;
  }
}

void gemm(const GemmProblem& p) {
  validate(p);
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  if (p.k == 0) {  // C = beta * C
    GemmProblem q = p;
    q.k = 0;
    return gemm_reference(q);
  }
  if (try_blas(p)) return;
  gemm_reference(p);
}

}  // namespace neuron::kernels
