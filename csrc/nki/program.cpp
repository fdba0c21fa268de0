#include "program.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "error.h"

namespace neuron::nki {

namespace {

constexpr std::string_view kOpNames[] = {"nki.isa.dma_copy",
                                         "nki.isa.tensor_copy",
                                         "nki.isa.memset",
                                         "nki.isa.iota",
                                         "nki.isa.tensor_tensor",
                                         "nki.isa.tensor_scalar",
                                         "nki.isa.scalar_tensor_tensor",
                                         "nki.isa.tensor_reduce",
                                         "nki.isa.tensor_partition_reduce",
                                         "nki.isa.activation",
                                         "nki.isa.reciprocal",
                                         "nki.isa.tensor_tensor_scan",
                                         "nki.isa.tensor_scalar_reduce",
                                         "nki.isa.nc_matmul",
                                         "nki.isa.nc_transpose",
                                         "nki.isa.affine_select",
                                         "nki.isa.select_reduce",
                                         "nki.isa.tensor_copy_predicated",
                                         "nki.isa.bn_stats",
                                         "nki.isa.bn_aggr",
                                         "nki.isa.max8",
                                         "nki.isa.register_move",
                                         "nki.isa.register_load",
                                         "nki.isa.register_store",
                                         "nki.language.fori_loop",
                                         "nki.language.fori_loop (end)",
                                         "nki.language.while_loop",
                                         "nki.language.while_loop (end)",
                                         "nki.isa.tensor_scalar_cumulative",
                                         "nki.isa.range_select"};
static_assert(std::size(kOpNames) == static_cast<size_t>(Op::Count));

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + (s.size() == 1 ? ",)" : ")");
}

std::string ap_shape(const Ap& a) {
  std::vector<int64_t> s(a.num.begin(), a.num.begin() + a.ndim);
  return shape_str(s);
}

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

bool is_onchip(Mem m) { return m != Mem::Hbm; }

// Writes and reads plain values for serialize/deserialize.
struct Writer {
  std::string out;
  template <typename T>
  void put(const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void put_str(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out.append(s);
  }
};
struct Reader {
  std::string_view in;
  size_t pos = 0;
  template <typename T>
  T get() {
    if (pos + sizeof(T) > in.size())
      throw NkiError("validation", "nki trace cache", "", "truncated program", "");
    T v;
    std::memcpy(&v, in.data() + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string get_str() {
    const auto n = get<uint32_t>();
    if (pos + n > in.size())
      throw NkiError("validation", "nki trace cache", "", "truncated program", "");
    std::string s(in.substr(pos, n));
    pos += n;
    return s;
  }
};

// Field by field (no struct padding in the bytes: identical programs serialize identically).
void put_target(Writer& w, const Target& t) {
  w.put<int32_t>(t.nc_version);
  w.put<int64_t>(t.sbuf_bytes_per_partition);
  w.put<int64_t>(t.psum_bytes_per_partition);
  w.put<int32_t>(t.psum_banks);
  w.put<int32_t>(t.partitions);
}
Target get_target(Reader& r) {
  Target t;
  t.nc_version = r.get<int32_t>();
  t.sbuf_bytes_per_partition = r.get<int64_t>();
  t.psum_bytes_per_partition = r.get<int64_t>();
  t.psum_banks = r.get<int32_t>();
  t.partitions = r.get<int32_t>();
  if (t.partitions <= 0 || t.partitions > 128 || t.psum_banks <= 0 ||
      t.sbuf_bytes_per_partition <= 0 || t.psum_bytes_per_partition <= 0)
    throw NkiError("validation", "nki trace cache", "", "corrupt target record", "");
  return t;
}
void put_instr(Writer& w, const Instr& in) {
  w.put<uint8_t>(static_cast<uint8_t>(in.op));
  w.put<uint8_t>(static_cast<uint8_t>(in.engine));
  w.put<uint8_t>(in.nap);
  for (int k = 0; k < in.nap; ++k) {
    const Ap& a = in.ap[k];
    w.put<int32_t>(a.buf);
    w.put<uint8_t>(static_cast<uint8_t>(a.dtype));
    w.put<int8_t>(a.ndim);
    w.put<int16_t>(a.reg);
    w.put<int64_t>(a.offset);
    w.put<int64_t>(a.reg_scale);
    for (int d = 0; d < a.ndim && d < kMaxApDims; ++d) {
      w.put<int64_t>(a.step[d]);
      w.put<int64_t>(a.num[d]);
    }
  }
  for (int64_t v : in.i) w.put<int64_t>(v);
  for (double v : in.f) w.put<double>(v);
  w.put<int32_t>(in.loc);
  w.put<int32_t>(in.api);
}
Instr get_instr(Reader& r) {
  auto corrupt = [] {
    return NkiError("validation", "nki trace cache", "", "corrupt instruction record", "");
  };
  Instr in;
  const auto op = r.get<uint8_t>(), engine = r.get<uint8_t>();
  if (op >= static_cast<uint8_t>(Op::Count) || engine >= kNumEngines) throw corrupt();
  in.op = static_cast<Op>(op);
  in.engine = static_cast<Engine>(engine);
  in.nap = r.get<uint8_t>();
  if (in.nap > kMaxOperands) throw corrupt();
  for (int k = 0; k < in.nap; ++k) {
    Ap& a = in.ap[k];
    a.buf = r.get<int32_t>();
    const auto dt = r.get<uint8_t>();
    a.ndim = r.get<int8_t>();
    if (dt >= kNumDTypes || a.ndim < 0 || a.ndim > kMaxApDims) throw corrupt();
    a.dtype = static_cast<DT>(dt);
    a.reg = r.get<int16_t>();
    a.offset = r.get<int64_t>();
    a.reg_scale = r.get<int64_t>();
    for (int d = 0; d < a.ndim; ++d) {
      a.step[d] = r.get<int64_t>();
      a.num[d] = r.get<int64_t>();
    }
  }
  for (auto& v : in.i) v = r.get<int64_t>();
  for (auto& v : in.f) v = r.get<double>();
  in.loc = r.get<int32_t>();
  in.api = r.get<int32_t>();
  return in;
}

}  // namespace

std::string_view mem_name(Mem m) {
  switch (m) {
    case Mem::Hbm:
      return "HBM";
    case Mem::Sbuf:
      return "SBUF";
    case Mem::Psum:
      return "PSUM";
  }
  return "?";
}

std::string_view engine_name(Engine e) {
  switch (e) {
    case Engine::Tensor:
      return "Tensor";
    case Engine::Vector:
      return "Vector";
    case Engine::Scalar:
      return "Scalar";
    case Engine::GpSimd:
      return "GpSimd";
    case Engine::Dma:
      return "DMA";
    case Engine::Sync:
      return "Sync";
    case Engine::Count:
      break;
  }
  return "?";
}

std::string_view op_name(Op op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < static_cast<int>(Op::Count) ? kOpNames[i]
                                                   : std::string_view("nki.isa.<invalid>");
}

int64_t Ap::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= num[d];
  return n;
}
int64_t Ap::free_size() const {
  int64_t n = 1;
  for (int d = 1; d < ndim; ++d) n *= num[d];
  return n;
}

int32_t Program::intern(const std::string& s) {
  auto it = string_index_.find(s);
  if (it != string_index_.end()) return it->second;
  const auto idx = static_cast<int32_t>(strings_.size());
  strings_.push_back(s);
  string_index_.emplace(s, idx);
  return idx;
}

const std::string& Program::str(int32_t idx) const {
  static const std::string empty;
  return idx >= 0 && idx < static_cast<int32_t>(strings_.size()) ? strings_[idx] : empty;
}

std::string Program::location(const Instr& in) const { return str(in.loc); }

std::string Program::instr_name(const Instr& in) const {
  std::string n(op_name(in.op));
  if (in.api >= 0) n += " (from " + str(in.api) + ")";
  return n;
}

void Program::fail(const Instr& in, const std::string& msg, const std::string& rule) const {
  throw NkiError("validation", instr_name(in), location(in), msg, rule);
}

int32_t Program::add_buffer(Buffer b) {
  auto bad = [&](const std::string& msg, const std::string& rule) {
    throw NkiError("validation", "nki.language.ndarray", str(b.loc), msg, rule);
  };
  if (b.shape.empty() && b.mem != Mem::Hbm) bad("on-chip tensors need at least one dimension", "");
  b.numel = 1;
  for (int64_t s : b.shape) {
    if (s <= 0)
      bad("tensor '" + b.name + "' has shape " + shape_str(b.shape) +
              " with a non-positive dimension",
          "tensor dimensions must be positive");
    b.numel *= s;
  }
  const int64_t es = dt_size(b.dtype);
  if (is_onchip(b.mem)) {
    b.partitions = b.shape[0];
    b.free_elems = b.numel / b.partitions;
    b.bytes_per_partition = b.free_elems * es;
    b.total_bytes = b.bytes_per_partition * b.partitions;
    const std::string mem(mem_name(b.mem));
    if (b.partitions > target_.partitions)
      bad(mem + " tensor '" + b.name + "' of shape " + shape_str(b.shape) +
              " has partition dimension " + std::to_string(b.partitions) + " > " +
              std::to_string(target_.partitions),
          "partition dimension (dim 0) <= 128 (nl.tile_size.pmax)");
    const int64_t cap =
        b.mem == Mem::Sbuf ? target_.sbuf_bytes_per_partition : target_.psum_bytes_per_partition;
    if (b.bytes_per_partition > cap)
      bad(mem + " tensor '" + b.name + "' of shape " + shape_str(b.shape) + " needs " +
              std::to_string(b.bytes_per_partition) + " bytes per partition > " +
              std::to_string(cap),
          mem + " capacity per partition (" + std::to_string(cap) + " bytes)");
    if (b.fixed_offset >= 0) {
      if (b.fixed_partition < 0 || b.fixed_partition + b.partitions > target_.partitions)
        bad("address=(" + std::to_string(b.fixed_partition) + ", " +
                std::to_string(b.fixed_offset) + ") puts partitions outside [0, 128)",
            "manual placement must stay inside the partitions");
      if (b.fixed_offset + b.bytes_per_partition > cap)
        bad("address=(" + std::to_string(b.fixed_partition) + ", " +
                std::to_string(b.fixed_offset) + ") with " + std::to_string(b.bytes_per_partition) +
                " bytes per partition ends past " + std::to_string(cap),
            mem + " capacity per partition (" + std::to_string(cap) + " bytes)");
      if (b.mem == Mem::Psum && b.fixed_offset % target_.psum_bank_bytes() != 0)
        bad("PSUM tensor '" + b.name + "' at byte offset " + std::to_string(b.fixed_offset) +
                " does not start on a bank boundary",
            "PSUM tensors start at a 2 KiB bank boundary");
    }
  } else {
    b.partitions = 0;
    b.free_elems = b.numel;
    b.total_bytes = b.numel * es;
    b.slot = num_slots_++;
  }
  buffers_.push_back(std::move(b));
  return static_cast<int32_t>(buffers_.size() - 1);
}

int32_t Program::add_register() { return num_regs_++; }

void Program::patch(int32_t idx, int k, int64_t value) {
  instrs_.at(static_cast<size_t>(idx)).i.at(k) = value;
}

// ---------------------------------------------------------------------------------------------
// Verification

void Program::verify_ap(const Instr& in, int k, const char* role) const {
  const Ap& a = in.ap[k];
  if (a.buf < 0 || a.buf >= static_cast<int32_t>(buffers_.size()))
    fail(in, std::string(role) + " refers to an unknown tensor", "");
  const Buffer& b = buffers_[a.buf];
  const std::string who =
      std::string(role) + " ('" + b.name + "' in " + std::string(mem_name(b.mem)) + ")";
  if (a.ndim < 1 || a.ndim > kMaxApDims)
    fail(in, who + " has " + std::to_string(a.ndim) + " dimensions",
         "access patterns have 1 to 6 dimensions");
  for (int d = 0; d < a.ndim; ++d)
    if (a.num[d] <= 0)
      fail(in, who + " has an empty dimension in shape " + ap_shape(a),
           "access patterns are non-empty");
  const int64_t es = dt_size(a.dtype), bes = dt_size(b.dtype);
  if (is_onchip(b.mem)) {
    if (a.num[0] > target_.partitions)
      fail(in,
           who + " partition dimension " + std::to_string(a.num[0]) + " exceeds maximum " +
               std::to_string(target_.partitions),
           "partition dimension <= 128 (nl.tile_size.pmax)");
    if (a.ndim - 1 > 4)
      fail(in,
           who + " has " + std::to_string(a.ndim - 1) + " free dimensions in shape " + ap_shape(a),
           "on-chip access patterns have at most 4 free dimensions");
    if (b.bytes_per_partition % es != 0)
      fail(in,
           who + " views a tensor of " + std::to_string(b.bytes_per_partition) +
               " bytes per partition as " + std::string(dt_name(a.dtype)),
           "a reinterpreting view must tile the partition exactly");
    const int64_t fa = b.bytes_per_partition / es;  // elements per partition in the view's dtype
    const bool broadcast_ok = in.op == Op::DmaCopy && k != 0 && a.step[0] == 0;
    if (a.num[0] > 1 && a.step[0] != fa && !broadcast_ok)
      fail(in,
           who + " steps " + std::to_string(a.step[0]) +
               " elements between partitions, but the tensor has " + std::to_string(fa) +
               " elements per partition",
           "the partition dimension is accessed contiguously (step = elements per partition)");
    if (a.reg < 0) {
      if (a.offset < 0 || a.offset >= b.partitions * fa)
        fail(in, who + " starts at element " + std::to_string(a.offset) + " outside the tensor",
             "accesses stay inside the tensor");
      const int64_t p0 = a.offset / fa, f0 = a.offset % fa;
      int64_t flo = f0, fhi = f0;
      for (int d = 1; d < a.ndim; ++d) {
        const int64_t ext = a.step[d] * (a.num[d] - 1);
        (ext < 0 ? flo : fhi) += ext;
      }
      const int64_t plast = p0 + (a.step[0] == 0 ? 0 : a.num[0] - 1);
      if (plast >= b.partitions)
        fail(in,
             who + " accesses partitions " + std::to_string(p0) + ".." + std::to_string(plast) +
                 " of a tensor with " + std::to_string(b.partitions) + " partitions",
             "accesses stay inside the tensor");
      if (flo < 0 || fhi >= fa)
        fail(in,
             who + " accesses elements " + std::to_string(flo) + ".." + std::to_string(fhi) +
                 " of each partition, which holds " + std::to_string(fa),
             "accesses stay inside the tensor (free dimensions never cross partitions)");
      // Compute engines address partitions in quadrants of 32 (DMA is not restricted).
      if (in.op != Op::DmaCopy && a.step[0] != 0) {
        const int64_t np = a.num[0];
        const bool ok = np > 64 ? p0 == 0 : (np > 32 ? (p0 == 0 || p0 == 64) : p0 % 32 == 0);
        if (!ok)
          fail(in,
               who + " starts at partition " + std::to_string(p0) + " with " + std::to_string(np) +
                   " partitions",
               "compute engines start at partition 0 (>64 partitions), 0/64 (>32) or a multiple of "
               "32");
      }
    }
  } else {
    if (b.total_bytes % es != 0)
      fail(in,
           who + " views a tensor of " + std::to_string(b.total_bytes) + " bytes as " +
               std::string(dt_name(a.dtype)),
           "a reinterpreting view must tile the tensor exactly");
    if (a.reg < 0) {
      const int64_t n = b.total_bytes / es;
      int64_t lo = a.offset, hi = a.offset;
      for (int d = 0; d < a.ndim; ++d) {
        const int64_t ext = a.step[d] * (a.num[d] - 1);
        (ext < 0 ? lo : hi) += ext;
      }
      if (lo < 0 || hi >= n)
        fail(in,
             who + " accesses elements " + std::to_string(lo) + ".." + std::to_string(hi) +
                 " of a tensor with " + std::to_string(n),
             "accesses stay inside the tensor");
    }
  }
  (void)bes;
  if (a.reg >= num_regs_) fail(in, who + " uses an unknown register", "");
}

void Program::verify(const Instr& in) const {
  auto present = [&](int k) { return k < in.nap && in.ap[k].present(); };
  auto mem = [&](int k) { return buffers_[in.ap[k].buf].mem; };
  auto name = [&](int k) { return buffers_[in.ap[k].buf].name; };
  auto P = [&](int k) { return in.ap[k].num[0]; };
  auto F = [&](int k) { return in.ap[k].free_size(); };
  auto dt = [&](int k) { return in.ap[k].dtype; };
  auto need = [&](int k, const char* role) {
    if (!present(k)) fail(in, std::string("missing operand ") + role, "");
    verify_ap(in, k, role);
  };
  auto opt = [&](int k, const char* role) {
    if (present(k)) verify_ap(in, k, role);
  };
  auto onchip = [&](int k, const char* role) {
    if (!is_onchip(mem(k)))
      fail(in, std::string(role) + " '" + name(k) + "' is in HBM",
           "engine operands live in SBUF or PSUM");
  };
  auto in_sbuf = [&](int k, const char* role, const char* rule) {
    if (mem(k) != Mem::Sbuf)
      fail(in,
           std::string(role) + " '" + name(k) + "' is in " + std::string(mem_name(mem(k))) +
               ", not SBUF",
           rule);
  };
  auto same_parts = [&](int a, const char* ra, int b, const char* rb) {
    if (P(a) != P(b))
      fail(in,
           std::string(ra) + " has " + std::to_string(P(a)) + " partitions but " + rb + " has " +
               std::to_string(P(b)),
           "operands have the same partition dimension");
  };
  auto same_free = [&](int a, const char* ra, int b, const char* rb) {
    if (F(a) != F(b))
      fail(in,
           std::string(ra) + " has " + std::to_string(F(a)) + " elements per partition but " + rb +
               " has " + std::to_string(F(b)),
           "operands have the same number of elements per partition");
  };
  auto vector_operand = [&](int k, int data, const char* role) {
    if (!present(k)) return;
    onchip(k, role);
    if (P(k) != P(data) || F(k) != 1)
      fail(in,
           std::string(role) + " has shape " + ap_shape(in.ap[k]) + "; expected (" +
               std::to_string(P(data)) + ", 1)",
           "vector operands have one element per partition");
  };
  auto not_packed = [&](int k, const char* role) {
    if (dt_is_packed(dt(k)))
      fail(in, std::string(role) + " has packed dtype " + std::string(dt_name(dt(k))),
           "engines do not compute on packed types (DMA only)");
  };
  auto alu_ok = [&](int64_t code, const char* role) {
    if (code < 0 || code >= static_cast<int64_t>(Alu::Count))
      fail(in, std::string("invalid ") + role, "");
  };
  auto bitvec_ints = [&](int64_t code, std::initializer_list<int> ks) {
    if (!alu_is_bitvec(static_cast<Alu>(code))) return;
    for (int k : ks)
      if (present(k) && !dt_is_int(dt(k)))
        fail(in,
             "bitvec operator " + std::string(alu_name(static_cast<Alu>(code))) +
                 " needs integer dtypes, got " + std::string(dt_name(dt(k))),
             "bitvec operators work on integer bit patterns");
  };

  // GpSimd cannot reach PSUM.
  if (in.engine == Engine::GpSimd)
    for (int k = 0; k < in.nap; ++k)
      if (present(k) && in.ap[k].buf < static_cast<int32_t>(buffers_.size()) && mem(k) == Mem::Psum)
        fail(in, "operand '" + name(k) + "' is in PSUM, which the GpSimd Engine cannot access",
             "GpSimd Engine accesses SBUF only");

  switch (in.op) {
    case Op::DmaCopy: {
      need(0, "dst");
      need(1, "src");
      for (int k : {0, 1})
        if (mem(k) == Mem::Psum)
          fail(in, std::string(k ? "src" : "dst") + " '" + name(k) + "' is in PSUM",
               "DMA cannot access PSUM; move PSUM data to SBUF with nisa.tensor_copy first");
      if (in.ap[0].numel() != in.ap[1].numel())
        fail(in,
             "src has shape " + ap_shape(in.ap[1]) + " (" + std::to_string(in.ap[1].numel()) +
                 " elements) but dst has shape " + ap_shape(in.ap[0]) + " (" +
                 std::to_string(in.ap[0].numel()) + " elements)",
             "DMA copy in/out element counts must match");
      if ((dt_is_packed(dt(0)) || dt_is_packed(dt(1))) && dt(0) != dt(1))
        fail(in,
             "cannot cast between " + std::string(dt_name(dt(1))) + " and " +
                 std::string(dt_name(dt(0))),
             "DMA casts are not supported for packed MX types");
      break;
    }
    case Op::TensorCopy: {
      need(0, "dst");
      need(1, "src");
      onchip(0, "dst");
      onchip(1, "src");
      same_parts(0, "dst", 1, "src");
      same_free(0, "dst", 1, "src");
      if (dt(0) != dt(1)) {
        not_packed(0, "dst");
        not_packed(1, "src");
      }
      break;
    }
    case Op::Memset: {
      need(0, "dst");
      onchip(0, "dst");
      not_packed(0, "dst");
      break;
    }
    case Op::Iota:
    case Op::AffineSelect: {
      need(0, "dst");
      in_sbuf(0, "dst", "iota/affine_select write SBUF (GpSimd Engine)");
      not_packed(0, "dst");
      const int64_t nd = in.i[0];
      if (nd < 1 || nd > 4)
        fail(in, "pattern has " + std::to_string(nd) + " dimensions",
             "patterns have 1 to 4 dimensions");
      int64_t total = 1;
      for (int d = 0; d < nd; ++d) {
        if (in.i[2 + 2 * d] <= 0)
          fail(in, "pattern dimension " + std::to_string(d) + " is empty", "");
        total *= in.i[2 + 2 * d];
      }
      if (total != F(0))
        fail(in,
             "pattern produces " + std::to_string(total) + " elements per partition but dst has " +
                 std::to_string(F(0)),
             "the pattern covers dst's free dimensions exactly");
      if (in.op == Op::AffineSelect) {
        need(1, "on_true_tile");
        onchip(1, "on_true_tile");
        same_parts(0, "dst", 1, "on_true_tile");
        same_free(0, "dst", 1, "on_true_tile");
        alu_ok(in.i[11], "cmp_op");
      }
      break;
    }
    case Op::TensorTensor: {
      need(0, "dst");
      need(1, "data1");
      need(2, "data2");
      for (int k = 0; k < 3; ++k) {
        onchip(k, k == 0 ? "dst" : (k == 1 ? "data1" : "data2"));
        not_packed(k, "operand");
      }
      if (mem(1) == Mem::Psum && mem(2) == Mem::Psum)
        fail(in, "data1 '" + name(1) + "' and data2 '" + name(2) + "' are both in PSUM",
             "tensor_tensor inputs cannot both be in PSUM");
      same_parts(1, "data1", 2, "data2");
      same_parts(0, "dst", 1, "data1");
      same_free(1, "data1", 2, "data2");
      same_free(0, "dst", 1, "data1");
      alu_ok(in.i[0], "op");
      bitvec_ints(in.i[0], {0, 1, 2});
      break;
    }
    case Op::TensorScalar:
    case Op::ScalarTensorTensor:
    case Op::TensorScalarReduce: {
      need(0, "dst");
      need(1, "data");
      onchip(0, "dst");
      onchip(1, "data");
      not_packed(0, "dst");
      not_packed(1, "data");
      same_parts(0, "dst", 1, "data");
      same_free(0, "dst", 1, "data");
      opt(2, "operand0");
      vector_operand(2, 1, "operand0");
      alu_ok(in.i[0], "op0");
      if (in.op == Op::TensorScalar) {
        opt(3, "operand1");
        vector_operand(3, 1, "operand1");
        if (in.i[1] >= 0) {
          alu_ok(in.i[1], "op1");
          if (alu_is_bitvec(static_cast<Alu>(in.i[0])) != alu_is_bitvec(static_cast<Alu>(in.i[1])))
            fail(in,
                 "op0 " + std::string(alu_name(static_cast<Alu>(in.i[0]))) + " and op1 " +
                     std::string(alu_name(static_cast<Alu>(in.i[1]))) +
                     " mix bitvec and arithmetic operators",
                 "both operators of tensor_scalar are bitvec or both arithmetic");
          bitvec_ints(in.i[1], {0, 1});
        }
        bitvec_ints(in.i[0], {0, 1});
        if (in.engine == Engine::Scalar) {
          const auto o0 = static_cast<Alu>(in.i[0]);
          const bool ok =
              (o0 == Alu::Multiply && (in.i[1] < 0 || in.i[1] == static_cast<int64_t>(Alu::Add))) ||
              (o0 == Alu::Add && in.i[1] < 0);
          if (!ok)
            fail(in,
                 "operators (" + std::string(alu_name(o0)) + ", " +
                     (in.i[1] < 0 ? std::string("None")
                                  : std::string(alu_name(static_cast<Alu>(in.i[1])))) +
                     ") on the Scalar Engine",
                 "Scalar Engine tensor_scalar supports (multiply, add), (multiply, None), (add, "
                 "None)");
        }
      } else if (in.op == Op::ScalarTensorTensor) {
        need(3, "operand1");
        onchip(3, "operand1");
        same_parts(3, "operand1", 1, "data");
        same_free(3, "operand1", 1, "data");
        if (mem(1) == Mem::Psum && mem(3) == Mem::Psum)
          fail(in, "data and operand1 are both in PSUM",
               "scalar_tensor_tensor: data and operand1 cannot both be in PSUM");
        alu_ok(in.i[1], "op1");
      } else {
        need(3, "reduce_res");
        vector_operand(3, 1, "reduce_res");
        alu_ok(in.i[1], "reduce_op");
        const auto r = static_cast<Alu>(in.i[1]);
        if (r != Alu::Add && r != Alu::Subtract && r != Alu::Multiply && r != Alu::Max &&
            r != Alu::Min)
          fail(in, "reduce_op " + std::string(alu_name(r)),
               "tensor_scalar_reduce reduces with add, subtract, multiply, max or min");
        if (alu_is_bitvec(static_cast<Alu>(in.i[0])))
          fail(in, "op0 is a bitvec operator",
               "tensor_scalar_reduce supports arithmetic operators only");
      }
      break;
    }
    case Op::TensorReduce: {
      need(0, "dst");
      need(1, "data");
      onchip(0, "dst");
      onchip(1, "data");
      not_packed(1, "data");
      alu_ok(in.i[0], "op");
      if (!alu_is_reduction_op(static_cast<Alu>(in.i[0])))
        fail(in,
             "op " + std::string(alu_name(static_cast<Alu>(in.i[0]))) +
                 " is not a reduction operator",
             "tensor_reduce reduces with add, subtract, multiply, maximum, minimum, abs_max or "
             "bitwise and/or/xor");
      bitvec_ints(in.i[0], {0, 1});
      const int64_t mask = in.i[1];
      const int nd = in.ap[1].ndim;
      if (mask & 1)
        fail(in, "axis includes 0, the partition dimension",
             "tensor_reduce reduces free axes only; transpose or matmul with ones to reduce "
             "partitions");
      int first = -1, last = -1, count = 0;
      for (int d = 1; d < nd; ++d)
        if (mask & (int64_t{1} << d)) {
          if (first < 0) first = d;
          last = d;
          ++count;
        }
      if (mask >> nd)
        fail(in, "axis refers to a dimension >= " + std::to_string(nd), "reduction axes exist");
      if (count == 0) fail(in, "no axis to reduce", "tensor_reduce needs at least one free axis");
      if (last != nd - 1 || last - first + 1 != count)
        fail(in,
             "axes must be the last contiguous free dimensions of data with shape " +
                 ap_shape(in.ap[1]),
             "tensor_reduce axis is [1], [1,2], ... ending at the most minor dimension");
      same_parts(0, "dst", 1, "data");
      int64_t kept = 1;
      for (int d = 1; d < first; ++d) kept *= in.ap[1].num[d];
      if (F(0) != kept)
        fail(in,
             "dst has " + std::to_string(F(0)) + " elements per partition; reducing data " +
                 ap_shape(in.ap[1]) + " leaves " + std::to_string(kept),
             "tensor_reduce output shape");
      break;
    }
    case Op::PartitionReduce: {
      need(0, "dst");
      need(1, "data");
      in_sbuf(1, "data", "tensor_partition_reduce reads SBUF (GpSimd Engine)");
      in_sbuf(0, "dst", "tensor_partition_reduce writes SBUF (GpSimd Engine)");
      const auto op = static_cast<Alu>(in.i[0]);
      alu_ok(in.i[0], "op");
      if (op != Alu::Add && op != Alu::Max && op != Alu::BitOr && op != Alu::BitAnd)
        fail(in, "op " + std::string(alu_name(op)),
             "tensor_partition_reduce supports add, maximum, bitwise_or, bitwise_and");
      if (P(0) != 1)
        fail(in, "dst has " + std::to_string(P(0)) + " partitions",
             "the partition reduction result has 1 partition");
      same_free(0, "dst", 1, "data");
      break;
    }
    case Op::Activation: {
      need(0, "dst");
      need(1, "data");
      onchip(0, "dst");
      onchip(1, "data");
      not_packed(0, "dst");
      not_packed(1, "data");
      same_parts(0, "dst", 1, "data");
      same_free(0, "dst", 1, "data");
      opt(2, "bias");
      vector_operand(2, 1, "bias");
      opt(3, "scale");
      vector_operand(3, 1, "scale");
      if (present(2) && dt(2) != DT::Float32 && dt(2) != DT::BFloat16 && dt(2) != DT::Float16)
        fail(in, "bias has dtype " + std::string(dt_name(dt(2))),
             "activation bias is float32, bfloat16 or float16");
      if (in.i[0] < 0 || in.i[0] >= static_cast<int64_t>(Act::Count) ||
          act_is_integer_only(static_cast<Act>(in.i[0])))
        fail(in, "invalid activation function", "");
      opt(4, "reduce_res");
      if (present(4)) vector_operand(4, 1, "reduce_res");
      if (in.i[1] >= 0 && in.i[1] != static_cast<int64_t>(Alu::Add))
        fail(in, "reduce_op is " + std::string(alu_name(static_cast<Alu>(in.i[1]))),
             "reduce_op must be nl.add: the Scalar Engine reduction registers can only sum");
      if (in.i[2] < 0 || in.i[2] > static_cast<int64_t>(ReduceCmd::LoadReduce))
        fail(in, "invalid reduce_cmd", "");
      break;
    }
    case Op::Reciprocal: {
      need(0, "dst");
      need(1, "data");
      onchip(0, "dst");
      onchip(1, "data");
      not_packed(1, "data");
      same_parts(0, "dst", 1, "data");
      same_free(0, "dst", 1, "data");
      break;
    }
    case Op::TensorTensorScan: {
      need(0, "dst");
      need(1, "data0");
      need(2, "data1");
      for (int k = 0; k < 3; ++k) onchip(k, "operand");
      if (mem(1) == Mem::Psum && mem(2) == Mem::Psum)
        fail(in, "data0 and data1 are both in PSUM",
             "tensor_tensor_scan inputs cannot both be in PSUM");
      same_parts(1, "data0", 2, "data1");
      same_parts(0, "dst", 1, "data0");
      same_free(1, "data0", 2, "data1");
      same_free(0, "dst", 1, "data0");
      opt(3, "initial");
      vector_operand(3, 1, "initial");
      alu_ok(in.i[0], "op0");
      alu_ok(in.i[1], "op1");
      for (int k : {0, 1})
        if (alu_is_bitvec(static_cast<Alu>(in.i[k])))
          fail(in, "bitvec operator in a scan", "tensor_tensor_scan uses arithmetic operators");
      break;
    }
    case Op::Matmul: {
      need(0, "dst");
      need(1, "stationary");
      need(2, "moving");
      if (mem(0) != Mem::Psum)
        fail(in, "dst '" + name(0) + "' is in " + std::string(mem_name(mem(0))),
             "nc_matmul writes its result to PSUM");
      in_sbuf(1, "stationary", "nc_matmul reads stationary and moving from SBUF");
      in_sbuf(2, "moving", "nc_matmul reads stationary and moving from SBUF");
      const bool dbl = in.i[2] == 1;
      auto mm_dtype_ok = [](DT t) {
        return t == DT::Float32 || t == DT::TFloat32 || t == DT::BFloat16 || t == DT::Float16 ||
               t == DT::F8E4M3 || t == DT::F8E4M3FN || t == DT::F8E5M2;
      };
      for (int k : {1, 2})
        if (!mm_dtype_ok(dt(k)))
          fail(in,
               std::string(k == 1 ? "stationary" : "moving") + " has dtype " +
                   std::string(dt_name(dt(k))),
               "nc_matmul inputs are float8_e4m3/float8_e5m2/bfloat16/float16/tfloat32/float32");
      const bool f32a = dt(1) == DT::Float32, f32b = dt(2) == DT::Float32;
      if (f32a != f32b)
        fail(in,
             "stationary is " + std::string(dt_name(dt(1))) + " but moving is " +
                 std::string(dt_name(dt(2))),
             "nc_matmul: float32 operands cannot be mixed with 16/8-bit operands");
      if (P(1) != P(2))
        fail(in,
             "stationary has " + std::to_string(P(1)) +
                 " partitions (contraction) but moving has " + std::to_string(P(2)),
             "nc_matmul: stationary and moving share the contraction (partition) dimension");
      int64_t m = F(1), n = F(2);
      if (dbl) {
        if (target_.nc_version < 3)
          fail(in, "perf_mode=double_row on NeuronCore-v2", "double_row needs NeuronCore-v3+");
        const bool fp8 = (dt(1) == DT::F8E4M3 || dt(1) == DT::F8E4M3FN || dt(1) == DT::F8E5M2) &&
                         (dt(2) == DT::F8E4M3 || dt(2) == DT::F8E4M3FN || dt(2) == DT::F8E5M2);
        if (!fp8)
          fail(in, "double_row with non-fp8 inputs",
               "double_row performance mode takes fp8 inputs");
        if (in.ap[1].ndim != 3 || in.ap[1].num[1] != 2 || in.ap[2].ndim != 3 ||
            in.ap[2].num[1] != 2)
          fail(in, "stationary " + ap_shape(in.ap[1]) + " and moving " + ap_shape(in.ap[2]),
               "double_row operands are [K, 2, M] and [K, 2, N]");
        m /= 2;
        n /= 2;
        if (in.i[1])
          fail(in, "double_row with is_transpose",
               "double_row cannot be combined with transpose mode");
      }
      if (m > 128)
        fail(
            in,
            "stationary free size " + std::to_string(m) +
                " exceeds maximum 128 (stationary shape " + ap_shape(in.ap[1]) + ")",
            "Tensor Engine stationary tile is at most 128x128 (nl.tile_size.gemm_stationary_fmax)");
      if (n > 512)
        fail(in,
             "moving free size " + std::to_string(n) + " exceeds maximum 512 (moving shape " +
                 ap_shape(in.ap[2]) + ")",
             "Tensor Engine moving tile free size <= 512 (nl.tile_size.gemm_moving_fmax)");
      if (P(0) != m || F(0) != n)
        fail(in,
             "dst has shape " + ap_shape(in.ap[0]) + " but stationary.T @ moving is (" +
                 std::to_string(m) + ", " + std::to_string(n) + ")",
             "nc_matmul dst shape is (stationary free size, moving free size)");
      const bool same16 = dt(0) == dt(1) && (dt(0) == DT::BFloat16 || dt(0) == DT::Float16);
      if (dt(0) != DT::Float32 && !(in.i[1] && same16 && target_.nc_version >= 3))
        fail(in, "dst dtype is " + std::string(dt_name(dt(0))),
             "nc_matmul accumulates in fp32 PSUM (bf16/fp16 output only in transpose mode on "
             "NeuronCore-v3)");
      // One matmul writes within one PSUM bank of every partition.
      const Ap& d = in.ap[0];
      if (d.reg < 0) {
        const Buffer& b = buffers_[d.buf];
        const int64_t es = dt_size(d.dtype), fa = b.bytes_per_partition / es;
        int64_t lo = d.offset % fa, hi = lo;
        for (int k = 1; k < d.ndim; ++k) {
          const int64_t ext = d.step[k] * (d.num[k] - 1);
          (ext < 0 ? lo : hi) += ext;
        }
        const int64_t bank = target_.psum_bank_bytes();
        const int64_t blo = lo * es, bhi = (hi + 1) * es - 1;
        if (blo / bank != bhi / bank)
          fail(in,
               "the output spans bytes " + std::to_string(blo) + ".." + std::to_string(bhi) +
                   " of each partition of '" + b.name + "', crossing a 2 KiB PSUM bank boundary",
               "one nc_matmul output fits in one PSUM bank (2 KiB = 512 fp32 per partition)");
      }
      break;
    }
    case Op::Transpose: {
      need(0, "dst");
      need(1, "data");
      not_packed(1, "data");
      if (in.engine == Engine::Tensor) {
        in_sbuf(1, "data", "Tensor Engine transpose reads SBUF");
        if (mem(0) != Mem::Psum)
          fail(in, "dst '" + name(0) + "' is in " + std::string(mem_name(mem(0))),
               "Tensor Engine transpose writes PSUM");
        if (F(1) > 128)
          fail(in, "data free size " + std::to_string(F(1)) + " exceeds maximum 128",
               "Tensor Engine transpose handles at most 128x128");
      } else {
        onchip(0, "dst");
        onchip(1, "data");
        if (P(1) > 32 || F(1) > 32)
          fail(in, "data has shape " + ap_shape(in.ap[1]),
               "Vector Engine transpose handles at most 32x32");
      }
      if (P(0) != F(1) || F(0) != P(1))
        fail(in,
             "dst has shape " + ap_shape(in.ap[0]) + " but the transpose of " + ap_shape(in.ap[1]) +
                 " is (" + std::to_string(F(1)) + ", " + std::to_string(P(1)) + ")",
             "transpose swaps the partition and free dimensions");
      break;
    }
    case Op::SelectReduce: {
      need(0, "dst");
      need(1, "predicate");
      need(2, "on_true");
      for (int k = 0; k < 3; ++k) onchip(k, "operand");
      if (mem(1) == Mem::Psum && mem(2) == Mem::Psum)
        fail(in, "predicate and on_true are both in PSUM",
             "select_reduce: predicate and on_true cannot both be in PSUM");
      same_parts(0, "dst", 2, "on_true");
      same_parts(1, "predicate", 2, "on_true");
      same_free(0, "dst", 2, "on_true");
      same_free(1, "predicate", 2, "on_true");
      if (!dt_is_int(dt(1)) || dt_is_int32(dt(1)))
        fail(in, "predicate has dtype " + std::string(dt_name(dt(1))),
             "select_reduce predicate is int8/uint8/int16/uint16");
      opt(3, "on_false");
      vector_operand(3, 2, "on_false");
      opt(4, "reduce_res");
      vector_operand(4, 2, "reduce_res");
      if (in.i[0] != static_cast<int64_t>(Alu::Max))
        fail(in, "reduce_op " + std::string(alu_name(static_cast<Alu>(in.i[0]))),
             "select_reduce reduce_op supports max only");
      break;
    }
    case Op::CopyPredicated: {
      need(0, "dst");
      need(2, "predicate");
      onchip(0, "dst");
      onchip(2, "predicate");
      same_parts(0, "dst", 2, "predicate");
      same_free(0, "dst", 2, "predicate");
      if (present(1)) {
        verify_ap(in, 1, "src");
        onchip(1, "src");
        same_parts(0, "dst", 1, "src");
        same_free(0, "dst", 1, "src");
      }
      break;
    }
    case Op::BnStats:
    case Op::BnAggr:
    case Op::Max8: {
      need(0, "dst");
      need(1, "data");
      onchip(0, "dst");
      onchip(1, "data");
      not_packed(1, "data");
      same_parts(0, "dst", 1, "data");
      if (in.op == Op::BnStats) {
        if (F(1) > 512)
          fail(in, "data has " + std::to_string(F(1)) + " elements per partition",
               "bn_stats takes at most 512 elements per partition (nl.tile_size.bn_stats_fmax)");
        if (F(0) != 6)
          fail(in, "dst has " + std::to_string(F(0)) + " elements per partition",
               "bn_stats writes 6 statistics per partition");
      } else if (in.op == Op::BnAggr) {
        if (F(1) % 3 != 0)
          fail(in, "data has " + std::to_string(F(1)) + " elements per partition",
               "bn_aggr reads (count, mean, var*count) triples");
        if (F(0) != 2)
          fail(in, "dst has " + std::to_string(F(0)) + " elements per partition",
               "bn_aggr writes mean and variance");
      } else {
        if (F(1) < 8)
          fail(in, "data has " + std::to_string(F(1)) + " elements per partition",
               "max8 needs at least 8 elements per partition");
        if (F(0) != 8)
          fail(in, "dst has " + std::to_string(F(0)) + " elements per partition",
               "max8 writes 8 values per partition");
      }
      break;
    }
    case Op::RegMove:
      if (in.i[0] < 0 || in.i[0] >= num_regs_ || in.i[1] >= num_regs_)
        fail(in, "unknown register", "");
      break;
    case Op::RegLoad:
    case Op::RegStore: {
      need(0, in.op == Op::RegLoad ? "src" : "dst");
      if (in.ap[0].numel() != 1)
        fail(in, "the tensor view has " + std::to_string(in.ap[0].numel()) + " elements",
             "registers move exactly one element");
      if (!dt_is_int(dt(0)) && dt(0) != DT::Float32)
        fail(in, "dtype " + std::string(dt_name(dt(0))), "registers hold 32-bit integers");
      if (in.i[0] < 0 || in.i[0] >= num_regs_) fail(in, "unknown register", "");
      break;
    }
    case Op::LoopBegin:
      if (in.i[0] < 0 || in.i[0] >= num_regs_ || in.i[1] >= num_regs_ || in.i[3] >= num_regs_)
        fail(in, "unknown register", "");
      if (in.i[5] <= 0)
        fail(in, "step " + std::to_string(in.i[5]), "fori_loop step is a positive constant");
      break;
    case Op::WhileBegin:
      if (in.i[0] < 0 || in.i[0] >= num_regs_) fail(in, "unknown register", "");
      break;
    case Op::TensorScalarCumulative: {
      need(0, "dst");
      need(1, "src");
      onchip(0, "dst");
      onchip(1, "src");
      same_parts(0, "dst", 1, "src");
      same_free(0, "dst", 1, "src");
      opt(2, "imm0");
      vector_operand(2, 1, "imm0");
      opt(3, "imm1");
      vector_operand(3, 1, "imm1");
      for (int k : {0, 1})
        if (dt_is_int32(dt(k)) || dt_is_packed(dt(k)) || dt(k) == DT::TFloat32)
          fail(in, std::string(k ? "src" : "dst") + " has dtype " + std::string(dt_name(dt(k))),
               "tensor_scalar_cumulative works on bf16/fp16/fp32/fp8/(u)int8/(u)int16 (no 32-bit "
               "integers)");
      alu_ok(in.i[0], "op0");
      alu_ok(in.i[1], "op1");
      if (alu_is_bitvec(static_cast<Alu>(in.i[0])))
        fail(in, "op0 is a bitvec operator", "tensor_scalar_cumulative op0 is arithmetic");
      const auto r = static_cast<Alu>(in.i[1]);
      if (r != Alu::Add && r != Alu::Subtract && r != Alu::Multiply && r != Alu::Max &&
          r != Alu::Min)
        fail(in, "op1 " + std::string(alu_name(r)),
             "tensor_scalar_cumulative accumulates with add, subtract, multiply, max or min");
      break;
    }
    case Op::RangeSelect: {
      if (target_.nc_version < 3)
        fail(in, "range_select on NeuronCore-v2", "range_select needs NeuronCore-v3 or newer");
      need(0, "dst");
      need(1, "on_true_tile");
      need(2, "bound0");
      need(3, "bound1");
      onchip(0, "dst");
      onchip(1, "on_true_tile");
      same_parts(0, "dst", 1, "on_true_tile");
      same_free(0, "dst", 1, "on_true_tile");
      vector_operand(2, 1, "bound0");
      vector_operand(3, 1, "bound1");
      opt(4, "reduce_res");
      vector_operand(4, 1, "reduce_res");
      alu_ok(in.i[0], "comp_op0");
      alu_ok(in.i[1], "comp_op1");
      if (in.i[2] != static_cast<int64_t>(Alu::Max))
        fail(in, "reduce_op " + std::string(alu_name(static_cast<Alu>(in.i[2]))),
             "range_select reduces with maximum");
      break;
    }
    case Op::LoopEnd:
    case Op::WhileEnd:
      break;
    case Op::Count:
      fail(in, "invalid opcode", "");
  }
}

void Program::add(const Instr& in_) {
  if (finalized_)
    throw NkiError("validation", instr_name(in_), location(in_), "program already finalized", "");
  Instr in = in_;
  if (in.op >= Op::Count) fail(in, "invalid opcode", "");
  if (in.nap > kMaxOperands) fail(in, "too many operands", "");
  verify(in);
  const int32_t idx = size();
  switch (in.op) {
    case Op::LoopBegin:
    case Op::WhileBegin:
      open_loops_.push_back(idx);
      dynamic_ = true;
      recheck_ = true;
      break;
    case Op::LoopEnd:
    case Op::WhileEnd: {
      const Op want = in.op == Op::LoopEnd ? Op::LoopBegin : Op::WhileBegin;
      if (open_loops_.empty() || instrs_[open_loops_.back()].op != want)
        fail(in, "loop end without a matching begin", "");
      const int32_t begin = open_loops_.back();
      open_loops_.pop_back();
      in.i[0] = begin;
      instrs_[begin].i[in.op == Op::LoopEnd ? 6 : 1] = idx;
      if (in.op == Op::WhileEnd && (in.i[1] < 0 || in.i[1] >= num_regs_))
        fail(in, "while_loop body must return a register", "");
      break;
    }
    default:
      break;
  }
  for (int k = 0; k < in.nap; ++k) {
    if (!in.ap[k].present()) continue;
    if (in.ap[k].reg >= 0) {
      dynamic_ = true;
      // A data-dependent address into on-chip or kernel-written HBM memory can touch different
      // (maybe never-written) bytes on every run; into kernel inputs it cannot.
      const Buffer& b = buffers_[in.ap[k].buf];
      if (b.mem != Mem::Hbm || !b.is_input) recheck_ = true;
    }
    const bool writes = k == 0 && in.op != Op::RegLoad;
    const bool extra_write =
        (in.op == Op::Activation && k == 4) || (in.op == Op::SelectReduce && k == 4) ||
        (in.op == Op::TensorScalarReduce && k == 3) || (in.op == Op::RangeSelect && k == 4);
    if (writes || extra_write) buffers_[in.ap[k].buf].written = true;
  }
  instrs_.push_back(in);
}

// ---------------------------------------------------------------------------------------------
// Liveness and placement

void Program::allocate() {
  const int32_t n = size();
  for (auto& b : buffers_) b.first_use = b.last_use = -1;
  for (int32_t t = 0; t < n; ++t) {
    const Instr& in = instrs_[t];
    for (int k = 0; k < in.nap; ++k) {
      if (!in.ap[k].present()) continue;
      Buffer& b = buffers_[in.ap[k].buf];
      if (b.first_use < 0) b.first_use = t;
      b.last_use = t;
    }
  }
  // A tensor used inside a runtime loop stays live for the whole loop (later iterations reuse it).
  std::vector<std::pair<int32_t, int32_t>> loops;
  for (int32_t t = 0; t < n; ++t)
    if (instrs_[t].op == Op::LoopBegin)
      loops.emplace_back(t, static_cast<int32_t>(instrs_[t].i[6]));
    else if (instrs_[t].op == Op::WhileBegin)
      loops.emplace_back(t, static_cast<int32_t>(instrs_[t].i[1]));
  for (bool changed = !loops.empty(); changed;) {
    changed = false;
    for (auto& b : buffers_) {
      if (b.first_use < 0) continue;
      for (auto [s, e] : loops) {
        if (b.last_use < s || b.first_use > e) continue;
        if (b.first_use > s || b.last_use < e) {
          b.first_use = std::min(b.first_use, s);
          b.last_use = std::max(b.last_use, e);
          changed = true;
        }
      }
    }
  }

  for (Mem mem : {Mem::Sbuf, Mem::Psum}) {
    const int64_t cap =
        mem == Mem::Sbuf ? target_.sbuf_bytes_per_partition : target_.psum_bytes_per_partition;
    const int64_t align = mem == Mem::Sbuf ? 64 : target_.psum_bank_bytes();
    std::vector<int32_t> order;
    for (int32_t i = 0; i < static_cast<int32_t>(buffers_.size()); ++i)
      if (buffers_[i].mem == mem && buffers_[i].first_use >= 0) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return buffers_[a].first_use < buffers_[b].first_use;
    });
    std::vector<int32_t> live;
    auto extent = [&](const Buffer& b) { return align_up(b.bytes_per_partition, align); };
    auto prange = [&](const Buffer& b) {
      return b.fixed_offset >= 0
                 ? std::pair<int64_t, int64_t>{b.fixed_partition, b.fixed_partition + b.partitions}
                 : std::pair<int64_t, int64_t>{0, target_.partitions};
    };
    for (int32_t id : order) {
      Buffer& b = buffers_[id];
      std::erase_if(live, [&](int32_t o) { return buffers_[o].last_use < b.first_use; });
      const Instr& at = instrs_[b.first_use];
      const std::string mname(mem_name(mem));
      if (b.fixed_offset >= 0) {
        // Manually placed tensors overlap only if the bytes they occupy do: the hardware
        // addresses SBUF per byte (the allocator's 64-byte rounding is a packing choice, not a
        // rule) and PSUM tensors already start at bank boundaries.
        const auto [p0, p1] = prange(b);
        for (int32_t o : live) {
          const Buffer& ob = buffers_[o];
          const auto [q0, q1] = prange(ob);
          const bool poverlap = p0 < q1 && q0 < p1;
          const bool foverlap = b.fixed_offset < ob.addr + ob.bytes_per_partition &&
                                ob.addr < b.fixed_offset + b.bytes_per_partition;
          if (poverlap && foverlap)
            throw NkiError("validation", instr_name(at), location(at),
                           mname + " tensor '" + b.name + "' (allocated at " + str(b.loc) +
                               ") placed at partitions [" + std::to_string(p0) + ", " +
                               std::to_string(p1) + ") bytes [" + std::to_string(b.fixed_offset) +
                               ", " + std::to_string(b.fixed_offset + b.bytes_per_partition) +
                               ") overlaps live tensor '" + ob.name + "' (allocated at " +
                               str(ob.loc) + ") at partitions [" + std::to_string(q0) + ", " +
                               std::to_string(q1) + ") bytes [" + std::to_string(ob.addr) + ", " +
                               std::to_string(ob.addr + ob.bytes_per_partition) + ")",
                           "live " + mname + " tensors do not overlap");
        }
        b.addr = b.fixed_offset;
      } else {
        std::vector<std::pair<int64_t, int64_t>> used;
        for (int32_t o : live)
          used.emplace_back(buffers_[o].addr, buffers_[o].addr + extent(buffers_[o]));
        std::sort(used.begin(), used.end());
        int64_t addr = 0;
        for (auto [lo, hi] : used) {
          if (addr + extent(b) <= lo) break;
          addr = std::max(addr, align_up(hi, align));
        }
        if (addr + extent(b) > cap) {
          int64_t total = extent(b);
          for (int32_t o : live) total += extent(buffers_[o]);
          std::vector<int32_t> by_size = live;
          std::sort(by_size.begin(), by_size.end(), [&](int32_t x, int32_t y) {
            return extent(buffers_[x]) > extent(buffers_[y]);
          });
          std::string detail;
          for (size_t k = 0; k < by_size.size() && k < 6; ++k) {
            const Buffer& ob = buffers_[by_size[k]];
            detail += (k ? ", " : "") + std::string("'") + ob.name + "' " +
                      std::to_string(extent(ob)) + " B (" + str(ob.loc) + ")";
          }
          if (by_size.size() > 6) detail += ", ... " + std::to_string(by_size.size() - 6) + " more";
          const std::string unit = mem == Mem::Psum
                                       ? " (" + std::to_string(total / align) + " of " +
                                             std::to_string(target_.psum_banks) + " banks)"
                                       : "";
          throw NkiError("validation", instr_name(at), location(at),
                         mname + " capacity exceeded when tensor '" + b.name + "' (allocated at " +
                             str(b.loc) + ", " + std::to_string(extent(b)) +
                             " B per partition) becomes live: live tensors need " +
                             std::to_string(total) + " bytes per partition" + unit + " but " +
                             mname + " has " + std::to_string(cap) +
                             (live.empty() ? "" : "; live: " + detail),
                         mname + " capacity per partition (" + std::to_string(cap) + " bytes" +
                             (mem == Mem::Psum ? ", 8 banks of 2 KiB" : "") + ")");
        }
        b.addr = addr;
      }
      live.push_back(id);
    }
  }
}

void Program::resolve() {
  phys_.assign(instrs_.size(), {});
  for (size_t t = 0; t < instrs_.size(); ++t) {
    const Instr& in = instrs_[t];
    for (int k = 0; k < in.nap; ++k) {
      const Ap& a = in.ap[k];
      if (!a.present()) continue;
      const Buffer& b = buffers_[a.buf];
      Phys& p = phys_[t][k];
      const int64_t es = dt_size(a.dtype);
      p.mem = b.mem;
      p.dtype = a.dtype;
      p.ndim = a.ndim;
      p.reg = a.reg;
      p.slot = b.slot;
      for (int d = 0; d < a.ndim; ++d) p.num[d] = a.num[d];
      if (b.mem == Mem::Hbm) {
        p.byte_off = a.offset * es;
        p.reg_scale_bytes = a.reg_scale * es;
        for (int d = 0; d < a.ndim; ++d) p.stride[d] = a.step[d] * es;
      } else {
        const int64_t pitch = b.mem == Mem::Sbuf ? sbuf_pitch(target_) : psum_pitch(target_);
        const int64_t fa = b.bytes_per_partition / es;
        const int64_t p0 = a.offset / fa, f0 = a.offset % fa;
        p.byte_off = p0 * pitch + b.addr + f0 * es;
        p.stride[0] = a.step[0] == 0 ? 0 : pitch;
        for (int d = 1; d < a.ndim; ++d) p.stride[d] = a.step[d] * es;
        // Dynamic offsets are re-split into partition and free parts at run time.
        p.reg_scale_bytes = a.reg_scale;  // in elements for on-chip operands
      }
      int64_t lo = a.offset, hi = a.offset;
      for (int d = 0; d < a.ndim; ++d) {
        const int64_t ext = a.step[d] * (a.num[d] - 1);
        (ext < 0 ? lo : hi) += ext;
      }
      p.lo = lo;
      p.hi = hi;
      p.buf = a.buf;
      p.elem_off = a.offset;
      p.limit = b.total_bytes / es;
      if (b.mem != Mem::Hbm) {
        p.fa = b.bytes_per_partition / es;
        p.addr = b.addr;
        p.pitch = b.mem == Mem::Sbuf ? sbuf_pitch(target_) : psum_pitch(target_);
        for (int d = 1; d < a.ndim; ++d) {
          const int64_t ext = a.step[d] * (a.num[d] - 1);
          (ext < 0 ? p.flo : p.fhi) += ext;
        }
      }
    }
  }
}

void Program::finalize() {
  if (finalized_) return;
  if (!open_loops_.empty()) {
    const Instr& in = instrs_[open_loops_.back()];
    fail(in, "runtime loop was never closed", "");
  }
  allocate();
  resolve();
  finalized_ = true;
}

// ---------------------------------------------------------------------------------------------
// Serialization

std::string Program::serialize() const {
  Writer w;
  w.out.append("NKIP", 4);
  w.put<int32_t>(kFormatVersion);
  put_target(w, target_);
  w.put<uint32_t>(static_cast<uint32_t>(strings_.size()));
  for (const auto& s : strings_) w.put_str(s);
  w.put<int32_t>(num_regs_);
  w.put<uint32_t>(static_cast<uint32_t>(buffers_.size()));
  for (const auto& b : buffers_) {
    w.put(b.mem);
    w.put(b.dtype);
    w.put<uint32_t>(static_cast<uint32_t>(b.shape.size()));
    for (int64_t s : b.shape) w.put(s);
    w.put_str(b.name);
    w.put(b.loc);
    w.put(b.is_input);
    w.put(b.fixed_partition);
    w.put(b.fixed_offset);
  }
  w.put<uint32_t>(static_cast<uint32_t>(instrs_.size()));
  for (const auto& in : instrs_) put_instr(w, in);
  return w.out;
}

std::shared_ptr<Program> Program::deserialize(std::string_view bytes) {
  Reader r{bytes};
  if (bytes.size() < 8 || bytes.substr(0, 4) != "NKIP")
    throw NkiError("validation", "nki trace cache", "", "not a serialized NKI program", "");
  r.pos = 4;
  const auto version = r.get<int32_t>();
  if (version != kFormatVersion)
    throw NkiError("validation", "nki trace cache", "",
                   "program format version " + std::to_string(version) + " (expected " +
                       std::to_string(kFormatVersion) + ")",
                   "");
  auto prog = std::make_shared<Program>(get_target(r));
  const auto nstr = r.get<uint32_t>();
  for (uint32_t i = 0; i < nstr; ++i) prog->intern(r.get_str());
  const auto nregs = r.get<int32_t>();
  for (int32_t i = 0; i < nregs; ++i) prog->add_register();
  const auto nbuf = r.get<uint32_t>();
  for (uint32_t i = 0; i < nbuf; ++i) {
    Buffer b;
    b.mem = r.get<Mem>();
    b.dtype = r.get<DT>();
    if (static_cast<int>(b.mem) > 2 || static_cast<int>(b.dtype) >= kNumDTypes)
      throw NkiError("validation", "nki trace cache", "", "corrupt tensor record", "");
    const auto nd = r.get<uint32_t>();
    if (nd > 64) throw NkiError("validation", "nki trace cache", "", "corrupt tensor record", "");
    for (uint32_t d = 0; d < nd; ++d) b.shape.push_back(r.get<int64_t>());
    b.name = r.get_str();
    b.loc = r.get<int32_t>();
    b.is_input = r.get<bool>();
    b.fixed_partition = r.get<int32_t>();
    b.fixed_offset = r.get<int64_t>();
    prog->add_buffer(std::move(b));
  }
  const auto ninstr = r.get<uint32_t>();
  for (uint32_t i = 0; i < ninstr; ++i) {
    Instr in = get_instr(r);
    prog->add(in);
  }
  if (r.pos != bytes.size())
    throw NkiError("validation", "nki trace cache", "", "trailing bytes after program", "");
  prog->finalize();
  return prog;
}

std::string Program::dump() const {
  std::ostringstream os;
  for (size_t t = 0; t < instrs_.size(); ++t) {
    const Instr& in = instrs_[t];
    os << t << ": " << op_name(in.op) << " [" << engine_name(in.engine) << "]";
    for (int k = 0; k < in.nap; ++k) {
      const Ap& a = in.ap[k];
      if (!a.present()) continue;
      const Buffer& b = buffers_[a.buf];
      os << " " << b.name << "@" << mem_name(b.mem) << ":" << dt_name(a.dtype)
         << "[off=" << a.offset;
      for (int d = 0; d < a.ndim; ++d) os << " " << a.step[d] << "x" << a.num[d];
      if (a.reg >= 0) os << " +r" << a.reg << "*" << a.reg_scale;
      os << "]";
    }
    if (in.loc >= 0) os << "  # " << str(in.loc);
    os << "\n";
  }
  return os.str();
}

}  // namespace neuron::nki
