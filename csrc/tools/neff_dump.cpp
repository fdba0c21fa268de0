// neff-dump: prints a NEFF (compiled graph) readably: format version, target profile,
// metadata, I/O signature, constants, every program step with its fused-kernel code, and the
// final IR. Exit status 2 for usage errors, 1 for unreadable or invalid files.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "compiler/neff.h"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: neff-dump [--summary] FILE...\n"
               "  Prints the NEFF files produced by torch.compile(backend=\"neuron\")\n"
               "  (found in $TORCH_NEURONX_NEFF_CACHE_DIR, default /tmp/neff_cache).\n"
               "  --summary  header, metadata and signature only\n");
}

}  // namespace

int main(int argc, char** argv) {
  bool summary = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      usage(stdout);
      return 0;
    }
    if (!std::strcmp(argv[i], "--summary")) {
      summary = true;
    } else if (argv[i][0] == '-') {
      usage(stderr);
      return 2;
    } else {
      files.push_back(argv[i]);
    }
  }
  if (files.empty()) {
    usage(stderr);
    return 2;
  }
  int rc = 0;
  for (const std::string& path : files) {
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "neff-dump: cannot open %s\n", path.c_str());
      rc = 1;
      continue;
    }
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
    try {
      const neuron::cc::Neff n = neuron::cc::read_neff(data.data(), data.size(), path);
      if (files.size() > 1) std::cout << "== " << path << "\n";
      std::cout << neuron::cc::dump_neff(n, !summary);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "neff-dump: %s\n", e.what());
      rc = 1;
    }
  }
  return rc;
}
