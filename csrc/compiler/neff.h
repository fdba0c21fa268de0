// NEFF: the file format of a compiled graph (see docs/neff-format.md). A NEFF holds the target
// profile, the program, its constants, the I/O signature, metadata and the final IR text,
// framed by a header (magic, format version) and a footer (64-bit checksum of everything
// before it). read_neff() rejects truncated, corrupted or incompatible files with NeffError.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "program.h"

namespace neuron::cc {

constexpr char kNeffMagic[8] = {'N', 'E', 'F', 'F', 'E', 'M', 'U', '\0'};
constexpr char kNeffEndMagic[8] = {'N', 'E', 'F', 'F', 'E', 'N', 'D', '\0'};
constexpr uint32_t kNeffFormatVersion = 2;

enum class NeffSection : uint32_t {
  Target = 1,
  Program = 2,
  Constants = 3,
  IOSignature = 4,
  Metadata = 5,
  IR = 6,
};

// The hardware a NEFF was compiled for.
struct TargetProfile {
  std::string instance_type = "trn2.3xlarge";
  std::string target = "trn2";  // trn1 / trn2
  uint32_t nc_version = 3;
  uint32_t lnc = 2;
  bool operator==(const TargetProfile& o) const {
    return instance_type == o.instance_type && target == o.target && nc_version == o.nc_version &&
           lnc == o.lnc;
  }
  std::string str() const;
};

struct Neff {
  TargetProfile target;
  Program program;                              // includes constants and the I/O signature
  std::map<std::string, std::string> metadata;  // compiler version, flags, cache key, ...
  std::string ir;                               // final IR (for neff-dump)
};

std::vector<uint8_t> write_neff(const Neff& n);
// `what` names the source in errors (a file path).
Neff read_neff(const uint8_t* data, size_t size, const std::string& what);
// Human-readable dump (neff-dump).
std::string dump_neff(const Neff& n, bool with_program = true);

}  // namespace neuron::cc
