#include "conv.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "dispatch.h"
#include "gemm.h"
#include "convert.h"
#include "runtime/thread_pool.h"

namespace neuron::kernels {
namespace {

// The geometry of one im2col: an "image" [C, img] and its columns [C * K, cols] where cols are
// the positions of the convolution's output.
struct Geometry {
  int64_t C;        // channels in this group
  int64_t img[3];   // image spatial sizes (padded to 3 dims with leading 1s)
  int64_t cols[3];  // column (output position) sizes
  int64_t k[3], s[3], p[3], d[3];
  int64_t K() const { return k[0] * k[1] * k[2]; }
  int64_t P() const { return cols[0] * cols[1] * cols[2]; }
  int64_t I() const { return img[0] * img[1] * img[2]; }
};

Geometry geometry(const ConvArgs& a, int64_t C, bool image_is_input) {
  Geometry g{};
  g.C = C;
  const int off = 3 - a.nsp;
  for (int i = 0; i < 3; ++i) {
    g.img[i] = g.cols[i] = g.k[i] = g.s[i] = g.d[i] = 1;
    g.p[i] = 0;
  }
  for (int i = 0; i < a.nsp; ++i) {
    g.img[off + i] = image_is_input ? a.in[i] : a.out[i];
    g.cols[off + i] = image_is_input ? a.out[i] : a.in[i];
    g.k[off + i] = a.k[i];
    g.s[off + i] = a.stride[i];
    g.p[off + i] = a.pad[i];
    g.d[off + i] = a.dil[i];
  }
  return g;
}

// col[(c, kd, kh, kw), (od, oh, ow)] = img[c, od*s - p + kd*d, ...] (0 outside).
template <typename T>
void im2col(const Geometry& g, const T* img, T* col) {
  const int64_t K = g.K(), P = g.P();
  rt::parallel_for(
      0, g.C * K, std::max<int64_t>(1, 16384 / std::max<int64_t>(P, 1)),
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const int64_t c = r / K, kk = r % K;
          const int64_t kd = kk / (g.k[1] * g.k[2]), kh = (kk / g.k[2]) % g.k[1], kw = kk % g.k[2];
          const T* src = img + c * g.I();
          T* dst = col + r * P;
          const int64_t base = kw * g.d[2] - g.p[2];
          // Valid ow (stride 1): 0 <= ow + base < W.
          const int64_t lo = std::clamp<int64_t>(-base, 0, g.cols[2]);
          const int64_t hi = std::clamp<int64_t>(g.img[2] - base, lo, g.cols[2]);
          // Stride 1 in both and rows as wide as the image's: the valid rows of one output slice
          // are one shifted copy of the image, whose wrapped-around edge columns are then zeroed
          // (one copy per slice instead of one per row).
          const bool block = g.s[1] == 1 && g.s[2] == 1 && g.cols[2] == g.img[2];
          for (int64_t od = 0; od < g.cols[0]; ++od) {
            const int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
            T* dslice = dst + od * g.cols[1] * g.cols[2];
            if (block) {
              const bool valid_d = id >= 0 && id < g.img[0];
              // Valid oh: 0 <= oh - p + kh * d < H.
              const int64_t off_h = kh * g.d[1] - g.p[1];
              const int64_t a = valid_d ? std::clamp<int64_t>(-off_h, 0, g.cols[1]) : 0;
              const int64_t b = valid_d ? std::clamp<int64_t>(g.img[1] - off_h, a, g.cols[1]) : 0;
              const int64_t W = g.cols[2];
              std::memset(static_cast<void*>(dslice), 0, static_cast<size_t>(a * W) * sizeof(T));
              std::memset(static_cast<void*>(dslice + b * W), 0,
                          static_cast<size_t>((g.cols[1] - b) * W) * sizeof(T));
              if (a == b) continue;
              // dslice[a * W + j] = src[s0 + j] for the j whose source lies inside the image.
              const int64_t s0 = (id * g.img[1] + a + off_h) * W + base, n = (b - a) * W;
              const int64_t j0 = std::clamp<int64_t>(-s0, 0, n);
              const int64_t j1 = std::clamp<int64_t>(g.I() - s0, j0, n);
              T* d = dslice + a * W;
              std::memcpy(d + j0, src + s0 + j0, static_cast<size_t>(j1 - j0) * sizeof(T));
              for (int64_t r = 0; r < b - a; ++r) {
                for (int64_t ow = 0; ow < lo; ++ow) d[r * W + ow] = T(0.0f);
                for (int64_t ow = hi; ow < W; ++ow) d[r * W + ow] = T(0.0f);
              }
              for (int64_t j = 0; j < j0; ++j) d[j] = T(0.0f);  // (only inside edge columns)
              for (int64_t j = j1; j < n; ++j) d[j] = T(0.0f);
              continue;
            }
            for (int64_t oh = 0; oh < g.cols[1]; ++oh) {
              const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
              T* drow = dslice + oh * g.cols[2];
              if (id < 0 || id >= g.img[0] || ih < 0 || ih >= g.img[1]) {
                std::memset(static_cast<void*>(drow), 0,
                            static_cast<size_t>(g.cols[2]) * sizeof(T));
                continue;
              }
              const T* srow = src + (id * g.img[1] + ih) * g.img[2];
              if (g.s[2] == 1) {
                std::memset(static_cast<void*>(drow), 0, static_cast<size_t>(lo) * sizeof(T));
                std::memcpy(drow + lo, srow + lo + base, static_cast<size_t>(hi - lo) * sizeof(T));
                std::memset(static_cast<void*>(drow + hi), 0,
                            static_cast<size_t>(g.cols[2] - hi) * sizeof(T));
              } else {
                for (int64_t ow = 0; ow < g.cols[2]; ++ow) {
                  const int64_t iw = ow * g.s[2] + base;
                  drow[ow] = (iw >= 0 && iw < g.img[2]) ? srow[iw] : T(0.0f);
                }
              }
            }
          }
        }
      });
}

// img[c, ...] += col[(c, k...), (o...)] (the adjoint of im2col), fp32/fp64 accumulation.
template <typename A>
void col2im(const Geometry& g, const A* col, A* img) {
  const int64_t K = g.K(), P = g.P();
  rt::parallel_for(0, g.C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      A* dst = img + c * g.I();
      for (int64_t kk = 0; kk < K; ++kk) {
        const int64_t kd = kk / (g.k[1] * g.k[2]), kh = (kk / g.k[2]) % g.k[1], kw = kk % g.k[2];
        const A* src = col + (c * K + kk) * P;
        for (int64_t od = 0; od < g.cols[0]; ++od) {
          const int64_t id = od * g.s[0] - g.p[0] + kd * g.d[0];
          if (id < 0 || id >= g.img[0]) continue;
          for (int64_t oh = 0; oh < g.cols[1]; ++oh) {
            const int64_t ih = oh * g.s[1] - g.p[1] + kh * g.d[1];
            if (ih < 0 || ih >= g.img[1]) continue;
            const A* srow = src + (od * g.cols[1] + oh) * g.cols[2];
            A* drow = dst + (id * g.img[1] + ih) * g.img[2];
            const int64_t base = kw * g.d[2] - g.p[2], st = g.s[2];
            // The ow with 0 <= ow * st + base < W, as a range (no test per element).
            const int64_t lo = std::min(base >= 0 ? 0 : (-base + st - 1) / st, g.cols[2]);
            const int64_t hi =
                std::clamp<int64_t>(g.img[2] - base <= 0 ? 0 : (g.img[2] - base + st - 1) / st,
                                    lo, g.cols[2]);
            if (st == 1) {
              for (int64_t ow = lo; ow < hi; ++ow) drow[ow + base] += srow[ow];
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) drow[ow * st + base] += srow[ow];
            }
          }
        }
      }
    }
  });
}

// C[m, n] = alpha * op(A) @ op(B) + beta * C (dense row-major operands, optional transposes).
void matmul(int64_t m, int64_t n, int64_t k, const void* A, bool ta, const void* B, bool tb,
            DType in, void* C, DType out, double beta) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a = A;
  p.a_rs = ta ? 1 : k;
  p.a_cs = ta ? m : 1;
  p.b = B;
  p.b_rs = tb ? 1 : n;
  p.b_cs = tb ? k : 1;
  p.c = C;
  p.c_rs = n;
  p.c_cs = 1;
  p.in_dtype = in;
  p.out_dtype = out;
  p.beta = beta;
  gemm(p);
}

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::Float32;
  if constexpr (std::is_same_v<T, double>) return DType::Float64;
  if constexpr (std::is_same_v<T, bf16>) return DType::BFloat16;
  return DType::Float16;
}

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Rows out[c, :] (P elements each) of an accumulation buffer converted into T.
template <typename T>
void store_acc(const Acc<T>* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, Acc<T>>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
  } else {
    row_from_f32(src, dst, dtype_of<T>(), n);
  }
}

// out_img[n] (Co channels of P positions) = W [Co, Ci*K] @ cols(in_img[n]) + bias, all groups.
template <typename T>
void forward_typed(const ConvArgs& a, const T* input, const T* weight, const T* bias, T* out) {
  const int64_t G = a.groups;
  const int64_t Cin_g = a.Cin / G, Cout_g = a.Cout / G;
  const bool tr = a.transposed;
  // Convolution: image = input, columns = output positions. Transposed: columns = input
  // positions and the output is the image (col2im).
  const Geometry g = tr ? geometry(a, Cout_g, false) : geometry(a, Cin_g, true);
  const int64_t K = g.K(), P = g.P(), I = g.I();
  const int64_t in_img = a.Cin * (tr ? P : I), out_img = a.Cout * (tr ? I : P);
  const bool direct = !tr && K == 1 && g.s[0] == 1 && g.s[1] == 1 && g.s[2] == 1 && g.p[0] == 0 &&
                      g.p[1] == 0 && g.p[2] == 0 && g.cols[0] == g.img[0] &&
                      g.cols[1] == g.img[1] && g.cols[2] == g.img[2];
  const DType dt = dtype_of<T>();
  auto one_image = [&](int64_t n, std::vector<T>& col, std::vector<Acc<T>>& acc) {
    const T* x = input + n * in_img;
    T* y = out + n * out_img;
    for (int64_t gi = 0; gi < G; ++gi) {
      if (!tr) {
        const T* xg = x + gi * Cin_g * I;
        const T* cols = xg;
        if (!direct) {
          im2col(g, xg, col.data());
          cols = col.data();
        }
        matmul(Cout_g, P, Cin_g * K, weight + gi * Cout_g * Cin_g * K, false, cols, false, dt,
               y + gi * Cout_g * P, dt, 0.0);
      } else {
        // col [Cout_g*K, P] = W_g^T [Cout_g*K, Cin_g] @ x_g [Cin_g, P], then col2im into y.
        const T* xg = x + gi * Cin_g * P;
        acc.assign(static_cast<size_t>(Cout_g * K * P), Acc<T>(0));
        matmul(Cout_g * K, P, Cin_g, weight + gi * Cin_g * Cout_g * K, true, xg, false, dt,
               acc.data(), std::is_same_v<T, double> ? DType::Float64 : DType::Float32, 0.0);
        std::vector<Acc<T>> img(static_cast<size_t>(Cout_g * I), Acc<T>(0));
        col2im(g, acc.data(), img.data());
        store_acc<T>(img.data(), y + gi * Cout_g * I, Cout_g * I);
      }
    }
    if (bias) {
      const int64_t sp = tr ? I : P;
      for (int64_t c = 0; c < a.Cout; ++c) {
        const Acc<T> b = static_cast<Acc<T>>(bias[c]);
        T* row = y + c * sp;
        for (int64_t i = 0; i < sp; ++i) row[i] = T(static_cast<Acc<T>>(row[i]) + b);
      }
    }
  };
  // Images side by side, each with one BLAS thread (gemm sees the nesting): no synchronisation
  // between the im2col and GEMM steps, and every thread streams its own images.
  if (a.N >= 2 && rt::num_threads() > 1) {
    // Small images: images side by side, each with one BLAS thread (gemm sees the nesting).
    rt::parallel_for(0, a.N, 1, [&](int64_t n0, int64_t n1) {
      std::vector<T> col(direct ? 0 : static_cast<size_t>(Cin_g * K * P));
      std::vector<Acc<T>> acc;
      for (int64_t n = n0; n < n1; ++n) one_image(n, col, acc);
    });
    return;
  }
  std::vector<T> col(direct || tr ? 0 : static_cast<size_t>(Cin_g * K * P));
  std::vector<Acc<T>> acc;
  for (int64_t n = 0; n < a.N; ++n) one_image(n, col, acc);
}

template <typename T>
void backward_typed(const ConvArgs& a, const T* grad_out, const T* input, const T* weight,
                    T* grad_input, T* grad_weight, T* grad_bias) {
  const int64_t G = a.groups;
  const int64_t Cin_g = a.Cin / G, Cout_g = a.Cout / G;
  const bool tr = a.transposed;
  const DType dt = dtype_of<T>();
  const DType acc_dt = std::is_same_v<T, double> ? DType::Float64 : DType::Float32;
  // Conventional conv: image = input (Cin_g channels), columns = output positions.
  // Transposed: image = output (Cout_g channels), columns = input positions.
  const Geometry g = tr ? geometry(a, Cout_g, false) : geometry(a, Cin_g, true);
  const int64_t K = g.K(), P = g.P(), I = g.I();
  const int64_t in_img = a.Cin * (tr ? P : I), out_img = a.Cout * (tr ? I : P);
  const int64_t img_ch = tr ? Cout_g : Cin_g;  // channels of the image side per group
  const int64_t col_ch = tr ? Cin_g : Cout_g;  // channels of the column side per group
  // Weight as [col_ch, img_ch * K] for a conv ([Cout_g, Cin_g*K]) and for a transposed conv
  // ([Cin_g, Cout_g*K]): the same matrix shape role in both cases.
  const int64_t wsize = col_ch * img_ch * K;
  // Images are processed in a fixed number of blocks (it depends on the shapes only, never on
  // the thread count), each accumulating its own weight-gradient partial; the partials are then
  // summed in block order. Blocks run side by side with one BLAS thread each.
  int64_t blocks = std::min<int64_t>(a.N, 8);
  const double partial_bytes = static_cast<double>(G * wsize) * sizeof(Acc<T>);
  while (blocks > 1 && grad_weight &&
         partial_bytes * static_cast<double>(blocks) > 64.0 * (1 << 20))
    --blocks;
  std::vector<Acc<T>> gw(grad_weight ? static_cast<size_t>(blocks * G * wsize) : 0, Acc<T>(0));
  rt::parallel_for(0, std::max<int64_t>(blocks, 1), 1, [&](int64_t b0, int64_t b1) {
    std::vector<T> col(static_cast<size_t>(img_ch * K * P));
    std::vector<Acc<T>> dcol(grad_input ? static_cast<size_t>(img_ch * K * P) : 0);
    std::vector<Acc<T>> gimg(grad_input ? static_cast<size_t>(img_ch * I) : 0);
    for (int64_t blk = b0; blk < b1; ++blk) {
      Acc<T>* gw_blk = grad_weight ? gw.data() + blk * G * wsize : nullptr;
      const int64_t n0 = a.N * blk / blocks, n1 = a.N * (blk + 1) / blocks;
      for (int64_t n = n0; n < n1; ++n) {
        // The image side and the column side of this sample.
        const T* image = tr ? grad_out + n * out_img : input + n * in_img;
        const T* column_side = tr ? input + n * in_img : grad_out + n * out_img;
        T* grad_image = (!tr && grad_input) ? grad_input + n * in_img : nullptr;
        T* grad_column = (tr && grad_input) ? grad_input + n * in_img : nullptr;
        for (int64_t gi = 0; gi < G; ++gi) {
          const T* img_g = image + gi * img_ch * I;
          const T* colside_g = column_side + gi * col_ch * P;  // [col_ch, P]
          const T* w_g = weight + gi * wsize;                  // [col_ch, img_ch*K]
          const bool need_cols = grad_weight || (tr && grad_input);
          if (need_cols) im2col(g, img_g, col.data());  // [img_ch*K, P]
          if (grad_weight) {
            // dW_g [col_ch, img_ch*K] += colside_g [col_ch, P] @ col^T [P, img_ch*K]   (conv)
            // transposed: dW_g [Cin_g, Cout_g*K] += x_g [Cin_g, P] @ col(dout)^T
            matmul(col_ch, img_ch * K, P, colside_g, false, col.data(), true, dt,
                   gw_blk + gi * wsize, acc_dt, 1.0);
          }
          if (!grad_input) continue;
          if (!tr) {
            // dcol [Cin_g*K, P] = W_g^T [Cin_g*K, Cout_g] @ dout_g [Cout_g, P]; col2im into dx.
            matmul(img_ch * K, P, col_ch, w_g, true, colside_g, false, dt, dcol.data(), acc_dt,
                   0.0);
            std::fill(gimg.begin(), gimg.end(), Acc<T>(0));
            col2im(g, dcol.data(), gimg.data());
            store_acc<T>(gimg.data(), grad_image + gi * img_ch * I, img_ch * I);
          } else {
            // dx_g [Cin_g, P] = W_g [Cin_g, Cout_g*K] @ col(dout_g) [Cout_g*K, P]
            matmul(col_ch, P, img_ch * K, w_g, false, col.data(), false, dt,
                   grad_column + gi * col_ch * P, dt, 0.0);
          }
        }
      }
    }
  });
  if (grad_weight && blocks > 1) {
    const int64_t total = G * wsize;
    rt::parallel_for(0, total, 1 << 14, [&](int64_t i0, int64_t i1) {
      for (int64_t blk = 1; blk < blocks; ++blk) {
        const Acc<T>* src = gw.data() + blk * total;
        for (int64_t i = i0; i < i1; ++i) gw[static_cast<size_t>(i)] += src[i];
      }
    });
  }
  if (grad_weight) store_acc<T>(gw.data(), grad_weight, G * wsize);
  if (grad_bias) {
    const int64_t sp = tr ? I : P;
    rt::parallel_for(0, a.Cout, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double s = 0;
        for (int64_t n = 0; n < a.N; ++n) {
          const T* row = grad_out + n * out_img + c * sp;
          for (int64_t i = 0; i < sp; ++i) s += static_cast<double>(static_cast<Acc<T>>(row[i]));
        }
        grad_bias[c] = T(static_cast<Acc<T>>(s));
      }
    });
  }
}

void validate(const ConvArgs& a) {
  if (a.nsp < 1 || a.nsp > 3)
    throw std::invalid_argument("convolution: 1 to 3 spatial dims supported");
  if (a.groups <= 0 || a.Cin % a.groups != 0 || a.Cout % a.groups != 0)
    throw std::invalid_argument("convolution: channels must be divisible by groups");
}

template <typename F>
void dispatch_conv(DType t, F&& f) {
  switch (t) {
    case DType::Float32:
      return f(float{});
    case DType::Float64:
      return f(double{});
    case DType::BFloat16:
      return f(bf16{});
    case DType::Float16:
      return f(f16{});
    default:
      throw std::invalid_argument("convolution: unsupported dtype " + std::string(dtype_name(t)));
  }
}

}  // namespace

void conv_forward(const ConvArgs& a, const void* input, const void* weight, const void* bias,
                  void* out) {
  validate(a);
  dispatch_conv(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_typed<T>(a, static_cast<const T*>(input), static_cast<const T*>(weight),
                     static_cast<const T*>(bias), static_cast<T*>(out));
  });
}

void conv_backward(const ConvArgs& a, const void* grad_out, const void* input, const void* weight,
                   void* grad_input, void* grad_weight, void* grad_bias) {
  validate(a);
  dispatch_conv(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_typed<T>(a, static_cast<const T*>(grad_out), static_cast<const T*>(input),
                      static_cast<const T*>(weight), static_cast<T*>(grad_input),
                      static_cast<T*>(grad_weight), static_cast<T*>(grad_bias));
  });
}

}  // namespace neuron::kernels
