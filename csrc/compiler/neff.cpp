#include "neff.h"

#include <cstring>
#include <sstream>

#include "hash.h"

namespace neuron::cc {

std::string TargetProfile::str() const {
  return rt::str(target, " (", instance_type, ", NeuronCore-v", nc_version, ", LNC ", lnc, ")");
}

namespace {

void section(ByteWriter& w, NeffSection tag, const std::vector<uint8_t>& body) {
  w.u32(static_cast<uint32_t>(tag));
  w.u64(body.size());
  w.raw(body.data(), body.size());
}

}  // namespace

std::vector<uint8_t> write_neff(const Neff& n) {
  ByteWriter out;
  out.raw(kNeffMagic, 8);
  out.u32(kNeffFormatVersion);
  out.u32(0);  // flags
  {
    ByteWriter s;
    s.str(n.target.instance_type);
    s.str(n.target.target);
    s.u32(n.target.nc_version);
    s.u32(n.target.lnc);
    section(out, NeffSection::Target, s.take());
  }
  {
    ByteWriter s;  // signature first: a loader can check it without the program
    auto specs = [&](const std::vector<IOSpec>& v) {
      s.u64(v.size());
      for (const IOSpec& x : v) {
        s.u8(static_cast<uint8_t>(x.dtype));
        s.i64s(x.shape);
        s.i64s(x.strides);
        s.str(x.name);
      }
    };
    specs(n.program.inputs);
    specs(n.program.outputs);
    s.i32s(n.program.mutated_inputs);
    section(out, NeffSection::IOSignature, s.take());
  }
  {
    ByteWriter s;
    Program p = n.program;
    p.constant_data.clear();
    p.constants.clear();
    serialize(p, s);
    section(out, NeffSection::Program, s.take());
  }
  {
    ByteWriter s;
    s.u64(n.program.constants.size());
    for (size_t i = 0; i < n.program.constants.size(); ++i) {
      const IOSpec& c = n.program.constants[i];
      s.u8(static_cast<uint8_t>(c.dtype));
      s.i64s(c.shape);
      s.i64s(c.strides);
      s.bytes(n.program.constant_data[i].data(), n.program.constant_data[i].size());
    }
    section(out, NeffSection::Constants, s.take());
  }
  {
    ByteWriter s;
    s.u64(n.metadata.size());
    for (const auto& [k, v] : n.metadata) {
      s.str(k);
      s.str(v);
    }
    section(out, NeffSection::Metadata, s.take());
  }
  {
    ByteWriter s;
    s.str(n.ir);
    section(out, NeffSection::IR, s.take());
  }
  std::vector<uint8_t>& buf = out.buffer();
  const uint64_t sum = hash64(buf.data(), buf.size());
  out.u64(sum);
  out.raw(kNeffEndMagic, 8);
  return out.take();
}

Neff read_neff(const uint8_t* data, size_t size, const std::string& what) {
  if (size < 16 + 16) throw NeffError(rt::str(what, ": not a NEFF (", size, " bytes, truncated)"));
  if (std::memcmp(data, kNeffMagic, 8) != 0)
    throw NeffError(rt::str(what, ": not a NEFF (bad magic)"));
  if (std::memcmp(data + size - 8, kNeffEndMagic, 8) != 0)
    throw NeffError(rt::str(what, ": truncated NEFF (end marker missing)"));
  uint64_t stored;
  std::memcpy(&stored, data + size - 16, 8);
  const uint64_t actual = hash64(data, size - 16);
  if (stored != actual) throw NeffError(rt::str(what, ": checksum mismatch (file is corrupted)"));
  ByteReader r(data + 8, size - 8 - 16, what);
  const uint32_t version = r.u32("format_version");
  if (version != kNeffFormatVersion)
    throw NeffError(rt::str(what, ": NEFF format version ", version,
                            " is not supported (this build reads version ", kNeffFormatVersion,
                            ")"));
  (void)r.u32("flags");
  Neff n;
  std::vector<IOSpec> sig_in, sig_out;
  std::vector<int> sig_mut;
  std::vector<IOSpec> consts;
  std::vector<std::vector<uint8_t>> const_data;
  bool have_program = false, have_target = false;
  while (!r.done()) {
    const uint32_t tag = r.u32("section.tag");
    const uint64_t len = r.u64("section.length");
    if (len > r.remaining()) r.fail("section.length", "section runs past the end of the file");
    ByteReader s(r.raw(len, "section"), len, what);
    switch (static_cast<NeffSection>(tag)) {
      case NeffSection::Target:
        n.target.instance_type = s.str("target.instance_type");
        n.target.target = s.str("target.target");
        n.target.nc_version = s.u32("target.nc_version");
        n.target.lnc = s.u32("target.lnc");
        have_target = true;
        break;
      case NeffSection::IOSignature: {
        auto specs = [&](std::vector<IOSpec>& v) {
          const uint64_t c = s.count("signature", 25);
          for (uint64_t i = 0; i < c; ++i) {
            IOSpec x;
            const uint8_t dt = s.u8("signature.dtype");
            if (dt >= static_cast<uint8_t>(DType::Undefined))
              s.fail("signature.dtype", "unknown dtype");
            x.dtype = static_cast<DType>(dt);
            x.shape = s.i64s("signature.shape");
            x.strides = s.i64s("signature.strides");
            x.name = s.str("signature.name");
            v.push_back(std::move(x));
          }
        };
        specs(sig_in);
        specs(sig_out);
        sig_mut = s.i32s("signature.mutated");
        break;
      }
      case NeffSection::Program: {
        // Constants arrive in their own section: validate once both are read.
        n.program = deserialize_program(s, false);
        have_program = true;
        break;
      }
      case NeffSection::Constants: {
        const uint64_t c = s.count("constants", 25);
        for (uint64_t i = 0; i < c; ++i) {
          IOSpec x;
          const uint8_t dt = s.u8("constant.dtype");
          if (dt >= static_cast<uint8_t>(DType::Undefined))
            s.fail("constant.dtype", "unknown dtype");
          x.dtype = static_cast<DType>(dt);
          x.shape = s.i64s("constant.shape");
          x.strides = s.i64s("constant.strides");
          consts.push_back(std::move(x));
          const_data.push_back(s.bytes("constant.data"));
        }
        break;
      }
      case NeffSection::Metadata: {
        const uint64_t c = s.count("metadata", 16);
        for (uint64_t i = 0; i < c; ++i) {
          std::string k = s.str("metadata.key");
          n.metadata[k] = s.str("metadata.value");
        }
        break;
      }
      case NeffSection::IR:
        n.ir = s.str("ir");
        break;
      default:
        break;  // unknown sections of the same format version are skipped
    }
  }
  if (!have_target || !have_program)
    throw NeffError(rt::str(what, ": a required section is missing"));
  n.program.constants = std::move(consts);
  n.program.constant_data = std::move(const_data);
  validate(n.program);
  auto same = [](const std::vector<IOSpec>& a, const std::vector<IOSpec>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].dtype != b[i].dtype || a[i].shape != b[i].shape || a[i].strides != b[i].strides)
        return false;
    return true;
  };
  if (!same(sig_in, n.program.inputs) || !same(sig_out, n.program.outputs) ||
      sig_mut != n.program.mutated_inputs)
    throw NeffError(rt::str(what, ": the I/O signature does not match the program"));
  return n;
}

std::string dump_neff(const Neff& n, bool with_program) {
  std::ostringstream os;
  os << "NEFF format version " << kNeffFormatVersion << "\n";
  os << "target: " << n.target.str() << "\n";
  os << "metadata:\n";
  for (const auto& [k, v] : n.metadata) os << "  " << k << ": " << v << "\n";
  size_t const_bytes = 0;
  for (const auto& c : n.program.constant_data) const_bytes += c.size();
  os << "constants: " << n.program.constants.size() << " (" << const_bytes << " bytes)\n";
  if (with_program) {
    os << "program:\n" << describe(n.program);
    if (!n.ir.empty()) os << "ir:\n" << n.ir;
  }
  return os.str();
}

}  // namespace neuron::cc
