// A deliberately naive interpreter of Neuron IR: every op materializes a contiguous double
// tensor, views are evaluated by index arithmetic. It shares no code with the compiler's
// passes, codegen or kernels.
#include <algorithm>
#include <limits>

#include "test_util.h"

namespace neuron::cc::test {

namespace {

std::vector<int64_t> unravel(int64_t e, const Shape& s) {
  std::vector<int64_t> c(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    c[d] = s[d] ? e % s[d] : 0;
    e = s[d] ? e / s[d] : 0;
  }
  return c;
}
int64_t ravel(const std::vector<int64_t>& c, const Shape& s) {
  int64_t e = 0;
  for (size_t d = 0; d < s.size(); ++d) e = e * s[d] + c[d];
  return e;
}
// Index into a broadcast operand of shape `s` from an output coordinate `c` (right-aligned).
double bget(const HostTensor& t, const std::vector<int64_t>& c) {
  const Shape& s = t.type.shape;
  std::vector<int64_t> ic(s.size());
  const size_t off = c.size() - s.size();
  for (size_t d = 0; d < s.size(); ++d) ic[d] = s[d] == 1 ? 0 : c[off + d];
  return t.v[static_cast<size_t>(ravel(ic, s))];
}

bool is_int(DType t) { return !kernels::is_floating(t) && t != DType::Bool; }

double unary(Op op, double x) {
  switch (op) {
    case Op::copy:
    case Op::cast:
      return x;
    case Op::neg:
      return -x;
    case Op::abs:
      return std::fabs(x);
    case Op::exp:
      return std::exp(x);
    case Op::exp2:
      return std::exp2(x);
    case Op::expm1:
      return std::expm1(x);
    case Op::log:
      return std::log(x);
    case Op::log2:
      return std::log2(x);
    case Op::log10:
      return std::log10(x);
    case Op::log1p:
      return std::log1p(x);
    case Op::sqrt:
      return std::sqrt(x);
    case Op::rsqrt:
      return 1 / std::sqrt(x);
    case Op::reciprocal:
      return 1 / x;
    case Op::sin:
      return std::sin(x);
    case Op::cos:
      return std::cos(x);
    case Op::tan:
      return std::tan(x);
    case Op::tanh:
      return std::tanh(x);
    case Op::sigmoid:
      return 1 / (1 + std::exp(-x));
    case Op::relu:
      return x < 0 ? 0 : x;
    case Op::gelu:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case Op::gelu_tanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case Op::silu:
      return x / (1 + std::exp(-x));
    case Op::erf:
      return std::erf(x);
    case Op::erfc:
      return std::erfc(x);
    case Op::floor:
      return std::floor(x);
    case Op::ceil:
      return std::ceil(x);
    case Op::round:
      return std::nearbyint(x);
    case Op::trunc:
      return std::trunc(x);
    case Op::sign:
      return (x > 0) - (x < 0);
    case Op::logical_not:
      return x == 0;
    case Op::isnan:
      return std::isnan(x);
    case Op::isinf:
      return std::isinf(x);
    case Op::atan:
      return std::atan(x);
    default:
      throw std::runtime_error(std::string("reference: unary ") + op_name(op));
  }
}

double binary(Op op, double a, double b, bool ints) {
  switch (op) {
    case Op::add:
      return a + b;
    case Op::sub:
      return a - b;
    case Op::mul:
      return a * b;
    case Op::div:
      return a / b;
    case Op::floordiv:
      return std::floor(a / b);
    case Op::remainder:
      return a - b * std::floor(a / b);
    case Op::fmod:
      return std::fmod(a, b);
    case Op::pow:
      return std::pow(a, b);
    case Op::maximum:
      return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case Op::minimum:
      return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    case Op::eq:
      return a == b;
    case Op::ne:
      return a != b;
    case Op::lt:
      return a < b;
    case Op::le:
      return a <= b;
    case Op::gt:
      return a > b;
    case Op::ge:
      return a >= b;
    case Op::logical_and:
      return a != 0 && b != 0;
    case Op::logical_or:
      return a != 0 || b != 0;
    case Op::logical_xor:
      return (a != 0) != (b != 0);
    case Op::bitwise_and:
      return ints ? static_cast<double>(static_cast<int64_t>(a) & static_cast<int64_t>(b))
                  : (a != 0 && b != 0);
    case Op::bitwise_or:
      return ints ? static_cast<double>(static_cast<int64_t>(a) | static_cast<int64_t>(b))
                  : (a != 0 || b != 0);
    default:
      throw std::runtime_error(std::string("reference: binary ") + op_name(op));
  }
}

}  // namespace

std::vector<HostTensor> reference(const Graph& g, std::vector<HostTensor>& inputs) {
  std::map<int, HostTensor> val;
  for (size_t i = 0; i < g.inputs.size(); ++i) val[g.inputs[i]] = inputs[i];
  auto T = [&](int v) -> const HostTensor& { return val.at(v); };
  for (const Node& n : g.nodes) {
    const TensorType& ot = g.type(n.outputs[0]);
    HostTensor out{ot, std::vector<double>(static_cast<size_t>(ot.numel()), 0)};
    const OpKind k = op_kind(n.op);
    if (n.op == Op::constant) {
      if (n.attrs.has("blob")) {
        const auto& blob = g.blobs[static_cast<size_t>(n.attrs.i("blob"))];
        out = decode(ot, blob.data(), contiguous_strides(ot.shape));
      } else {
        std::fill(out.v.begin(), out.v.end(), round_to(n.attrs.f("value"), ot.dtype));
      }
    } else if (n.op == Op::iota) {
      const int64_t dim = normalize_dim(n.attrs.i("dim"), ot.rank(), "iota");
      for (int64_t e = 0; e < ot.numel(); ++e)
        out.v[static_cast<size_t>(e)] =
            round_to(n.attrs.f("start", 0) +
                         n.attrs.f("step", 1) * unravel(e, ot.shape)[static_cast<size_t>(dim)],
                     ot.dtype);
    } else if (k == OpKind::Unary || k == OpKind::Cast) {
      for (int64_t e = 0; e < ot.numel(); ++e)
        out.v[static_cast<size_t>(e)] =
            round_to(unary(n.op, bget(T(n.inputs[0]), unravel(e, ot.shape))), ot.dtype);
    } else if (k == OpKind::Binary) {
      const bool ints = is_int(ot.dtype);
      for (int64_t e = 0; e < ot.numel(); ++e) {
        const auto c = unravel(e, ot.shape);
        out.v[static_cast<size_t>(e)] = round_to(
            binary(n.op, bget(T(n.inputs[0]), c), bget(T(n.inputs[1]), c), ints), ot.dtype);
      }
    } else if (n.op == Op::where) {
      for (int64_t e = 0; e < ot.numel(); ++e) {
        const auto c = unravel(e, ot.shape);
        out.v[static_cast<size_t>(e)] = round_to(
            bget(T(n.inputs[0]), c) != 0 ? bget(T(n.inputs[1]), c) : bget(T(n.inputs[2]), c),
            ot.dtype);
      }
    } else if (k == OpKind::Reduce) {
      const HostTensor& x = T(n.inputs[0]);
      const Shape& is = x.type.shape;
      std::vector<bool> red(is.size(), n.attrs.ints("dims").empty());
      for (int64_t d : n.attrs.ints("dims"))
        red[static_cast<size_t>(normalize_dim(d, static_cast<int64_t>(is.size()), "r"))] = true;
      Shape keep;
      for (size_t d = 0; d < is.size(); ++d) keep.push_back(red[d] ? 1 : is[d]);
      const int64_t cnt = x.type.numel() / std::max<int64_t>(TensorType{ot.dtype, keep}.numel(), 1);
      std::vector<double> acc(static_cast<size_t>(TensorType{ot.dtype, keep}.numel()));
      std::vector<double> best(acc.size(), -INFINITY);
      std::vector<int64_t> arg(acc.size(), 0), seen(acc.size(), 0);
      const bool mx = n.op == Op::amax || n.op == Op::argmax,
                 mn = n.op == Op::amin || n.op == Op::argmin;
      for (auto& a : acc)
        a = n.op == Op::prod || n.op == Op::all ? 1 : mx ? -INFINITY : mn ? INFINITY : 0;
      for (int64_t e = 0; e < x.type.numel(); ++e) {
        auto c = unravel(e, is);
        std::vector<int64_t> rc = c, inner;
        for (size_t d = 0; d < is.size(); ++d)
          if (red[d]) rc[d] = 0;
        const size_t o = static_cast<size_t>(ravel(rc, keep));
        const double v = x.v[static_cast<size_t>(e)];
        int64_t in_idx = 0;
        for (size_t d = 0; d < is.size(); ++d)
          if (red[d]) in_idx = in_idx * is[d] + c[d];
        switch (n.op) {
          case Op::sum:
          case Op::mean:
            acc[o] += v;
            break;
          case Op::prod:
            acc[o] *= v;
            break;
          case Op::amax:
            acc[o] = std::isnan(v) || std::isnan(acc[o]) ? NAN : std::max(acc[o], v);
            break;
          case Op::amin:
            acc[o] = std::isnan(v) || std::isnan(acc[o]) ? NAN : std::min(acc[o], v);
            break;
          case Op::any:
            acc[o] = acc[o] || v != 0;
            break;
          case Op::all:
            acc[o] = acc[o] && v != 0;
            break;
          case Op::argmax:
            if (seen[o] == 0 || v > best[o]) {
              best[o] = v;
              arg[o] = in_idx;
            }
            seen[o] = 1;
            break;
          case Op::argmin:
            if (seen[o] == 0 || v < best[o]) {
              best[o] = v;
              arg[o] = in_idx;
            }
            seen[o] = 1;
            break;
          default:
            break;
        }
      }
      for (size_t o = 0; o < acc.size(); ++o) {
        double r = n.op == Op::argmax || n.op == Op::argmin ? static_cast<double>(arg[o]) : acc[o];
        if (n.op == Op::mean) r /= static_cast<double>(cnt);
        out.v[o] = round_to(r, ot.dtype);
      }
    } else if (k == OpKind::Move || k == OpKind::Struct) {
      const HostTensor& x = T(n.inputs[0]);
      const Shape& is = x.type.shape;
      for (int64_t e = 0; e < ot.numel(); ++e) {
        auto c = unravel(e, ot.shape);
        double v = 0;
        switch (n.op) {
          case Op::reshape:
            v = x.v[static_cast<size_t>(e)];
            break;
          case Op::permute: {
            const auto& p = n.attrs.ints("perm");
            std::vector<int64_t> ic(is.size());
            for (size_t i = 0; i < p.size(); ++i) ic[static_cast<size_t>(p[i])] = c[i];
            v = x.v[static_cast<size_t>(ravel(ic, is))];
            break;
          }
          case Op::expand:
            v = bget(x, c);
            break;
          case Op::slice: {
            const size_t d = static_cast<size_t>(
                normalize_dim(n.attrs.i("dim"), static_cast<int64_t>(is.size()), "s"));
            c[d] = n.attrs.i("start") + c[d] * n.attrs.i("step", 1);
            v = x.v[static_cast<size_t>(ravel(c, is))];
            break;
          }
          case Op::cat: {
            const size_t d = static_cast<size_t>(
                normalize_dim(n.attrs.i("dim"), static_cast<int64_t>(is.size()), "c"));
            int64_t off = 0;
            for (int u : n.inputs) {
              const HostTensor& t = T(u);
              if (c[d] < off + t.type.shape[d]) {
                auto ic = c;
                ic[d] -= off;
                v = t.v[static_cast<size_t>(ravel(ic, t.type.shape))];
                break;
              }
              off += t.type.shape[d];
            }
            break;
          }
          case Op::pad: {
            const auto& pads = n.attrs.ints("pads");
            auto ic = c;
            bool inside = true;
            for (size_t i = 0; i < pads.size() / 2; ++i) {
              const size_t d = is.size() - 1 - i;
              ic[d] -= pads[2 * i];
              if (ic[d] < 0 || ic[d] >= is[d]) inside = false;
            }
            v = inside ? x.v[static_cast<size_t>(ravel(ic, is))] : n.attrs.f("value", 0);
            break;
          }
          default:
            throw std::runtime_error(std::string("reference: ") + op_name(n.op));
        }
        out.v[static_cast<size_t>(e)] = round_to(v, ot.dtype);
      }
    } else if (n.op == Op::softmax || n.op == Op::log_softmax) {
      const HostTensor& x = T(n.inputs[0]);
      const int64_t d = normalize_dim(n.attrs.i("dim"), ot.rank(), "sm");
      const int64_t L = ot.shape[static_cast<size_t>(d)];
      for (int64_t e = 0; e < ot.numel(); ++e) {
        auto c = unravel(e, ot.shape);
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < L; ++j) {
          auto cc = c;
          cc[static_cast<size_t>(d)] = j;
          m = std::max(m, x.v[static_cast<size_t>(ravel(cc, ot.shape))]);
        }
        for (int64_t j = 0; j < L; ++j) {
          auto cc = c;
          cc[static_cast<size_t>(d)] = j;
          s += std::exp(x.v[static_cast<size_t>(ravel(cc, ot.shape))] - m);
        }
        const double xv = x.v[static_cast<size_t>(e)];
        out.v[static_cast<size_t>(e)] =
            round_to(n.op == Op::softmax ? std::exp(xv - m) / s : xv - m - std::log(s), ot.dtype);
      }
    } else if (n.op == Op::matmul) {
      const HostTensor &a = T(n.inputs[0]), &b = T(n.inputs[1]);
      const int r = ot.rank();
      const int64_t K = a.type.shape[static_cast<size_t>(r - 1)];
      for (int64_t e = 0; e < ot.numel(); ++e) {
        auto c = unravel(e, ot.shape);
        double s = 0;
        for (int64_t kk = 0; kk < K; ++kk) {
          auto ca = c, cb = c;
          ca[static_cast<size_t>(r - 1)] = kk;
          cb[static_cast<size_t>(r - 2)] = kk;
          s += a.v[static_cast<size_t>(ravel(ca, a.type.shape))] *
               b.v[static_cast<size_t>(ravel(cb, b.type.shape))];
        }
        out.v[static_cast<size_t>(e)] = round_to(s, ot.dtype);
      }
    } else if (n.op == Op::attention) {
      const HostTensor &q = T(n.inputs[0]), &kk = T(n.inputs[1]), &vv = T(n.inputs[2]);
      const Shape& qs = q.type.shape;
      const int64_t Skv = kk.type.shape[2], D = qs[3], Dv = vv.type.shape[3],
                    grp = qs[1] / kk.type.shape[1];
      const double scale = n.attrs.f("scale");
      for (int64_t b = 0; b < qs[0]; ++b)
        for (int64_t h = 0; h < qs[1]; ++h)
          for (int64_t i = 0; i < qs[2]; ++i) {
            std::vector<double> s(static_cast<size_t>(Skv));
            double m = -INFINITY;
            for (int64_t j = 0; j < Skv; ++j) {
              double d = 0;
              for (int64_t x = 0; x < D; ++x)
                d += q.v[static_cast<size_t>(ravel({b, h, i, x}, qs))] *
                     kk.v[static_cast<size_t>(ravel({b, h / grp, j, x}, kk.type.shape))];
              d *= scale;
              if (n.inputs.size() == 4) d += bget(T(n.inputs[3]), {b, h, i, j});
              if (n.attrs.i("causal", 0) && j > i) d = -INFINITY;
              s[static_cast<size_t>(j)] = d;
              m = std::max(m, d);
            }
            double l = 0;
            for (auto& x : s) {
              x = std::exp(x - m);
              l += x;
            }
            for (int64_t x = 0; x < Dv; ++x) {
              double o = 0;
              for (int64_t j = 0; j < Skv; ++j)
                o += s[static_cast<size_t>(j)] *
                     vv.v[static_cast<size_t>(ravel({b, h / grp, j, x}, vv.type.shape))];
              out.v[static_cast<size_t>(ravel({b, h, i, x}, ot.shape))] = round_to(o / l, ot.dtype);
            }
          }
    } else if (n.op == Op::index || n.op == Op::index_put) {
      // Only the forms the tests use: one index tensor (1-D) on one dim.
      const bool put = n.op == Op::index_put;
      const HostTensor& x = T(n.inputs[0]);
      int dim = -1, idxv = -1;
      for (size_t i = put ? 2 : 1; i < n.inputs.size(); ++i)
        if (n.inputs[i] >= 0) {
          dim = static_cast<int>(i - (put ? 2 : 1));
          idxv = n.inputs[i];
        }
      const HostTensor& idx = T(idxv);
      if (!put) {
        for (int64_t e = 0; e < ot.numel(); ++e) {
          auto c = unravel(e, ot.shape);
          auto xc = c;
          xc[static_cast<size_t>(dim)] =
              static_cast<int64_t>(idx.v[static_cast<size_t>(c[static_cast<size_t>(dim)])]);
          out.v[static_cast<size_t>(e)] = x.v[static_cast<size_t>(ravel(xc, x.type.shape))];
        }
      } else {
        out = x;
        const HostTensor& vals = T(n.inputs[1]);
        for (int64_t e = 0; e < vals.type.numel(); ++e) {
          auto c = unravel(e, vals.type.shape);
          auto xc = c;
          xc[static_cast<size_t>(dim)] =
              static_cast<int64_t>(idx.v[static_cast<size_t>(c[static_cast<size_t>(dim)])]);
          double& dst = out.v[static_cast<size_t>(ravel(xc, x.type.shape))];
          dst = n.attrs.i("accumulate", 0)
                    ? round_to(dst + vals.v[static_cast<size_t>(e)], ot.dtype)
                    : vals.v[static_cast<size_t>(e)];
        }
      }
    } else {
      throw std::runtime_error(std::string("reference: no rule for ") + op_name(n.op));
    }
    val[n.outputs[0]] = std::move(out);
  }
  std::vector<HostTensor> outs;
  for (int v : g.outputs) outs.push_back(val.at(v));
  for (const Mutation& m : g.mutations)
    inputs[static_cast<size_t>(m.input_index)] = val.at(m.value);
  return outs;
}

}  // namespace neuron::cc::test
