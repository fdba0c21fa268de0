#include "vm.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "error.h"
#include "runtime/thread_pool.h"
#include "vm_loops.h"

namespace neuron::cc::vm {

namespace {

const char* const kOpcNames[] = {
#define VMOP(name, cls) #name,
#include "vm_ops.def"
#undef VMOP
};

enum class Cls : uint8_t { FU, FB, IU, IB, IC, X };
const Cls kOpcCls[] = {
#define VMOP(name, cls) Cls::cls,
#include "vm_ops.def"
#undef VMOP
};

Cls cls_of(Opc op) { return kOpcCls[static_cast<int>(op)]; }

// Scratch registers of one thread.
struct Scratch {
  std::vector<float> fv;
  std::vector<int64_t> iv;
  std::vector<float> fs;
  std::vector<int64_t> is;
};
thread_local Scratch tls_scratch;

// Executes one kernel over a range of rows on the calling thread.
class RowRunner {
 public:
  RowRunner(const Kernel& k, char* const* bases, int64_t chunk)
      : k_(k),
        L_(loops()),
        bases_(bases),
        ndim_(static_cast<int>(k.shape.size())),
        n_outer_(ndim_ - k.n_inner),
        chunk_(std::max<int64_t>(chunk, 1)) {
    Scratch& s = tls_scratch;
    const size_t fv = static_cast<size_t>(k.nf_vec + 1) * static_cast<size_t>(chunk_);
    const size_t iv = static_cast<size_t>(k.ni_vec + 1) * static_cast<size_t>(chunk_);
    if (s.fv.size() < fv) s.fv.resize(fv);
    if (s.iv.size() < iv) s.iv.resize(iv);
    if (s.fs.size() < static_cast<size_t>(k.nf_sc + 1))
      s.fs.resize(static_cast<size_t>(k.nf_sc + 1));
    if (s.is.size() < static_cast<size_t>(k.ni_sc + 1))
      s.is.resize(static_cast<size_t>(k.ni_sc + 1));
    fv_ = s.fv.data();
    iv_ = s.iv.data();
    fs_ = s.fs.data();
    is_ = s.is.data();
    row_base_.resize(k.operands.size());
    row_valid_.resize(k.operands.size());
    esize_.resize(k.operands.size());
    for (size_t o = 0; o < k.operands.size(); ++o)
      esize_[o] = static_cast<int64_t>(kernels::element_size(k.operands[o].dtype));
    inner_len_ = 1;
    for (int d = n_outer_; d < ndim_; ++d) inner_len_ *= k.shape[static_cast<size_t>(d)];
  }

  // Runs row `r`, chunks [c_begin, c_end) (all chunks when the kernel has row state).
  void run_row(int64_t r, int64_t c_begin, int64_t c_end) {
    set_row(r);
    exec(k_.pre, 0, 1);
    for (int64_t c = c_begin; c < c_end; ++c) {
      const int64_t c0 = c * chunk_;
      const int64_t n = std::min(chunk_, inner_len_ - c0);
      exec(k_.body, c0, n);
    }
    exec(k_.post, 0, 1);
  }

 private:
  void set_row(int64_t r) {
    int64_t rem = r;
    for (int d = n_outer_ - 1; d >= 0; --d) {
      const int64_t s = k_.shape[static_cast<size_t>(d)];
      outer_[d] = s ? rem % s : 0;
      rem = s ? rem / s : 0;
    }
    for (size_t o = 0; o < k_.operands.size(); ++o) {
      const Operand& op = k_.operands[o];
      int64_t off = op.offset;
      for (int d = 0; d < n_outer_; ++d) off += outer_[d] * op.strides[static_cast<size_t>(d)];
      row_base_[o] = bases_[o] + off * esize_[o];
      bool valid = true;
      for (const Mask& m : op.masks)
        if (m.dim < n_outer_ && (outer_[m.dim] < m.lo || outer_[m.dim] >= m.hi)) valid = false;
      row_valid_[o] = valid;
    }
  }

  float* F(uint16_t r) {
    return reg_is_scalar(r) ? fs_ + reg_index(r)
                            : fv_ + static_cast<int64_t>(reg_index(r)) * chunk_;
  }
  int64_t* I(uint16_t r) {
    return reg_is_scalar(r) ? is_ + reg_index(r)
                            : iv_ + static_cast<int64_t>(reg_index(r)) * chunk_;
  }
  float* ftmp() { return fv_ + static_cast<int64_t>(k_.nf_vec) * chunk_; }
  int64_t* itmp() { return iv_ + static_cast<int64_t>(k_.ni_vec) * chunk_; }

  // Calls seg(pos_in_chunk, len, inner_coords_of_segment_start) for the pieces of the chunk
  // [c0, c0+n) that lie within one run of the innermost dim.
  template <typename Seg>
  void segments(int64_t c0, int64_t n, Seg&& seg) {
    if (k_.n_inner <= 1) {
      int64_t coord[1] = {c0};
      seg(int64_t{0}, n, coord);
      return;
    }
    const int64_t inner_last = k_.shape.back();
    int64_t coord[32];
    int64_t rem = c0;
    for (int d = ndim_ - 1; d >= n_outer_; --d) {
      const int64_t s = k_.shape[static_cast<size_t>(d)];
      coord[d - n_outer_] = rem % s;
      rem /= s;
    }
    int64_t pos = 0;
    while (pos < n) {
      const int64_t len = std::min(n - pos, inner_last - coord[k_.n_inner - 1]);
      seg(pos, len, coord);
      pos += len;
      coord[k_.n_inner - 1] += len;
      for (int d = k_.n_inner - 1; d > 0 && coord[d] >= k_.shape[static_cast<size_t>(n_outer_ + d)];
           --d) {
        coord[d] = 0;
        ++coord[d - 1];
      }
    }
  }

  // Element offset of an inner coordinate for an operand and whether the segment
  // [coord, coord+len) (innermost) is within the operand's masks: returns the valid
  // sub-range [v0, v1) of the segment.
  void segment_info(const Operand& op, const int64_t* coord, int64_t len, int64_t* off, int64_t* v0,
                    int64_t* v1) {
    int64_t o = 0;
    for (int d = 0; d < k_.n_inner; ++d)
      o += coord[d] * op.strides[static_cast<size_t>(n_outer_ + d)];
    *off = o;
    int64_t a = 0, b = len;
    const int last = ndim_ - 1;
    for (const Mask& m : op.masks) {
      if (m.dim < n_outer_) continue;
      const int64_t c = coord[m.dim - n_outer_];
      if (m.dim == last) {
        a = std::max(a, m.lo - c);
        b = std::min(b, m.hi - c);
      } else if (c < m.lo || c >= m.hi) {
        b = a;
      }
    }
    *v0 = a;
    *v1 = std::max(a, b);
  }

  void load(const Instr& in, int64_t c0, int64_t n) {
    const size_t o = static_cast<size_t>(in.aux);
    const Operand& op = k_.operands[o];
    const int idt = static_cast<int>(op.dtype);
    const bool is_int = reg_is_int(in.dst);
    if (reg_is_scalar(in.dst)) {
      // A per-row value: the inner strides are 0 (or the row has one element).
      char* p = row_base_[o];
      bool valid = row_valid_[o];
      if (valid && n > 0) {
        int64_t coord[32] = {};
        int64_t rem = c0;
        for (int d = ndim_ - 1; d >= n_outer_; --d) {
          const int64_t s = k_.shape[static_cast<size_t>(d)];
          coord[d - n_outer_] = s ? rem % s : 0;
          rem = s ? rem / s : 0;
        }
        int64_t off, v0, v1;
        segment_info(op, coord, 1, &off, &v0, &v1);
        p += off * esize_[o];
        valid = v1 > v0;
      }
      if (is_int) {
        int64_t* d = I(in.dst);
        if (valid)
          L_.loadi[idt](d, p, esize_[o], 1);
        else
          d[0] = 0;
      } else {
        float* d = F(in.dst);
        if (valid)
          L_.load[idt](d, p, esize_[o], 1);
        else
          d[0] = 0.0f;
      }
      return;
    }
    const int64_t es = esize_[o];
    if (!row_valid_[o]) {
      if (is_int)
        L_.ifill(I(in.dst), 0, n);
      else
        L_.fill(F(in.dst), 0.0f, n);
      return;
    }
    const int64_t inner_stride = op.strides.back() * es;
    segments(c0, n, [&](int64_t pos, int64_t len, const int64_t* coord) {
      int64_t off, v0, v1;
      segment_info(op, coord, len, &off, &v0, &v1);
      const char* p = row_base_[o] + off * es;
      if (is_int) {
        int64_t* d = I(in.dst) + pos;
        if (v0 > 0) L_.ifill(d, 0, v0);
        if (v1 > v0) L_.loadi[idt](d + v0, p + v0 * inner_stride, inner_stride, v1 - v0);
        if (len > v1) L_.ifill(d + v1, 0, len - v1);
      } else {
        float* d = F(in.dst) + pos;
        if (v0 > 0) L_.fill(d, 0.0f, v0);
        if (v1 > v0) L_.load[idt](d + v0, p + v0 * inner_stride, inner_stride, v1 - v0);
        if (len > v1) L_.fill(d + v1, 0.0f, len - v1);
      }
    });
  }

  void store(const Instr& in, int64_t c0, int64_t n) {
    const size_t o = static_cast<size_t>(in.aux);
    const Operand& op = k_.operands[o];
    const int idt = static_cast<int>(op.dtype);
    const int64_t es = esize_[o];
    const bool is_int = reg_is_int(in.a);
    const bool scalar_src = reg_is_scalar(in.a);
    bool inner_broadcast = true;
    for (int d = n_outer_; d < ndim_; ++d)
      if (op.strides[static_cast<size_t>(d)] != 0 && k_.shape[static_cast<size_t>(d)] != 1)
        inner_broadcast = false;
    if (inner_broadcast) {  // one element per row (a reduced output)
      if (is_int)
        L_.storei[idt](row_base_[o], es, I(in.a), 1);
      else
        L_.store[idt](row_base_[o], es, F(in.a), 1);
      return;
    }
    const float* fsrc = nullptr;
    const int64_t* isrc = nullptr;
    if (scalar_src) {  // broadcast a per-row value over the chunk
      if (is_int) {
        L_.ifill(itmp(), I(in.a)[0], n);
        isrc = itmp();
      } else {
        L_.fill(ftmp(), F(in.a)[0], n);
        fsrc = ftmp();
      }
    } else if (is_int) {
      isrc = I(in.a);
    } else {
      fsrc = F(in.a);
    }
    const int64_t inner_stride = op.strides.back() * es;
    segments(c0, n, [&](int64_t pos, int64_t len, const int64_t* coord) {
      int64_t off = 0;
      for (int d = 0; d < k_.n_inner; ++d)
        off += coord[d] * op.strides[static_cast<size_t>(n_outer_ + d)];
      char* p = row_base_[o] + off * es;
      if (is_int) {
        L_.storei[idt](p, inner_stride, isrc + pos, len);
      } else {
        L_.store[idt](p, inner_stride, fsrc + pos, len);
      }
    });
  }

  void iota(const Instr& in, int64_t c0, int64_t n) {
    const int dim = in.aux;
    if (reg_is_scalar(in.dst) || dim < n_outer_) {
      const int64_t v = in.lo + in.hi * (dim < n_outer_ ? outer_[dim] : 0);
      if (reg_is_scalar(in.dst)) {
        I(in.dst)[0] = v;
      } else {
        L_.ifill(I(in.dst), v, n);
      }
      return;
    }
    int64_t* d = I(in.dst);
    const int rel = dim - n_outer_;
    segments(c0, n, [&](int64_t pos, int64_t len, const int64_t* coord) {
      if (dim == ndim_ - 1) {
        for (int64_t i = 0; i < len; ++i) d[pos + i] = in.lo + in.hi * (coord[rel] + i);
      } else {
        L_.ifill(d + pos, in.lo + in.hi * coord[rel], len);
      }
    });
  }

  static int mode2(uint16_t a, uint16_t b) {
    return (reg_is_scalar(a) ? 1 : 0) | (reg_is_scalar(b) ? 2 : 0);
  }

  void check_divisor(const Instr& in, int64_t n) {
    const int64_t* b = I(in.b);
    const int64_t m = reg_is_scalar(in.b) ? 1 : n;
    for (int64_t i = 0; i < m; ++i)
      if (b[i] == 0)
        throw ExecError(rt::str("fused kernel: integer division by zero (", opc_name(in.op), ")"));
  }

  void exec(const std::vector<Instr>& code, int64_t c0, int64_t n) {
    for (const Instr& in : code) {
      const int64_t len = reg_is_scalar(in.dst) ? 1 : n;
      switch (cls_of(in.op)) {
        case Cls::FU:
          L_.funary[static_cast<int>(in.op)](F(in.dst), F(in.a), len);
          continue;
        case Cls::FB:
          L_.fbinary[static_cast<int>(in.op)](F(in.dst), F(in.a), F(in.b), len, mode2(in.a, in.b));
          continue;
        case Cls::IU:
          L_.iunary[static_cast<int>(in.op)](I(in.dst), I(in.a), len);
          continue;
        case Cls::IB:
          if (in.op == Opc::IFloorDiv || in.op == Opc::IRem || in.op == Opc::IFmod)
            check_divisor(in, n);
          L_.ibinary[static_cast<int>(in.op)](I(in.dst), I(in.a), I(in.b), len, mode2(in.a, in.b));
          continue;
        case Cls::IC:
          L_.icmp[static_cast<int>(in.op)](F(in.dst), I(in.a), I(in.b), len, mode2(in.a, in.b));
          continue;
        case Cls::X:
          break;
      }
      switch (in.op) {
        case Opc::Load:
          load(in, c0, n);
          break;
        case Opc::Store:
          store(in, c0, n);
          break;
        case Opc::Const:
          if (reg_is_scalar(in.dst))
            F(in.dst)[0] = static_cast<float>(in.imm);
          else
            L_.fill(F(in.dst), static_cast<float>(in.imm), len);
          break;
        case Opc::IConst:
          if (reg_is_scalar(in.dst))
            I(in.dst)[0] = in.lo;
          else
            L_.ifill(I(in.dst), in.lo, len);
          break;
        case Opc::Iota:
          iota(in, c0, n);
          break;
        case Opc::I2F:
          if (reg_is_scalar(in.a) && !reg_is_scalar(in.dst)) {
            L_.fill(F(in.dst), static_cast<float>(I(in.a)[0]), len);
          } else {
            L_.i2f(F(in.dst), I(in.a), len);
          }
          break;
        case Opc::F2I:
          if (reg_is_scalar(in.a) && !reg_is_scalar(in.dst)) {
            int64_t v;
            L_.f2i(&v, F(in.a), 1);
            L_.ifill(I(in.dst), v, len);
          } else {
            L_.f2i(I(in.dst), F(in.a), len);
          }
          break;
        case Opc::Where: {
          const int mode = (reg_is_scalar(in.a) ? 1 : 0) | (reg_is_scalar(in.b) ? 2 : 0) |
                           (reg_is_scalar(in.c) ? 4 : 0);
          L_.where(F(in.dst), F(in.a), F(in.b), F(in.c), len, mode);
          break;
        }
        case Opc::IWhere: {
          const int mode = (reg_is_scalar(in.a) ? 1 : 0) | (reg_is_scalar(in.b) ? 2 : 0) |
                           (reg_is_scalar(in.c) ? 4 : 0);
          L_.iwhere(I(in.dst), F(in.a), I(in.b), I(in.c), len, mode);
          break;
        }
        case Opc::RSum: {
          float* acc = F(in.dst);
          acc[0] += reg_is_scalar(in.a) ? F(in.a)[0] * static_cast<float>(n) : L_.rsum(F(in.a), n);
          break;
        }
        case Opc::RProd: {
          float* acc = F(in.dst);
          if (reg_is_scalar(in.a)) {
            for (int64_t i = 0; i < n; ++i) acc[0] *= F(in.a)[0];
          } else {
            acc[0] *= L_.rprod(F(in.a), n);
          }
          break;
        }
        case Opc::RMax:
        case Opc::RMin: {
          float* acc = F(in.dst);
          const float v = reg_is_scalar(in.a)
                              ? F(in.a)[0]
                              : (in.op == Opc::RMax ? L_.rmax(F(in.a), n) : L_.rmin(F(in.a), n));
          float both[2] = {acc[0], v};
          acc[0] = in.op == Opc::RMax ? L_.rmax(both, 2) : L_.rmin(both, 2);
          break;
        }
        case Opc::RArgMax:
        case Opc::RArgMin: {
          const float* src = F(in.a);
          if (reg_is_scalar(in.a)) {
            L_.fill(ftmp(), src[0], n);
            src = ftmp();
          }
          (in.op == Opc::RArgMax ? L_.rargmax : L_.rargmin)(src, n, c0, F(in.b), I(in.dst));
          break;
        }
        case Opc::IRSum: {
          int64_t* acc = I(in.dst);
          const int64_t v = reg_is_scalar(in.a)
                                ? static_cast<int64_t>(static_cast<uint64_t>(I(in.a)[0]) *
                                                       static_cast<uint64_t>(n))
                                : L_.risum(I(in.a), n);
          acc[0] = static_cast<int64_t>(static_cast<uint64_t>(acc[0]) + static_cast<uint64_t>(v));
          break;
        }
        case Opc::IRMax:
        case Opc::IRMin: {
          int64_t* acc = I(in.dst);
          const int64_t v = reg_is_scalar(in.a) ? I(in.a)[0]
                                                : (in.op == Opc::IRMax ? L_.rimax(I(in.a), n)
                                                                       : L_.rimin(I(in.a), n));
          acc[0] = in.op == Opc::IRMax ? std::max(acc[0], v) : std::min(acc[0], v);
          break;
        }
        case Opc::IRProd: {
          int64_t* acc = I(in.dst);
          if (reg_is_scalar(in.a)) {
            for (int64_t i = 0; i < n; ++i)
              acc[0] = static_cast<int64_t>(static_cast<uint64_t>(acc[0]) *
                                            static_cast<uint64_t>(I(in.a)[0]));
          } else {
            acc[0] = static_cast<int64_t>(static_cast<uint64_t>(acc[0]) *
                                          static_cast<uint64_t>(L_.riprod(I(in.a), n)));
          }
          break;
        }
        default:
          throw ExecError(rt::str("fused kernel: opcode ", opc_name(in.op), " cannot run here"));
      }
    }
  }

  const Kernel& k_;
  const LoopTable& L_;
  char* const* bases_;
  const int ndim_;
  const int n_outer_;
  const int64_t chunk_;
  int64_t inner_len_ = 1;
  float* fv_;
  int64_t* iv_;
  float* fs_;
  int64_t* is_;
  int64_t outer_[32] = {};
  std::vector<char*> row_base_;
  std::vector<bool> row_valid_;
  std::vector<int64_t> esize_;
};

}  // namespace

const char* opc_name(Opc op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < kNumOpc ? kOpcNames[i] : "?";
}

int64_t Kernel::rows() const {
  int64_t r = 1;
  for (size_t d = 0; d + static_cast<size_t>(n_inner) < shape.size(); ++d) r *= shape[d];
  return r;
}

int64_t Kernel::row_len() const {
  int64_t r = 1;
  for (size_t d = shape.size() - static_cast<size_t>(n_inner); d < shape.size(); ++d) r *= shape[d];
  return r;
}

void run(const Kernel& k, char* const* bases, int64_t row_begin, int64_t row_end) {
  const int64_t rows = k.rows();
  if (row_end < 0 || row_end > rows) row_end = rows;
  if (row_begin >= row_end) return;
  const int64_t L = k.row_len();
  const int64_t chunk = L == 0 ? 1 : (k.full_row ? L : std::min(L, k.chunk));
  const int64_t nchunks = L == 0 ? 0 : (L + chunk - 1) / chunk;
  const bool row_state = !k.pre.empty() || !k.post.empty();
  if (!row_state && nchunks == 0) return;
  const int64_t per_item = row_state ? std::max<int64_t>(L, 1) : chunk;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(per_item, 1));
  if (row_state) {
    auto body = [&](int64_t b, int64_t e) {
      RowRunner rr(k, bases, chunk);
      for (int64_t r = b; r < e; ++r) rr.run_row(r, 0, nchunks);
    };
    if ((row_end - row_begin) <= grain || rt::in_parallel_region()) {
      body(row_begin, row_end);
    } else {
      rt::parallel_for(row_begin, row_end, grain, body);
    }
    return;
  }
  const int64_t items_begin = row_begin * nchunks, items_end = row_end * nchunks;
  auto body = [&](int64_t b, int64_t e) {
    RowRunner rr(k, bases, chunk);
    int64_t i = b;
    while (i < e) {
      const int64_t r = i / nchunks, c = i % nchunks;
      const int64_t c_end = std::min(nchunks, c + (e - i));
      rr.run_row(r, c, c_end);
      i += c_end - c;
    }
  };
  if ((items_end - items_begin) <= grain || rt::in_parallel_region()) {
    body(items_begin, items_end);
  } else {
    rt::parallel_for(items_begin, items_end, grain, body);
  }
}

// ---------------------------------------------------------------------------------------

namespace {

void check_reg(const Kernel& k, uint16_t r, const char* what) {
  const int idx = reg_index(r);
  const int limit = reg_is_int(r) ? (reg_is_scalar(r) ? k.ni_sc : k.ni_vec)
                                  : (reg_is_scalar(r) ? k.nf_sc : k.nf_vec);
  if (idx >= limit)
    throw NeffError(
        rt::str("fused kernel: ", what, " register ", idx, " out of range (", limit, ")"));
}

void check_code(const Kernel& k, const std::vector<Instr>& code) {
  for (const Instr& in : code) {
    if (static_cast<int>(in.op) >= kNumOpc) throw NeffError("fused kernel: unknown opcode");
    const Cls c = cls_of(in.op);
    auto need_f = [&](uint16_t r, const char* w) {
      if (reg_is_int(r))
        throw NeffError(
            rt::str("fused kernel: ", opc_name(in.op), " ", w, " must be a float register"));
      check_reg(k, r, w);
    };
    auto need_i = [&](uint16_t r, const char* w) {
      if (!reg_is_int(r))
        throw NeffError(
            rt::str("fused kernel: ", opc_name(in.op), " ", w, " must be an int register"));
      check_reg(k, r, w);
    };
    auto need_vec_ok = [&](uint16_t a) {  // a vector operand needs a vector destination
      if (!reg_is_scalar(a) && reg_is_scalar(in.dst))
        throw NeffError(
            rt::str("fused kernel: ", opc_name(in.op), " writes a vector into a scalar register"));
    };
    // Elementwise loops read `n` values of every vector operand: the destination is a vector
    // exactly when some operand is.
    auto same_kind = [&](bool any_vec) {
      if (any_vec == reg_is_scalar(in.dst))
        throw NeffError(
            rt::str("fused kernel: ", opc_name(in.op), " mixes scalar and vector registers"));
    };
    const bool va = !reg_is_scalar(in.a), vb = !reg_is_scalar(in.b);
    switch (c) {
      case Cls::FU:
        need_f(in.dst, "dst");
        need_f(in.a, "a");
        same_kind(va);
        continue;
      case Cls::FB:
        need_f(in.dst, "dst");
        need_f(in.a, "a");
        need_f(in.b, "b");
        same_kind(va || vb);
        continue;
      case Cls::IU:
        need_i(in.dst, "dst");
        need_i(in.a, "a");
        same_kind(va);
        continue;
      case Cls::IB:
        need_i(in.dst, "dst");
        need_i(in.a, "a");
        need_i(in.b, "b");
        same_kind(va || vb);
        continue;
      case Cls::IC:
        need_f(in.dst, "dst");
        need_i(in.a, "a");
        need_i(in.b, "b");
        same_kind(va || vb);
        continue;
      case Cls::X:
        break;
    }
    switch (in.op) {
      case Opc::Load:
      case Opc::Store: {
        if (in.aux < 0 || static_cast<size_t>(in.aux) >= k.operands.size())
          throw NeffError("fused kernel: operand index out of range");
        check_reg(k, in.op == Opc::Load ? in.dst : in.a, "load/store");
        break;
      }
      case Opc::Const:
        need_f(in.dst, "dst");
        break;
      case Opc::IConst:
        need_i(in.dst, "dst");
        break;
      case Opc::Iota:
        need_i(in.dst, "dst");
        if (in.aux < 0 || static_cast<size_t>(in.aux) >= k.shape.size())
          throw NeffError("fused kernel: iota dim out of range");
        break;
      case Opc::I2F:
        need_f(in.dst, "dst");
        need_i(in.a, "a");
        need_vec_ok(in.a);
        break;
      case Opc::F2I:
        need_i(in.dst, "dst");
        need_f(in.a, "a");
        need_vec_ok(in.a);
        break;
      case Opc::Where:
        need_f(in.dst, "dst");
        need_f(in.a, "c");
        need_f(in.b, "a");
        need_f(in.c, "b");
        need_vec_ok(in.a);
        need_vec_ok(in.b);
        need_vec_ok(in.c);
        break;
      case Opc::IWhere:
        need_i(in.dst, "dst");
        need_f(in.a, "c");
        need_i(in.b, "a");
        need_i(in.c, "b");
        need_vec_ok(in.a);
        need_vec_ok(in.b);
        need_vec_ok(in.c);
        break;
      case Opc::RSum:
      case Opc::RMax:
      case Opc::RMin:
      case Opc::RProd:
        need_f(in.dst, "acc");
        need_f(in.a, "a");
        if (!reg_is_scalar(in.dst))
          throw NeffError("fused kernel: reduction accumulator must be scalar");
        break;
      case Opc::RArgMax:
      case Opc::RArgMin:
        need_i(in.dst, "index");
        need_f(in.b, "best");
        need_f(in.a, "a");
        if (!reg_is_scalar(in.dst) || !reg_is_scalar(in.b))
          throw NeffError("fused kernel: argmax state must be scalar");
        break;
      case Opc::IRSum:
      case Opc::IRMax:
      case Opc::IRMin:
      case Opc::IRProd:
        need_i(in.dst, "acc");
        need_i(in.a, "a");
        if (!reg_is_scalar(in.dst))
          throw NeffError("fused kernel: reduction accumulator must be scalar");
        break;
      default:
        throw NeffError(rt::str("fused kernel: unexpected opcode ", opc_name(in.op)));
    }
  }
}

void write_code(ByteWriter& w, const std::vector<Instr>& code) {
  w.u64(code.size());
  for (const Instr& in : code) {
    w.u8(static_cast<uint8_t>(in.op));
    w.pod(in.dst);
    w.pod(in.a);
    w.pod(in.b);
    w.pod(in.c);
    w.i32(in.aux);
    w.i64(in.lo);
    w.i64(in.hi);
    w.f64(in.imm);
  }
}

std::vector<Instr> read_code(ByteReader& r) {
  const uint64_t n = r.count("vm.code", 37);
  std::vector<Instr> code(n);
  for (Instr& in : code) {
    const uint8_t op = r.u8("vm.op");
    if (op >= kNumOpc) r.fail("vm.op", "unknown opcode");
    in.op = static_cast<Opc>(op);
    in.dst = r.pod<uint16_t>("vm.dst");
    in.a = r.pod<uint16_t>("vm.a");
    in.b = r.pod<uint16_t>("vm.b");
    in.c = r.pod<uint16_t>("vm.c");
    in.aux = r.i32("vm.aux");
    in.lo = r.i64("vm.lo");
    in.hi = r.i64("vm.hi");
    in.imm = r.f64("vm.imm");
  }
  return code;
}

std::string reg_str(uint16_t r) {
  return rt::str(reg_is_int(r) ? "i" : "f", reg_is_scalar(r) ? "s" : "v", reg_index(r));
}

void dis_code(std::ostringstream& os, const char* label, const std::vector<Instr>& code,
              const std::string& pad) {
  if (code.empty()) return;
  os << pad << label << ":\n";
  for (const Instr& in : code) {
    os << pad << "  " << opc_name(in.op) << " ";
    switch (in.op) {
      case Opc::Load:
        os << reg_str(in.dst) << ", op" << in.aux;
        break;
      case Opc::Store:
        os << "op" << in.aux << ", " << reg_str(in.a);
        break;
      case Opc::Const:
        os << reg_str(in.dst) << ", " << in.imm;
        break;
      case Opc::IConst:
        os << reg_str(in.dst) << ", " << in.lo;
        break;
      case Opc::Iota:
        os << reg_str(in.dst) << ", dim " << in.aux << ", start " << in.lo << ", step " << in.hi;
        break;
      default: {
        os << reg_str(in.dst) << ", " << reg_str(in.a);
        const Cls c = cls_of(in.op);
        if (c == Cls::FB || c == Cls::IB || c == Cls::IC || in.op == Opc::RArgMax ||
            in.op == Opc::RArgMin || in.op == Opc::Where || in.op == Opc::IWhere)
          os << ", " << reg_str(in.b);
        if (in.op == Opc::Where || in.op == Opc::IWhere) os << ", " << reg_str(in.c);
      }
    }
    os << "\n";
  }
}

}  // namespace

void validate(const Kernel& k) {
  const size_t nd = k.shape.size();
  if (k.n_inner < 1 || static_cast<size_t>(k.n_inner) > std::max<size_t>(nd, 1) || nd > 32)
    throw NeffError(rt::str("fused kernel: bad domain rank ", nd, " / inner ", k.n_inner));
  for (int64_t s : k.shape)
    if (s < 0) throw NeffError("fused kernel: negative domain size");
  if (k.chunk < 1) throw NeffError("fused kernel: chunk must be positive");
  if (k.nf_vec < 0 || k.ni_vec < 0 || k.nf_sc < 0 || k.ni_sc < 0 || k.nf_vec > 4096 ||
      k.ni_vec > 4096)
    throw NeffError("fused kernel: bad register counts");
  for (const Operand& op : k.operands) {
    if (op.strides.size() != nd)
      throw NeffError("fused kernel: operand strides do not match the domain rank");
    if (static_cast<int>(op.dtype) >= kNumDTypes)
      throw NeffError("fused kernel: bad operand dtype");
    for (const Mask& m : op.masks)
      if (m.dim < 0 || static_cast<size_t>(m.dim) >= nd)
        throw NeffError("fused kernel: mask dim out of range");
  }
  check_code(k, k.pre);
  check_code(k, k.body);
  check_code(k, k.post);
}

void serialize(const Kernel& k, ByteWriter& w) {
  w.i64s(k.shape);
  w.i32(k.n_inner);
  w.u8(k.full_row ? 1 : 0);
  w.i64(k.chunk);
  w.u64(k.operands.size());
  for (const Operand& op : k.operands) {
    w.u8(static_cast<uint8_t>(op.dtype));
    w.i64s(op.strides);
    w.i64(op.offset);
    w.u64(op.masks.size());
    for (const Mask& m : op.masks) {
      w.i32(m.dim);
      w.i64(m.lo);
      w.i64(m.hi);
    }
  }
  write_code(w, k.pre);
  write_code(w, k.body);
  write_code(w, k.post);
  w.i32(k.nf_vec);
  w.i32(k.ni_vec);
  w.i32(k.nf_sc);
  w.i32(k.ni_sc);
}

Kernel deserialize(ByteReader& r) {
  Kernel k;
  k.shape = r.i64s("vm.shape");
  k.n_inner = r.i32("vm.n_inner");
  k.full_row = r.u8("vm.full_row") != 0;
  k.chunk = r.i64("vm.chunk");
  const uint64_t no = r.count("vm.operands", 9);
  for (uint64_t i = 0; i < no; ++i) {
    Operand op;
    const uint8_t dt = r.u8("vm.operand.dtype");
    if (dt >= kNumDTypes) r.fail("vm.operand.dtype", "unknown dtype");
    op.dtype = static_cast<DType>(dt);
    op.strides = r.i64s("vm.operand.strides");
    op.offset = r.i64("vm.operand.offset");
    const uint64_t nm = r.count("vm.operand.masks", 20);
    for (uint64_t m = 0; m < nm; ++m) {
      Mask mk;
      mk.dim = r.i32("vm.mask.dim");
      mk.lo = r.i64("vm.mask.lo");
      mk.hi = r.i64("vm.mask.hi");
      op.masks.push_back(mk);
    }
    k.operands.push_back(std::move(op));
  }
  k.pre = read_code(r);
  k.body = read_code(r);
  k.post = read_code(r);
  k.nf_vec = r.i32("vm.nf_vec");
  k.ni_vec = r.i32("vm.ni_vec");
  k.nf_sc = r.i32("vm.nf_sc");
  k.ni_sc = r.i32("vm.ni_sc");
  validate(k);
  return k;
}

std::string disassemble(const Kernel& k, int indent) {
  std::ostringstream os;
  const std::string pad(static_cast<size_t>(indent), ' ');
  os << pad << "domain [";
  for (size_t i = 0; i < k.shape.size(); ++i) os << (i ? "," : "") << k.shape[i];
  os << "] inner " << k.n_inner << (k.full_row ? " full-row" : "") << " chunk " << k.chunk
     << " regs f" << k.nf_vec << "/" << k.nf_sc << " i" << k.ni_vec << "/" << k.ni_sc << "\n";
  for (size_t i = 0; i < k.operands.size(); ++i) {
    const Operand& op = k.operands[i];
    os << pad << "  op" << i << ": " << kernels::dtype_name(op.dtype) << " strides [";
    for (size_t d = 0; d < op.strides.size(); ++d) os << (d ? "," : "") << op.strides[d];
    os << "]";
    if (op.offset) os << " offset " << op.offset;
    for (const Mask& m : op.masks)
      os << " mask(dim " << m.dim << ": " << m.lo << ".." << m.hi << ")";
    os << "\n";
  }
  dis_code(os, "pre", k.pre, pad);
  dis_code(os, "body", k.body, pad);
  dis_code(os, "post", k.post, pad);
  return os.str();
}

}  // namespace neuron::cc::vm
