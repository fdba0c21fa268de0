#include "device_time.h"

#include "nki_call.h"

namespace neuron::cc {

namespace {

double numel(const TensorDesc& t) {
  double n = 1;
  for (int64_t d : t.sizes) n *= static_cast<double>(d);
  return n;
}

double bytes(const TensorDesc& t) {
  return numel(t) * static_cast<double>(kernels::element_size(t.dtype));
}

// HBM bytes a step moves. Indexing reads and writes only the rows it selects, and an in-place
// update only the rows it writes, not the whole tensor it indexes (an embedding gather, a KV
// cache write).
double step_bytes(const Step& s) {
  const auto& t = s.tensors;
  const auto sum_from = [&](size_t i) {
    double b = 0;
    for (; i < t.size(); ++i) b += bytes(t[i]);
    return b;
  };
  const auto flag = [&](size_t i) { return i < s.ints.size() && s.ints[i] != 0; };
  switch (s.kind) {
    case StepKind::Index:  // x, out, idx...
      if (t.size() >= 2) return 2 * bytes(t[1]) + sum_from(2);
      break;
    case StepKind::Gather:  // x, index, out
      if (t.size() >= 3) return 2 * bytes(t[2]) + bytes(t[1]);
      break;
    case StepKind::IndexPut:  // self, values, out, idx...; ints: accumulate, inplace
      if (t.size() >= 3 && flag(1)) return 2 * bytes(t[1]) + sum_from(3);
      break;
    case StepKind::Scatter:  // self, index, src, out; ints: dim, reduce, inplace
      if (t.size() >= 3 && flag(2)) return 2 * bytes(t[2]) + bytes(t[1]);
      break;
    case StepKind::SliceScatter:  // self, src, out; ints: dim, start, end, step, inplace
      if (t.size() >= 2 && flag(4)) return 2 * bytes(t[1]);
      break;
    default:
      break;
  }
  return sum_from(0);
}

nki::WorkCost step_work(const Step& s) {
  nki::WorkCost w;
  w.hbm_bytes = step_bytes(s);
  const auto add_flops = [&](double f, DType dt) {
    (dt == DType::Float32 ? w.flops_fp32 : w.flops_bf16) += f;
  };
  switch (s.kind) {
    case StepKind::Gemm:  // A [.., M, K], B, C [.., M, N]: 2 M N K per batch
      if (s.tensors.size() >= 3 && !s.tensors[0].sizes.empty())
        add_flops(2.0 * numel(s.tensors[2]) * static_cast<double>(s.tensors[0].sizes.back()),
                  s.tensors[0].dtype);
      break;
    case StepKind::Attention:  // q [B, H, Sq, D], k [B, H, Sk, D]: QK^T and PV
    case StepKind::AttentionBackward: {
      const size_t qi = s.kind == StepKind::Attention ? 0 : 1;
      if (s.tensors.size() > qi + 1 && s.tensors[qi + 1].sizes.size() >= 2) {
        const auto& k = s.tensors[qi + 1].sizes;
        const double f = 4.0 * numel(s.tensors[qi]) * static_cast<double>(k[k.size() - 2]);
        add_flops(s.kind == StepKind::Attention ? f : 2.5 * f, s.tensors[qi].dtype);
      }
      break;
    }
    case StepKind::Conv:  // input, weight, [bias], out: 2 * out * (weight / out channels)
      if (s.tensors.size() >= 3 && !s.tensors[1].sizes.empty()) {
        const double per_out = numel(s.tensors[1]) / static_cast<double>(s.tensors[1].sizes[0]);
        add_flops(2.0 * numel(s.tensors.back()) * per_out, s.tensors[0].dtype);
      }
      break;
    case StepKind::BatchNorm:  // statistics, then the normalization: ~8 flops per element
    case StepKind::BatchNormBackward:  // two reductions and the input gradient: ~10 per element
      if (s.tensors.size() >= 2) {
        const size_t x = s.kind == StepKind::BatchNorm ? 0 : 1;
        add_flops((s.kind == StepKind::BatchNorm ? 8.0 : 10.0) * numel(s.tensors[x]),
                  s.tensors[x].dtype);
      }
      break;
    default:
      break;
  }
  return w;
}

// (input, output) pairs of a custom step that the program placed in the same memory.
std::vector<std::pair<int32_t, int32_t>> aliased_outputs(const Step& s) {
  std::vector<std::pair<int32_t, int32_t>> r;
  if (s.ints.empty()) return r;
  const size_t n_in = static_cast<size_t>(s.ints[0]);
  const auto same = [](const TensorDesc& a, const TensorDesc& b) {
    return a.space == b.space && a.index == b.index && a.byte_offset == b.byte_offset &&
           a.offset == b.offset && a.dtype == b.dtype && a.sizes == b.sizes &&
           a.strides == b.strides;
  };
  for (size_t i = 0; i < n_in && i < s.tensors.size(); ++i)
    for (size_t j = n_in; j < s.tensors.size(); ++j)
      if (same(s.tensors[i], s.tensors[j]))
        r.emplace_back(static_cast<int32_t>(i), static_cast<int32_t>(j - n_in));
  return r;
}

}  // namespace

ProgramTime estimate_program(const Program& prog, const nki::DeviceTimeParams& p) {
  ProgramTime t;
  t.launch_ns = p.neff_launch_ns;
  t.total_ns = t.launch_ns;
  for (const Step& s : prog.steps) {
    StepTime st;
    st.name = s.name;
    st.kind = s.kind;
    st.work = step_work(s);
    if (s.kind == StepKind::Custom && s.text == nki_call::kTarget)
      st.ns = p.nki_handoff_ns + nki_call::estimate_ns(s.payload, p, aliased_outputs(s));
    else
      st.ns = p.kernel_boundary_ns + nki::work_ns(st.work, p);
    t.total_ns += st.ns;
    t.steps.push_back(std::move(st));
  }
  return t;
}

}  // namespace neuron::cc
