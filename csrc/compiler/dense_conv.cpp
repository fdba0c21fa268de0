// Convolution (im2col + GEMM in fp32), 2-D pooling, and the custom-kernel registry.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "dense.h"
#include "error.h"
#include "kernels/gemm.h"
#include "runtime/thread_pool.h"
#include "vm_loops.h"

namespace neuron::cc::dense {

namespace {

using kernels::DType;

struct Geo2 {
  int64_t N, C, H, W, O, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw, groups;
};

Geo2 conv_geo(const TensorRef& in, const TensorRef& w, const TensorRef& out, const ConvParams& p) {
  Geo2 g{};
  const bool one_d = in.ndim == 3;
  if (in.ndim != 3 && in.ndim != 4)
    throw ExecError("conv: only 1-D and 2-D convolutions are compiled");
  g.N = in.sizes[0];
  g.C = in.sizes[1];
  g.H = one_d ? 1 : in.sizes[2];
  g.W = in.sizes[in.ndim - 1];
  g.O = w.sizes[0];
  g.kh = one_d ? 1 : w.sizes[2];
  g.kw = w.sizes[w.ndim - 1];
  g.Ho = one_d ? 1 : out.sizes[2];
  g.Wo = out.sizes[out.ndim - 1];
  g.sh = one_d ? 1 : p.stride[0];
  g.sw = p.stride.back();
  g.ph = one_d ? 0 : p.padding[0];
  g.pw = p.padding.back();
  g.dh = one_d ? 1 : p.dilation[0];
  g.dw = p.dilation.back();
  g.groups = p.groups;
  return g;
}

// Element offset of (n, c, h, w) in a 3-D or 4-D tensor.
int64_t off4(const TensorRef& t, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (t.ndim == 3) return n * t.strides[0] + c * t.strides[1] + w * t.strides[2];
  return n * t.strides[0] + c * t.strides[1] + h * t.strides[2] + w * t.strides[3];
}

// Loads image n of t as fp32 [C, H, W] contiguous.
void load_image(const TensorRef& t, int64_t n, int64_t C, int64_t H, int64_t W, float* dst) {
  const vm::LoopTable& L = vm::loops();
  const int64_t es = static_cast<int64_t>(kernels::element_size(t.dtype));
  const int64_t ws = t.strides[t.ndim - 1] * es;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      L.load[static_cast<int>(t.dtype)](dst + (c * H + h) * W,
                                        static_cast<const char*>(t.data) + off4(t, n, c, h, 0) * es,
                                        ws, W);
}

void store_image(const TensorRef& t, int64_t n, int64_t C, int64_t H, int64_t W, const float* src) {
  const vm::LoopTable& L = vm::loops();
  const int64_t es = static_cast<int64_t>(kernels::element_size(t.dtype));
  const int64_t ws = t.strides[t.ndim - 1] * es;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t h = 0; h < H; ++h)
      L.store[static_cast<int>(t.dtype)](static_cast<char*>(t.data) + off4(t, n, c, h, 0) * es, ws,
                                         src + (c * H + h) * W, W);
}

void load_dense(const TensorRef& t, float* dst) {  // any rank, row-major order
  const vm::LoopTable& L = vm::loops();
  const int64_t es = static_cast<int64_t>(kernels::element_size(t.dtype));
  const int n = t.ndim;
  int64_t rows = 1;
  for (int d = 0; d + 1 < n; ++d) rows *= t.sizes[d];
  const int64_t inner = n ? t.sizes[n - 1] : 1;
  std::vector<int64_t> c(static_cast<size_t>(std::max(n, 1)), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0;
    for (int d = 0; d + 1 < n; ++d) off += c[static_cast<size_t>(d)] * t.strides[d];
    L.load[static_cast<int>(t.dtype)](dst + r * inner, static_cast<const char*>(t.data) + off * es,
                                      n ? t.strides[n - 1] * es : es, inner);
    for (int d = n - 1; d-- > 0;) {
      if (++c[static_cast<size_t>(d)] < t.sizes[d]) break;
      c[static_cast<size_t>(d)] = 0;
    }
  }
}

void store_dense(const TensorRef& t, const float* src) {
  const vm::LoopTable& L = vm::loops();
  const int64_t es = static_cast<int64_t>(kernels::element_size(t.dtype));
  const int n = t.ndim;
  int64_t rows = 1;
  for (int d = 0; d + 1 < n; ++d) rows *= t.sizes[d];
  const int64_t inner = n ? t.sizes[n - 1] : 1;
  std::vector<int64_t> c(static_cast<size_t>(std::max(n, 1)), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0;
    for (int d = 0; d + 1 < n; ++d) off += c[static_cast<size_t>(d)] * t.strides[d];
    L.store[static_cast<int>(t.dtype)](static_cast<char*>(t.data) + off * es,
                                       n ? t.strides[n - 1] * es : es, src + r * inner, inner);
    for (int d = n - 1; d-- > 0;) {
      if (++c[static_cast<size_t>(d)] < t.sizes[d]) break;
      c[static_cast<size_t>(d)] = 0;
    }
  }
}

// cols[(c*kh + i)*kw + j][oh*Wo + ow] of one image x[C, H, W].
void im2col(const float* x, const Geo2& g, int64_t c0, int64_t cn, float* cols) {
  const int64_t HoWo = g.Ho * g.Wo;
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t c = c0 + r / (g.kh * g.kw), i = (r / g.kw) % g.kh, j = r % g.kw;
      float* dst = cols + r * HoWo;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        const int64_t ih = oh * g.sh - g.ph + i * g.dh;
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const int64_t iw = ow * g.sw - g.pw + j * g.dw;
          dst[oh * g.Wo + ow] =
              (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) ? x[(c * g.H + ih) * g.W + iw] : 0.0f;
        }
      }
    }
  };
  const int64_t rows = cn * g.kh * g.kw;
  if (rows * HoWo < 32768 || rt::in_parallel_region())
    body(0, rows);
  else
    rt::parallel_for(0, rows, 1, body);
}

void col2im(const float* cols, const Geo2& g, int64_t c0, int64_t cn, float* x) {
  const int64_t HoWo = g.Ho * g.Wo;
  auto body = [&](int64_t b, int64_t e) {  // channels are independent
    for (int64_t c = b; c < e; ++c)
      for (int64_t i = 0; i < g.kh; ++i)
        for (int64_t j = 0; j < g.kw; ++j) {
          const float* src = cols + (((c - c0) * g.kh + i) * g.kw + j) * HoWo;
          for (int64_t oh = 0; oh < g.Ho; ++oh) {
            const int64_t ih = oh * g.sh - g.ph + i * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t ow = 0; ow < g.Wo; ++ow) {
              const int64_t iw = ow * g.sw - g.pw + j * g.dw;
              if (iw >= 0 && iw < g.W) x[(c * g.H + ih) * g.W + iw] += src[oh * g.Wo + ow];
            }
          }
        }
  };
  if (rt::in_parallel_region())
    body(c0, c0 + cn);
  else
    rt::parallel_for(c0, c0 + cn, 1, body);
}

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t a_rs, int64_t a_cs,
           const float* b, int64_t b_rs, int64_t b_cs, float* c, int64_t c_rs, float beta) {
  kernels::GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = a;
  p.a_rs = a_rs;
  p.a_cs = a_cs;
  p.b = b;
  p.b_rs = b_rs;
  p.b_cs = b_cs;
  p.c = c;
  p.c_rs = c_rs;
  p.c_cs = 1;
  p.beta = beta;
  kernels::gemm(p);
}

}  // namespace

void conv(const TensorRef& input, const TensorRef& weight, const TensorRef* bias,
          const TensorRef& out, const ConvParams& p) {
  const Geo2 g = conv_geo(input, weight, out, p);
  const int64_t Cg = g.C / g.groups, Og = g.O / g.groups, KK = Cg * g.kh * g.kw, HoWo = g.Ho * g.Wo;
  std::vector<float> w(static_cast<size_t>(g.O * KK)), x(static_cast<size_t>(g.C * g.H * g.W)),
      cols(static_cast<size_t>(KK * HoWo)), y(static_cast<size_t>(g.O * HoWo)),
      bv(static_cast<size_t>(g.O), 0.0f);
  load_dense(weight, w.data());
  if (bias) load_dense(*bias, bv.data());
  for (int64_t n = 0; n < g.N; ++n) {
    load_image(input, n, g.C, g.H, g.W, x.data());
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      im2col(x.data(), g, gr * Cg, Cg, cols.data());
      sgemm(Og, HoWo, KK, w.data() + gr * Og * KK, KK, 1, cols.data(), HoWo, 1,
            y.data() + gr * Og * HoWo, HoWo, 0.0f);
    }
    for (int64_t o = 0; o < g.O; ++o)
      for (int64_t i = 0; i < HoWo; ++i)
        y[static_cast<size_t>(o * HoWo + i)] += bv[static_cast<size_t>(o)];
    store_image(out, n, g.O, g.Ho, g.Wo, y.data());
  }
}

void conv_backward(const TensorRef& grad_out, const TensorRef& input, const TensorRef& weight,
                   const TensorRef* grad_input, const TensorRef* grad_weight,
                   const TensorRef* grad_bias, const ConvParams& p) {
  const Geo2 g = conv_geo(input, weight, grad_out, p);
  const int64_t Cg = g.C / g.groups, Og = g.O / g.groups, KK = Cg * g.kh * g.kw, HoWo = g.Ho * g.Wo;
  std::vector<float> w(static_cast<size_t>(g.O * KK)), x(static_cast<size_t>(g.C * g.H * g.W)),
      cols(static_cast<size_t>(KK * HoWo)), gy(static_cast<size_t>(g.O * HoWo)), gw, gb, gx;
  load_dense(weight, w.data());
  if (grad_weight) gw.assign(static_cast<size_t>(g.O * KK), 0.0f);
  if (grad_bias) gb.assign(static_cast<size_t>(g.O), 0.0f);
  if (grad_input) gx.resize(static_cast<size_t>(g.C * g.H * g.W));
  for (int64_t n = 0; n < g.N; ++n) {
    load_image(grad_out, n, g.O, g.Ho, g.Wo, gy.data());
    if (grad_bias)
      for (int64_t o = 0; o < g.O; ++o) {
        double s = 0;
        for (int64_t i = 0; i < HoWo; ++i) s += gy[static_cast<size_t>(o * HoWo + i)];
        gb[static_cast<size_t>(o)] += static_cast<float>(s);
      }
    if (grad_weight) load_image(input, n, g.C, g.H, g.W, x.data());
    if (grad_input) std::fill(gx.begin(), gx.end(), 0.0f);
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      const float* gyg = gy.data() + gr * Og * HoWo;
      if (grad_weight) {
        im2col(x.data(), g, gr * Cg, Cg, cols.data());
        // gW[Og, KK] += gy[Og, HoWo] @ cols^T
        sgemm(Og, KK, HoWo, gyg, HoWo, 1, cols.data(), 1, HoWo, gw.data() + gr * Og * KK, KK, 1.0f);
      }
      if (grad_input) {
        // cols[KK, HoWo] = W^T[KK, Og] @ gy[Og, HoWo]
        sgemm(KK, HoWo, Og, w.data() + gr * Og * KK, 1, KK, gyg, HoWo, 1, cols.data(), HoWo, 0.0f);
        col2im(cols.data(), g, gr * Cg, Cg, gx.data());
      }
    }
    if (grad_input) store_image(*grad_input, n, g.C, g.H, g.W, gx.data());
  }
  if (grad_weight) store_dense(*grad_weight, gw.data());
  if (grad_bias) store_dense(*grad_bias, gb.data());
}

// ---------------------------------------------------------------------------------------
// Pooling over the last two dims.

namespace {

struct Planes {
  std::vector<int64_t> sizes;  // leading dims
  int64_t count = 1;
};
Planes planes_of(const TensorRef& t) {
  Planes p;
  for (int d = 0; d + 2 < t.ndim; ++d) {
    p.sizes.push_back(t.sizes[d]);
    p.count *= t.sizes[d];
  }
  return p;
}
int64_t plane_off(const TensorRef& t, const Planes& p, int64_t i) {
  int64_t off = 0;
  for (size_t d = p.sizes.size(); d-- > 0;) {
    off += (i % p.sizes[d]) * t.strides[d];
    i /= p.sizes[d];
  }
  return off;
}

template <typename F>
void for_planes(int64_t count, int64_t work, F&& f) {
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  };
  if (count * work < 16384 || rt::in_parallel_region())
    body(0, count);
  else
    rt::parallel_for(0, count, 1, body);
}

}  // namespace

void max_pool(const TensorRef& input, const TensorRef& out, const TensorRef& indices,
              const PoolParams& p) {
  const int r = input.ndim;
  const int64_t H = input.sizes[r - 2], W = input.sizes[r - 1], Ho = out.sizes[r - 2],
                Wo = out.sizes[r - 1];
  const Planes pl = planes_of(input);
  const vm::LoopTable& L = vm::loops();
  for_planes(pl.count, H * W, [&](int64_t i) {
    std::vector<float> x(static_cast<size_t>(H * W)), y(static_cast<size_t>(Ho * Wo));
    std::vector<int64_t> ix(static_cast<size_t>(Ho * Wo));
    const int64_t ies = static_cast<int64_t>(kernels::element_size(input.dtype));
    const char* base = static_cast<const char*>(input.data) + plane_off(input, pl, i) * ies;
    for (int64_t h = 0; h < H; ++h)
      L.load[static_cast<int>(input.dtype)](x.data() + h * W, base + h * input.strides[r - 2] * ies,
                                            input.strides[r - 1] * ies, W);
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        float best = -std::numeric_limits<float>::infinity();
        int64_t bi = -1;
        for (int64_t a = 0; a < p.kernel[0]; ++a) {
          const int64_t ih = oh * p.stride[0] - p.padding[0] + a * p.dilation[0];
          if (ih < 0 || ih >= H) continue;
          for (int64_t b = 0; b < p.kernel[1]; ++b) {
            const int64_t iw = ow * p.stride[1] - p.padding[1] + b * p.dilation[1];
            if (iw < 0 || iw >= W) continue;
            const float v = x[static_cast<size_t>(ih * W + iw)];
            if (bi < 0 || v > best || v != v) {
              if (best != best) continue;
              best = v;
              bi = ih * W + iw;
            }
          }
        }
        y[static_cast<size_t>(oh * Wo + ow)] = best;
        ix[static_cast<size_t>(oh * Wo + ow)] = bi;
      }
    const int64_t oes = static_cast<int64_t>(kernels::element_size(out.dtype));
    char* ob = static_cast<char*>(out.data) + plane_off(out, pl, i) * oes;
    char* ib = static_cast<char*>(indices.data) + plane_off(indices, pl, i) * 8;
    for (int64_t oh = 0; oh < Ho; ++oh) {
      L.store[static_cast<int>(out.dtype)](ob + oh * out.strides[r - 2] * oes,
                                           out.strides[r - 1] * oes, y.data() + oh * Wo, Wo);
      L.storei[static_cast<int>(DType::Int64)](ib + oh * indices.strides[r - 2] * 8,
                                               indices.strides[r - 1] * 8, ix.data() + oh * Wo, Wo);
    }
  });
}

void max_pool_backward(const TensorRef& grad_out, const TensorRef& indices,
                       const TensorRef& grad_in) {
  const int r = grad_in.ndim;
  const int64_t H = grad_in.sizes[r - 2], W = grad_in.sizes[r - 1], Ho = grad_out.sizes[r - 2],
                Wo = grad_out.sizes[r - 1];
  const Planes pl = planes_of(grad_in);
  const vm::LoopTable& L = vm::loops();
  for_planes(pl.count, H * W, [&](int64_t i) {
    std::vector<float> gx(static_cast<size_t>(H * W), 0.0f), gy(static_cast<size_t>(Ho * Wo));
    std::vector<int64_t> ix(static_cast<size_t>(Ho * Wo));
    const int64_t ges = static_cast<int64_t>(kernels::element_size(grad_out.dtype));
    const char* gb = static_cast<const char*>(grad_out.data) + plane_off(grad_out, pl, i) * ges;
    const char* ibase = static_cast<const char*>(indices.data) + plane_off(indices, pl, i) * 8;
    for (int64_t oh = 0; oh < Ho; ++oh) {
      L.load[static_cast<int>(grad_out.dtype)](gy.data() + oh * Wo,
                                               gb + oh * grad_out.strides[r - 2] * ges,
                                               grad_out.strides[r - 1] * ges, Wo);
      L.loadi[static_cast<int>(DType::Int64)](ix.data() + oh * Wo,
                                              ibase + oh * indices.strides[r - 2] * 8,
                                              indices.strides[r - 1] * 8, Wo);
    }
    for (int64_t k = 0; k < Ho * Wo; ++k) {
      const int64_t idx = ix[static_cast<size_t>(k)];
      if (idx < 0 || idx >= H * W)
        throw ExecError(
            rt::str("max_pool_backward: index ", idx, " outside a ", H, "x", W, " plane"));
      gx[static_cast<size_t>(idx)] += gy[static_cast<size_t>(k)];
    }
    const int64_t oes = static_cast<int64_t>(kernels::element_size(grad_in.dtype));
    char* ob = static_cast<char*>(grad_in.data) + plane_off(grad_in, pl, i) * oes;
    for (int64_t h = 0; h < H; ++h)
      L.store[static_cast<int>(grad_in.dtype)](ob + h * grad_in.strides[r - 2] * oes,
                                               grad_in.strides[r - 1] * oes, gx.data() + h * W, W);
  });
}

namespace {
struct AvgWin {
  int64_t h0, h1, w0, w1;
  float div;
};
AvgWin avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const PoolParams& p) {
  int64_t hs = oh * p.stride[0] - p.padding[0], ws = ow * p.stride[1] - p.padding[1];
  int64_t he = std::min(hs + p.kernel[0], H + p.padding[0]),
          we = std::min(ws + p.kernel[1], W + p.padding[1]);
  const int64_t pool = (he - hs) * (we - ws);
  hs = std::max<int64_t>(hs, 0);
  ws = std::max<int64_t>(ws, 0);
  he = std::min(he, H);
  we = std::min(we, W);
  float div = p.divisor ? static_cast<float>(p.divisor)
                        : static_cast<float>(p.count_include_pad ? pool : (he - hs) * (we - ws));
  return AvgWin{hs, he, ws, we, div};
}
}  // namespace

void avg_pool(const TensorRef& input, const TensorRef& out, const PoolParams& p) {
  const int r = input.ndim;
  const int64_t H = input.sizes[r - 2], W = input.sizes[r - 1], Ho = out.sizes[r - 2],
                Wo = out.sizes[r - 1];
  const Planes pl = planes_of(input);
  const vm::LoopTable& L = vm::loops();
  for_planes(pl.count, H * W, [&](int64_t i) {
    std::vector<float> x(static_cast<size_t>(H * W)), y(static_cast<size_t>(Ho * Wo));
    const int64_t ies = static_cast<int64_t>(kernels::element_size(input.dtype));
    const char* base = static_cast<const char*>(input.data) + plane_off(input, pl, i) * ies;
    for (int64_t h = 0; h < H; ++h)
      L.load[static_cast<int>(input.dtype)](x.data() + h * W, base + h * input.strides[r - 2] * ies,
                                            input.strides[r - 1] * ies, W);
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const AvgWin w = avg_window(oh, ow, H, W, p);
        float s = 0.0f;
        for (int64_t h = w.h0; h < w.h1; ++h)
          for (int64_t c = w.w0; c < w.w1; ++c) s += x[static_cast<size_t>(h * W + c)];
        y[static_cast<size_t>(oh * Wo + ow)] = s / w.div;
      }
    const int64_t oes = static_cast<int64_t>(kernels::element_size(out.dtype));
    char* ob = static_cast<char*>(out.data) + plane_off(out, pl, i) * oes;
    for (int64_t oh = 0; oh < Ho; ++oh)
      L.store[static_cast<int>(out.dtype)](ob + oh * out.strides[r - 2] * oes,
                                           out.strides[r - 1] * oes, y.data() + oh * Wo, Wo);
  });
}

void avg_pool_backward(const TensorRef& grad_out, const TensorRef& grad_in, const PoolParams& p) {
  const int r = grad_in.ndim;
  const int64_t H = grad_in.sizes[r - 2], W = grad_in.sizes[r - 1], Ho = grad_out.sizes[r - 2],
                Wo = grad_out.sizes[r - 1];
  const Planes pl = planes_of(grad_in);
  const vm::LoopTable& L = vm::loops();
  for_planes(pl.count, H * W, [&](int64_t i) {
    std::vector<float> gx(static_cast<size_t>(H * W), 0.0f), gy(static_cast<size_t>(Ho * Wo));
    const int64_t ges = static_cast<int64_t>(kernels::element_size(grad_out.dtype));
    const char* gb = static_cast<const char*>(grad_out.data) + plane_off(grad_out, pl, i) * ges;
    for (int64_t oh = 0; oh < Ho; ++oh)
      L.load[static_cast<int>(grad_out.dtype)](gy.data() + oh * Wo,
                                               gb + oh * grad_out.strides[r - 2] * ges,
                                               grad_out.strides[r - 1] * ges, Wo);
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const AvgWin w = avg_window(oh, ow, H, W, p);
        const float g = gy[static_cast<size_t>(oh * Wo + ow)] / w.div;
        for (int64_t h = w.h0; h < w.h1; ++h)
          for (int64_t c = w.w0; c < w.w1; ++c) gx[static_cast<size_t>(h * W + c)] += g;
      }
    const int64_t oes = static_cast<int64_t>(kernels::element_size(grad_in.dtype));
    char* ob = static_cast<char*>(grad_in.data) + plane_off(grad_in, pl, i) * oes;
    for (int64_t h = 0; h < H; ++h)
      L.store[static_cast<int>(grad_in.dtype)](ob + h * grad_in.strides[r - 2] * oes,
                                               grad_in.strides[r - 1] * oes, gx.data() + h * W, W);
  });
}

// ---------------------------------------------------------------------------------------

namespace {
std::mutex g_custom_mu;
std::map<std::string, CustomKernel>& custom_table() {
  static std::map<std::string, CustomKernel> t;
  return t;
}
}  // namespace

void register_custom_kernel(const std::string& target, CustomKernel fn) {
  std::lock_guard<std::mutex> lock(g_custom_mu);
  custom_table()[target] = std::move(fn);
}

bool has_custom_kernel(const std::string& target) {
  std::lock_guard<std::mutex> lock(g_custom_mu);
  return custom_table().count(target) != 0;
}

const CustomKernel& custom_kernel(const std::string& target) {
  std::lock_guard<std::mutex> lock(g_custom_mu);
  auto it = custom_table().find(target);
  if (it == custom_table().end())
    throw ExecError(
        rt::str("custom op '", target, "' has no native kernel registered in this process"));
  return it->second;
}

}  // namespace neuron::cc::dense
