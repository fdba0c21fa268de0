#include "reduce.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "convert.h"
#include "reduce_internal.h"
#include "runtime/thread_pool.h"
#include "simd.h"

namespace neuron::kernels {

namespace {

bool is_arg(ReduceOp op) {
  return op == ReduceOp::ArgMax || op == ReduceOp::ArgMin || op == ReduceOp::MaxWithIndex ||
         op == ReduceOp::MinWithIndex;
}

struct Dim {
  int64_t size, sin, so[2];
};

// Sorts dims by decreasing input stride (outermost first) and merges neighbours that are
// contiguous in every operand.
int coalesce(std::vector<Dim>& dims, bool sort, int nouts) {
  if (sort) {
    std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) {
      return std::llabs(a.sin) > std::llabs(b.sin);
    });
  }
  std::vector<Dim> out;
  for (const Dim& d : dims) {
    if (!out.empty()) {
      Dim& p = out.back();
      bool ok = p.sin == d.sin * d.size;
      for (int k = 0; k < nouts; ++k) ok = ok && p.so[k] == d.so[k] * d.size;
      if (ok) {
        p.size *= d.size;
        p.sin = d.sin;
        for (int k = 0; k < nouts; ++k) p.so[k] = d.so[k];
        continue;
      }
    }
    out.push_back(d);
  }
  dims = out;
  return static_cast<int>(dims.size());
}

RedGeometry geometry(ReduceOp op, const TensorRef& in, const TensorRef* outs, int nouts) {
  std::vector<Dim> kept, red;
  const int64_t ies = static_cast<int64_t>(element_size(in.dtype));
  for (int d = 0; d < in.ndim; ++d) {
    for (int k = 0; k < nouts; ++k) {
      if (outs[k].ndim != in.ndim || (outs[k].sizes[d] != in.sizes[d] && outs[k].sizes[d] != 1))
        throw std::invalid_argument("neuron reduce: output shape does not match the input");
    }
    if (in.sizes[d] == 1) continue;
    Dim x{in.sizes[d], in.strides[d] * ies, {0, 0}};
    for (int k = 0; k < nouts; ++k)
      x.so[k] = outs[k].strides[d] * static_cast<int64_t>(element_size(outs[k].dtype));
    if (outs[0].sizes[d] == 1) {
      red.push_back(x);
    } else {
      kept.push_back(x);
    }
  }
  RedGeometry g;
  g.nk = coalesce(kept, /*sort=*/true, nouts);
  // Arg reductions number elements in logical order, so their reduced dims keep that order.
  g.nr = coalesce(red, /*sort=*/!is_arg(op), 0);
  for (int i = 0; i < g.nk; ++i) {
    g.ksize[i] = kept[i].size;
    g.kin[i] = kept[i].sin;
    g.kout[0][i] = kept[i].so[0];
    g.kout[1][i] = kept[i].so[1];
    g.M *= kept[i].size;
  }
  for (int i = 0; i < g.nr; ++i) {
    g.rsize[i] = red[i].size;
    g.rin[i] = red[i].sin;
    g.L *= red[i].size;
  }
  return g;
}

bool entry(ReduceOp op, DType compute, const ReduceParams& p, const RedGeometry& g,
           const TensorRef& in, const TensorRef* outs, int nouts, bool dry) {
  if (simd_level() == SimdLevel::Avx2)
    return avx2::reduce_entry(op, compute, p, g, in, outs, nouts, dry);
  return portable::reduce_entry(op, compute, p, g, in, outs, nouts, dry);
}

}  // namespace

int reduce_outputs(ReduceOp op) {
  return op == ReduceOp::MaxWithIndex || op == ReduceOp::MinWithIndex || op == ReduceOp::VarMean
             ? 2
             : 1;
}

bool reduce_supports(ReduceOp op, DType compute) {
  RedGeometry g;
  TensorRef dummy;
  return portable::reduce_entry(op, compute, ReduceParams{}, g, dummy, &dummy, 1, /*dry=*/true);
}

void reduce(ReduceOp op, DType compute, const ReduceParams& p, const TensorRef& in,
            const TensorRef* outs, int num_outs) {
  if (num_outs != reduce_outputs(op))
    throw std::invalid_argument("neuron reduce: expected " + std::to_string(reduce_outputs(op)) +
                                " outputs");
  const RedGeometry g = geometry(op, in, outs, num_outs);
  if (!entry(op, compute, p, g, in, outs, num_outs, /*dry=*/false))
    throw std::invalid_argument("neuron reduce: no kernel for " + std::string(dtype_name(compute)));
}

// ---------------------------------------------------------------------------------------------
// Scans
// ---------------------------------------------------------------------------------------------

bool scan_supports(DType compute) {
  switch (compute) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float32:
    case DType::Float64:
      return true;
    default:
      return false;
  }
}

namespace {

template <class A>
void scan_lines(ScanOp op, const TensorRef& in, const TensorRef& out, int dim, DType acc_dtype) {
  const ConvertFn load = find_convert(acc_dtype, in.dtype);
  const ConvertFn store = find_convert(out.dtype, acc_dtype);
  if (!load || !store) throw std::invalid_argument("neuron scan: unsupported dtype");
  const int64_t ies = static_cast<int64_t>(element_size(in.dtype));
  const int64_t oes = static_cast<int64_t>(element_size(out.dtype));
  const int64_t n = in.sizes[dim];
  const int64_t sin = in.strides[dim] * ies, sout = out.strides[dim] * oes;
  // The other dims index the lines.
  int64_t size[kMaxDims], si[kMaxDims], so[kMaxDims];
  int nl = 0;
  int64_t lines = 1;
  for (int d = 0; d < in.ndim; ++d) {
    if (d == dim) continue;
    size[nl] = in.sizes[d];
    si[nl] = in.strides[d] * ies;
    so[nl] = out.strides[d] * oes;
    lines *= in.sizes[d];
    ++nl;
  }
  if (lines == 0 || n == 0) return;
  const char* ib = static_cast<const char*>(in.data);
  char* ob = static_cast<char*>(out.data);
  constexpr int64_t kChunk = 1024;
  const int64_t grain = std::max<int64_t>(1, 16384 / n);
  rt::parallel_for(0, lines, grain, [&](int64_t b, int64_t e) {
    A buf[kChunk];
    for (int64_t line = b; line < e; ++line) {
      int64_t oi = 0, oo = 0, rem = line;
      for (int d = nl - 1; d >= 0; --d) {
        const int64_t q = rem % size[d];
        rem /= size[d];
        oi += q * si[d];
        oo += q * so[d];
      }
      A acc = op == ScanOp::CumSum ? A(0) : A(1);
      for (int64_t c = 0; c < n; c += kChunk) {
        const int64_t m = std::min(kChunk, n - c);
        load(buf, sizeof(A), ib + oi + c * sin, sin, m);
        for (int64_t k = 0; k < m; ++k) {
          if constexpr (std::is_same_v<A, int64_t>) {
            const uint64_t a = static_cast<uint64_t>(acc), x = static_cast<uint64_t>(buf[k]);
            acc = static_cast<int64_t>(op == ScanOp::CumSum ? a + x : a * x);
          } else {
            acc = op == ScanOp::CumSum ? acc + buf[k] : acc * buf[k];
          }
          buf[k] = acc;
        }
        store(ob + oo + c * sout, sout, buf, sizeof(A), m);
      }
    }
  });
}

}  // namespace

void scan(ScanOp op, DType compute, const TensorRef& in, const TensorRef& out, int dim) {
  if (!scan_supports(compute))
    throw std::invalid_argument("neuron scan: no kernel for " + std::string(dtype_name(compute)));
  if (in.ndim != out.ndim || dim < 0 || (in.ndim > 0 && dim >= in.ndim))
    throw std::invalid_argument("neuron scan: bad shapes or dim");
  for (int d = 0; d < in.ndim; ++d)
    if (in.sizes[d] != out.sizes[d]) throw std::invalid_argument("neuron scan: shapes differ");
  if (in.ndim == 0) {  // one element: the scan is the element itself
    TensorRef i1 = in, o1 = out;
    i1.ndim = o1.ndim = 1;
    i1.sizes[0] = o1.sizes[0] = 1;
    i1.strides[0] = o1.strides[0] = 1;
    return scan(op, compute, i1, o1, 0);
  }
  if (is_floating(compute)) {
    scan_lines<double>(op, in, out, dim, DType::Float64);
  } else {
    scan_lines<int64_t>(op, in, out, dim, DType::Int64);
  }
}

}  // namespace neuron::kernels
