// Indexing kernels: advanced indexing (index, index_put), gather/scatter along a dim and
// slice_scatter. Elements are moved as bytes; accumulation converts through the dtype.
#include <algorithm>
#include <cstring>
#include <vector>

#include "dense.h"
#include "error.h"
#include "kernels/copy.h"
#include "kernels/dispatch.h"
#include "runtime/thread_pool.h"

namespace neuron::cc::dense {

namespace {

using kernels::DType;

int64_t esize(const TensorRef& t) { return static_cast<int64_t>(kernels::element_size(t.dtype)); }

int64_t read_index(const TensorRef& t, int64_t elem_off) {
  const char* p = static_cast<const char*>(t.data) + elem_off * esize(t);
  if (t.dtype == DType::Int64) {
    int64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  if (t.dtype == DType::Int32) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  throw ExecError(
      rt::str("index tensors must be int32 or int64, got ", kernels::dtype_name(t.dtype)));
}

int64_t checked_index(int64_t v, int64_t size, int dim) {
  if (v < -size || v >= size)
    throw ExecError(
        rt::str("index ", v, " is out of bounds for dimension ", dim, " with size ", size));
  return v < 0 ? v + size : v;
}

// dst += src for one element of dtype t.
void add_elem(char* dst, const char* src, DType t) {
  kernels::dispatch_all(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kernels::is_complex_v<T>) {
      throw ExecError("accumulation of complex values is not supported");
    } else if constexpr (std::is_same_v<T, bool>) {
      bool a, b;
      std::memcpy(&a, dst, 1);
      std::memcpy(&b, src, 1);
      const bool r = a || b;
      std::memcpy(dst, &r, 1);
    } else {
      T a, b;
      std::memcpy(&a, dst, sizeof(T));
      std::memcpy(&b, src, sizeof(T));
      T r;
      if constexpr (kernels::is_small_float_v<T>) {
        r = T(static_cast<float>(a) + static_cast<float>(b));
      } else {
        r = static_cast<T>(a + b);
      }
      std::memcpy(dst, &r, sizeof(T));
    }
  });
}

// Walks the index space of `sizes` calling f(linear, coords).
template <typename F>
void for_each_index(const std::vector<int64_t>& sizes, int64_t begin, int64_t end, F&& f) {
  const size_t n = sizes.size();
  std::vector<int64_t> c(n, 0);
  int64_t rem = begin;
  for (size_t d = n; d-- > 0;) {
    c[d] = sizes[d] ? rem % sizes[d] : 0;
    rem = sizes[d] ? rem / sizes[d] : 0;
  }
  for (int64_t i = begin; i < end; ++i) {
    f(i, c);
    for (size_t d = n; d-- > 0;) {
      if (++c[d] < sizes[d]) break;
      c[d] = 0;
    }
  }
}

// Copies (or accumulates) a block of `sizes` between two strided views.
void move_block(char* dst, const int64_t* dst_strides, const char* src, const int64_t* src_strides,
                const std::vector<int64_t>& sizes, DType t, bool accumulate) {
  const int64_t es = static_cast<int64_t>(kernels::element_size(t));
  const size_t n = sizes.size();
  if (n == 0) {
    if (accumulate)
      add_elem(dst, src, t);
    else
      std::memcpy(dst, src, static_cast<size_t>(es));
    return;
  }
  const int64_t inner = sizes[n - 1];
  const int64_t ds = dst_strides[n - 1], ss = src_strides[n - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < n; ++d) rows *= sizes[d];
  std::vector<int64_t> c(n, 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t doff = 0, soff = 0;
    for (size_t d = 0; d + 1 < n; ++d) {
      doff += c[d] * dst_strides[d];
      soff += c[d] * src_strides[d];
    }
    char* dp = dst + doff * es;
    const char* sp = src + soff * es;
    if (!accumulate && ds == 1 && ss == 1) {
      std::memcpy(dp, sp, static_cast<size_t>(inner * es));
    } else {
      for (int64_t i = 0; i < inner; ++i) {
        if (accumulate)
          add_elem(dp + i * ds * es, sp + i * ss * es, t);
        else
          std::memcpy(dp + i * ds * es, sp + i * ss * es, static_cast<size_t>(es));
      }
    }
    for (size_t d = n - 1; d-- > 0;) {
      if (++c[d] < sizes[d]) break;
      c[d] = 0;
    }
  }
}

// The geometry shared by index and index_put: x (the indexed tensor) and r (the result
// shaped like x[idx...]).
struct IndexGeometry {
  std::vector<int64_t> outer_sizes;      // prefix dims then broadcast index dims
  std::vector<int64_t> outer_x_strides;  // x strides of prefix dims (index dims: 0)
  std::vector<int64_t> outer_r_strides;  // r strides of the outer dims
  int n_prefix = 0;
  std::vector<int64_t> block_sizes, block_x_strides, block_r_strides;  // remaining dims
};

IndexGeometry geometry(const TensorRef& x, const TensorRef& r, const std::vector<TensorRef>& idx,
                       const std::vector<int>& dims) {
  IndexGeometry g;
  const int nb = idx.empty() ? 0 : idx[0].ndim;
  bool adjacent = true;
  for (size_t i = 1; i < dims.size(); ++i)
    if (dims[i] != dims[i - 1] + 1) adjacent = false;
  const int first = dims.empty() ? 0 : dims[0];
  std::vector<bool> indexed(static_cast<size_t>(x.ndim), false);
  for (int d : dims) indexed[static_cast<size_t>(d)] = true;
  int rpos = 0;
  if (adjacent) {
    for (int d = 0; d < first; ++d) {
      g.outer_sizes.push_back(x.sizes[d]);
      g.outer_x_strides.push_back(x.strides[d]);
      g.outer_r_strides.push_back(r.strides[rpos++]);
    }
    g.n_prefix = first;
  }
  for (int j = 0; j < nb; ++j) {
    g.outer_sizes.push_back(idx[0].sizes[j]);
    g.outer_x_strides.push_back(0);
    g.outer_r_strides.push_back(r.strides[rpos++]);
  }
  for (int d = adjacent ? first : 0; d < x.ndim; ++d) {
    if (indexed[static_cast<size_t>(d)]) continue;
    g.block_sizes.push_back(x.sizes[d]);
    g.block_x_strides.push_back(x.strides[d]);
    g.block_r_strides.push_back(r.strides[rpos++]);
  }
  if (rpos != r.ndim) throw ExecError("index: result rank does not match the indexing");
  return g;
}

template <typename F>
void for_outer(const IndexGeometry& g, const std::vector<TensorRef>& idx,
               const std::vector<int>& dims, const TensorRef& x, bool parallel, F&& f) {
  int64_t total = 1;
  for (int64_t s : g.outer_sizes) total *= s;
  int64_t block = 1;
  for (int64_t s : g.block_sizes) block *= s;
  if (total == 0 || block == 0) return;
  const int nb = idx.empty() ? 0 : idx[0].ndim;
  auto body = [&](int64_t b, int64_t e) {
    for_each_index(g.outer_sizes, b, e, [&](int64_t, const std::vector<int64_t>& c) {
      int64_t xo = 0, ro = 0;
      for (size_t d = 0; d < c.size(); ++d) {
        xo += c[d] * g.outer_x_strides[d];
        ro += c[d] * g.outer_r_strides[d];
      }
      for (size_t i = 0; i < idx.size(); ++i) {
        int64_t io = 0;
        for (int j = 0; j < nb; ++j)
          io += c[static_cast<size_t>(g.n_prefix + j)] * idx[i].strides[j];
        const int d = dims[i];
        xo += checked_index(read_index(idx[i], io), x.sizes[d], d) * x.strides[d];
      }
      f(xo, ro);
    });
  };
  const int64_t grain = std::max<int64_t>(1, 16384 / block);
  if (!parallel || total <= grain || rt::in_parallel_region()) {
    body(0, total);
  } else {
    rt::parallel_for(0, total, grain, body);
  }
}

}  // namespace

void index(const TensorRef& x, const TensorRef& out, const std::vector<TensorRef>& idx,
           const std::vector<int>& dims) {
  if (idx.size() != dims.size() || idx.empty())
    throw ExecError("index: needs one dim per index tensor");
  for (const TensorRef& t : idx)
    if (t.ndim != idx[0].ndim)
      throw ExecError("index: index tensors must be broadcast to one shape");
  const IndexGeometry g = geometry(x, out, idx, dims);
  const int64_t es = esize(x);
  for_outer(g, idx, dims, x, true, [&](int64_t xo, int64_t ro) {
    move_block(static_cast<char*>(out.data) + ro * es, g.block_r_strides.data(),
               static_cast<const char*>(x.data) + xo * es, g.block_x_strides.data(), g.block_sizes,
               x.dtype, false);
  });
}

void index_put(const TensorRef& self, const TensorRef& values, const TensorRef& out,
               const std::vector<TensorRef>& idx, const std::vector<int>& dims, bool accumulate,
               bool inplace) {
  if (!inplace) kernels::copy(out, self);
  if (idx.empty()) throw ExecError("index_put: needs an index tensor");
  const IndexGeometry g = geometry(out, values, idx, dims);
  const int64_t es = esize(out);
  // Duplicate indices accumulate in order; plain writes may run in parallel.
  for_outer(g, idx, dims, out, !accumulate, [&](int64_t xo, int64_t ro) {
    move_block(static_cast<char*>(out.data) + xo * es, g.block_x_strides.data(),
               static_cast<const char*>(values.data) + ro * es, g.block_r_strides.data(),
               g.block_sizes, out.dtype, accumulate);
  });
}

void gather(const TensorRef& x, const TensorRef& index, const TensorRef& out, int dim) {
  const int n = index.ndim;
  std::vector<int64_t> sizes(index.sizes, index.sizes + n);
  int64_t total = 1;
  for (int64_t s : sizes) total *= s;
  if (total == 0) return;
  const int64_t es = esize(x);
  auto body = [&](int64_t b, int64_t e) {
    for_each_index(sizes, b, e, [&](int64_t, const std::vector<int64_t>& c) {
      int64_t io = 0, oo = 0, xo = 0;
      for (int d = 0; d < n; ++d) {
        io += c[static_cast<size_t>(d)] * index.strides[d];
        oo += c[static_cast<size_t>(d)] * out.strides[d];
        if (d != dim) xo += c[static_cast<size_t>(d)] * x.strides[d];
      }
      xo += checked_index(read_index(index, io), x.sizes[dim], dim) * x.strides[dim];
      std::memcpy(static_cast<char*>(out.data) + oo * es,
                  static_cast<const char*>(x.data) + xo * es, static_cast<size_t>(es));
    });
  };
  if (total < 16384 || rt::in_parallel_region())
    body(0, total);
  else
    rt::parallel_for(0, total, 16384, body);
}

void scatter(const TensorRef& self, const TensorRef& index, const TensorRef& src,
             const TensorRef& out, int dim, bool add, bool inplace) {
  if (!inplace) kernels::copy(out, self);
  const int n = index.ndim;
  std::vector<int64_t> sizes(index.sizes, index.sizes + n);
  int64_t total = 1;
  for (int64_t s : sizes) total *= s;
  const int64_t es = esize(out);
  for_each_index(sizes, 0, total, [&](int64_t, const std::vector<int64_t>& c) {
    int64_t io = 0, so = 0, oo = 0;
    for (int d = 0; d < n; ++d) {
      io += c[static_cast<size_t>(d)] * index.strides[d];
      so += c[static_cast<size_t>(d)] * src.strides[d];
      if (d != dim) oo += c[static_cast<size_t>(d)] * out.strides[d];
    }
    oo += checked_index(read_index(index, io), out.sizes[dim], dim) * out.strides[dim];
    char* dp = static_cast<char*>(out.data) + oo * es;
    const char* sp = static_cast<const char*>(src.data) + so * es;
    if (add)
      add_elem(dp, sp, out.dtype);
    else
      std::memcpy(dp, sp, static_cast<size_t>(es));
  });
}

void slice_scatter(const TensorRef& self, const TensorRef& src, const TensorRef& out, int dim,
                   int64_t start, int64_t end, int64_t step, bool inplace) {
  if (!inplace) kernels::copy(out, self);
  TensorRef view = out;
  view.data = static_cast<char*>(out.data) + start * out.strides[dim] * esize(out);
  view.sizes[dim] = step > 0 ? (end - start + step - 1) / step : 0;
  view.strides[dim] = out.strides[dim] * step;
  if (view.sizes[dim] != src.sizes[dim])
    throw ExecError("slice_scatter: src does not fill the slice");
  kernels::copy(view, src);
}

}  // namespace neuron::cc::dense
