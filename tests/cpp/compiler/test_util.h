// Helpers of the compiler tests: host tensors, running a compiled program on host memory, and
// a naive reference interpreter of Neuron IR (double precision, one op at a time, results
// rounded to each op's dtype) to compare compiled programs against.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "compiler/cache.h"
#include "compiler/compiler.h"
#include "compiler/ir.h"
#include "compiler/metrics.h"
#include "compiler/program.h"
#include "kernels/dispatch.h"

namespace neuron::cc::test {

// A private NEFF cache directory (TORCH_NEURONX_NEFF_CACHE_DIR) for one test, memory cache
// and metrics cleared; removed afterwards.
struct CacheDir {
  std::string path;
  std::string old;
  bool had_old = false;
  CacheDir() {
    path = ::testing::TempDir() + "/neff_cache_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(path);
    if (const char* o = std::getenv("TORCH_NEURONX_NEFF_CACHE_DIR")) {
      old = o;
      had_old = true;
    }
    ::setenv("TORCH_NEURONX_NEFF_CACHE_DIR", path.c_str(), 1);
    NeffCache::instance().clear_memory();
    reset_metrics();
  }
  ~CacheDir() {
    if (had_old)
      ::setenv("TORCH_NEURONX_NEFF_CACHE_DIR", old.c_str(), 1);
    else
      ::unsetenv("TORCH_NEURONX_NEFF_CACHE_DIR");
    std::filesystem::remove_all(path);
  }
};

struct HostTensor {
  TensorType type;
  std::vector<double> v;  // contiguous, row-major
};

inline double round_to(double x, DType t) {
  switch (t) {
    case DType::Float32:
      return static_cast<double>(static_cast<float>(x));
    case DType::BFloat16:
      return static_cast<double>(static_cast<float>(kernels::bf16(static_cast<float>(x))));
    case DType::Float16:
      return static_cast<double>(static_cast<float>(kernels::f16(static_cast<float>(x))));
    case DType::Bool:
      return x != 0 ? 1.0 : 0.0;
    case DType::Float64:
      return x;
    default:
      if (std::isnan(x)) return 0;
      return std::trunc(x);
  }
}

inline HostTensor random_tensor(TensorType t, uint32_t seed, double lo = -2, double hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  HostTensor h{t, std::vector<double>(static_cast<size_t>(t.numel()))};
  for (auto& x : h.v)
    x = kernels::is_floating(t.dtype) ? round_to(d(rng), t.dtype) : std::floor(d(rng));
  return h;
}

// Encodes a host tensor into `strides` layout bytes (extent given by strides).
inline std::vector<uint8_t> encode(const HostTensor& h, const std::vector<int64_t>& strides) {
  const size_t es = kernels::element_size(h.type.dtype);
  int64_t extent = 1;
  for (size_t d = 0; d < h.type.shape.size(); ++d) extent += (h.type.shape[d] - 1) * strides[d];
  if (h.type.numel() == 0) extent = 1;
  std::vector<uint8_t> out(static_cast<size_t>(extent) * es, 0);
  for (int64_t e = 0; e < h.type.numel(); ++e) {
    int64_t rem = e, off = 0;
    for (size_t d = h.type.shape.size(); d-- > 0;) {
      off += (rem % h.type.shape[d]) * strides[d];
      rem /= h.type.shape[d];
    }
    kernels::dispatch_all(h.type.dtype, [&](auto tag) {
      using T = decltype(tag);
      T x = kernels::convert<T>(h.v[static_cast<size_t>(e)]);
      std::memcpy(out.data() + static_cast<size_t>(off) * es, &x, es);
    });
  }
  return out;
}

inline HostTensor decode(const TensorType& t, const uint8_t* data,
                         const std::vector<int64_t>& strides) {
  HostTensor h{t, std::vector<double>(static_cast<size_t>(t.numel()))};
  const size_t es = kernels::element_size(t.dtype);
  for (int64_t e = 0; e < t.numel(); ++e) {
    int64_t rem = e, off = 0;
    for (size_t d = t.shape.size(); d-- > 0;) {
      off += (rem % t.shape[d]) * strides[d];
      rem /= t.shape[d];
    }
    kernels::dispatch_all(t.dtype, [&](auto tag) {
      using T = decltype(tag);
      T x;
      std::memcpy(&x, data + static_cast<size_t>(off) * es, es);
      h.v[static_cast<size_t>(e)] = kernels::convert<double>(x);
    });
  }
  return h;
}

// Runs a program on host buffers; inputs are given as host tensors in the program's layouts.
// Mutated inputs are written back into `inputs`.
inline std::vector<HostTensor> run_program(const Program& p, std::vector<HostTensor>& inputs) {
  Buffers b;
  std::vector<std::vector<uint8_t>> in_bytes, out_bytes;
  for (size_t i = 0; i < p.inputs.size(); ++i)
    in_bytes.push_back(encode(inputs[i], p.inputs[i].strides));
  for (const IOSpec& s : p.outputs) {
    HostTensor z{TensorType{s.dtype, s.shape},
                 std::vector<double>(static_cast<size_t>(TensorType{s.dtype, s.shape}.numel()), 0)};
    out_bytes.push_back(encode(z, s.strides));
  }
  for (auto& x : in_bytes) b.inputs.push_back(x.data());
  for (auto& x : out_bytes) b.outputs.push_back(x.data());
  for (auto& x : p.constant_data) b.constants.push_back(x.data());
  std::vector<uint8_t> arena(static_cast<size_t>(std::max<int64_t>(p.arena_bytes, 1)));
  b.arena = arena.data();
  execute(p, b);
  std::vector<HostTensor> outs;
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const uint8_t* data = out_bytes[k].data();
    for (const OutputAlias& a : p.output_aliases)  // a view of an input: read it there
      if (a.output == static_cast<int32_t>(k))
        data = (a.of_output ? out_bytes : in_bytes)[static_cast<size_t>(a.input)].data() +
               a.offset * static_cast<int64_t>(kernels::element_size(p.outputs[k].dtype));
    outs.push_back(
        decode(TensorType{p.outputs[k].dtype, p.outputs[k].shape}, data, p.outputs[k].strides));
  }
  for (int m : p.mutated_inputs)
    inputs[static_cast<size_t>(m)] =
        decode(inputs[static_cast<size_t>(m)].type, in_bytes[static_cast<size_t>(m)].data(),
               p.inputs[static_cast<size_t>(m)].strides);
  return outs;
}

inline std::vector<HostTensor> compile_and_run(const Graph& g, std::vector<HostTensor>& inputs,
                                               int opt_level = 2, Compiled* out = nullptr) {
  CompileOptions o;
  o.opt_level = opt_level;
  Compiled c = compile(g, o);
  auto r = run_program(c.program, inputs);
  if (out) *out = std::move(c);
  return r;
}

// ---- reference interpreter ----

std::vector<HostTensor> reference(const Graph& g, std::vector<HostTensor>& inputs);

inline void expect_close(const HostTensor& got, const HostTensor& want, double rtol, double atol,
                         const std::string& what = "") {
  ASSERT_EQ(got.type.shape, want.type.shape) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.v.size(); ++i) {
    const double a = got.v[i], b = want.v[i];
    if (std::isnan(a) && std::isnan(b)) continue;
    if (std::isinf(a) && std::isinf(b) && (a > 0) == (b > 0)) continue;
    if (!(std::fabs(a - b) <= atol + rtol * std::fabs(b))) {
      if (bad < 5) ADD_FAILURE() << what << " element " << i << ": got " << a << ", want " << b;
      ++bad;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.v.size() << " elements differ";
}

}  // namespace neuron::cc::test
