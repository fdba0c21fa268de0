// The boxed CPU fallback for every aten op without a neuron kernel: synchronize, copy the
// neuron inputs to the host, run the CPU kernel, copy results and in-place mutations back.
// View ops are answered without copying (their result is computed on meta tensors and
// re-created as a view of the neuron input). Random ops draw from the neuron generator.
// Every op that falls back is recorded (torch_neuronx.get_fallback_ops()), and
// TORCH_NEURONX_FALLBACK=allow|warn|error decides whether it may run.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "Common.h"
#include "DeviceTime.h"
#include "DtypeContract.h"
#include "NeuronGenerator.h"
#include "OpTracker.h"
#include "kernels/random.h"
#include "runtime/device_clock.h"
#include "runtime/trace.h"

namespace neuron::torch_glue {
namespace {

enum class FallbackMode { Allow, Warn, Error };

FallbackMode fallback_mode() {
  const char* v = std::getenv("TORCH_NEURONX_FALLBACK");
  if (!v || !*v) return FallbackMode::Allow;
  const std::string s(v);
  if (s == "allow") return FallbackMode::Allow;
  if (s == "warn") return FallbackMode::Warn;
  if (s == "error") return FallbackMode::Error;
  TORCH_CHECK(false, "TORCH_NEURONX_FALLBACK=", s, ": expected one of allow, warn, error");
}

std::string full_name(const c10::OperatorHandle& op) {
  const auto& n = op.operator_name();
  return n.overload_name.empty() ? n.name : n.name + "." + n.overload_name;
}

bool is_generator_type(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::GeneratorType) return true;
  if (t->kind() == c10::TypeKind::OptionalType)
    return t->containedType(0)->kind() == c10::TypeKind::GeneratorType;
  return false;
}

// A CPU generator whose stream is determined by the neuron generator's (seed, offset); the
// neuron generator advances, so consecutive ops get independent streams.
at::Generator cpu_generator_from(at::Generator neuron_gen) {
  std::lock_guard<std::mutex> lock(neuron_gen.mutex());
  auto* impl = neuron_gen.get<NeuronGeneratorImpl>();
  const auto [seed, offset] = impl->philox_inputs(1);
  return at::make_generator<at::CPUGeneratorImpl>(
      kernels::splitmix64(seed ^ kernels::splitmix64(offset)));
}

at::Tensor to_cpu(const at::Tensor& t) {
  if (!is_neuron(t)) return t;
  return t.to(at::kCPU);
}

// The 64-bit dtype contract (DtypeContract.h) for a neuron tensor the fallback touches; `host`
// is its CPU copy (or the CPU result that goes back to the device).
void dtype_contract_check(const at::Tensor& t, const at::Tensor& host, const std::string& op) {
  if (!t.defined() || !dtype_contract::is_64bit(t.scalar_type())) return;
  dtype_contract::note(t.scalar_type());
  if (dtype_contract::strict()) dtype_contract::check_host_tensor(host, op.c_str());
}

// A quantized CPU result cannot move to the device: neuron has no quantized tensor storage (no
// QuantizedPrivateUse1 kernels), and ATen's own error would only name aten::empty_quantized.
void check_not_quantized(const at::Tensor& t, const std::string& op) {
  TORCH_CHECK(!t.defined() || !t.is_quantized(), op, ": quantized tensors (", t.scalar_type(),
              ") are not supported on neuron; quantize on the CPU (e.g. ",
              "torch.quantize_per_tensor(x.cpu(), ...))");
}

// Recreates the meta result of a view op as the same view of the neuron input.
at::Tensor view_like(const at::Tensor& meta_result, const at::Tensor& base) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(base.storage()),
                                                   base.key_set(), meta_result.dtype());
  impl->set_sizes_and_strides(meta_result.sizes(), meta_result.strides(), meta_result.storage_offset());
  return at::Tensor(std::move(impl));
}

at::Tensor to_meta(const at::Tensor& t) {
  // Same sizes, strides, offset and storage extent as `t`, on the meta device.
  const int64_t storage_elems =
      static_cast<int64_t>(t.storage().nbytes() / std::max<size_t>(1, t.dtype().itemsize()));
  at::Tensor storage = at::empty({storage_elems}, t.options().device(at::kMeta));
  return storage.as_strided(t.sizes(), t.strides(), t.storage_offset());
}

// View ops: run on meta tensors to learn the result's geometry.
bool try_view_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& rets = schema.returns();
  if (rets.size() != 1 || !rets[0].alias_info() || rets[0].alias_info()->isWrite()) return false;
  if (!rets[0].type()->isSubtypeOf(*c10::TensorType::get())) return false;
  const size_t n = schema.arguments().size();
  auto args = torch::jit::last(*stack, n);
  // The aliased input: the first tensor argument sharing the return's alias set.
  std::optional<size_t> base_idx;
  for (size_t i = 0; i < n; ++i) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (ai && args[i].isTensor() && ai->beforeSets() == rets[0].alias_info()->beforeSets()) {
      base_idx = i;
      break;
    }
  }
  if (!base_idx || !is_neuron(args[*base_idx].toTensor())) return false;
  const at::Tensor base = args[*base_idx].toTensor();
  torch::jit::Stack meta_stack;
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = args[i];
    meta_stack.push_back(v.isTensor() && v.toTensor().defined() ? c10::IValue(to_meta(v.toTensor())) : v);
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta_stack);
  const at::Tensor meta_result = meta_stack.back().toTensor();
  torch::jit::drop(*stack, n);
  torch::jit::push(*stack, view_like(meta_result, base));
  return true;
}

std::mutex g_warned_mu;
std::unordered_set<std::string> g_warned;

}  // namespace

void neuron_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = full_name(op);
  switch (fallback_mode()) {
    case FallbackMode::Error:
      TORCH_CHECK(false, name, " has no neuron kernel and CPU fallback is disabled (TORCH_NEURONX_FALLBACK=error)");
    case FallbackMode::Warn: {
      std::lock_guard<std::mutex> lock(g_warned_mu);
      if (g_warned.insert(name).second)
        TORCH_WARN(name, " has no neuron kernel and falls back to the CPU (copies its inputs to the host and back)");
      break;
    }
    case FallbackMode::Allow:
      break;
  }
  record_fallback(name);

  if (try_view_fallback(op, stack)) return;

  // The fallback on the device timeline (profiler traces): from here to the last copy back,
  // on both clocks. Its estimated cost is what it does: waits, copies and the host op.
  struct TimelineMark {
    const std::string& name;
    std::optional<c10::Device>& target;
    bool tracing = rt::Tracer::get().enabled();
    rt::ClockReading start = tracing ? rt::DeviceClock::get().read() : rt::ClockReading{};
    ~TimelineMark() {
      if (!tracing || !target) return;
      const rt::ClockReading end = rt::DeviceClock::get().read();
      const int dev = target->has_index() ? target->index() : rt::current_device();
      rt::Tracer::get().record(rt::TraceEvent{rt::intern("cpu_fallback::" + name), dev,
                                              rt::kFallbackRow, start.real_ns, end.real_ns, 0,
                                              start.real_ns, start.est_host_ns, end.est_host_ns});
    }
  };

  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  const size_t begin = stack->size() - n;
  std::optional<c10::Device> target;
  TimelineMark mark{name, target};
  // This machine's time for the fallback is not Trainium2's host's: the estimated clock counts
  // the copies' waits and a modelled host op instead (nki/device_time.h host_op_ns).
  struct ExcludeHostTime {
    ExcludeHostTime() { rt::DeviceClock::get().host_wait_begin(); }
    ~ExcludeHostTime() { rt::DeviceClock::get().host_wait_end(0); }
  } exclude;

  // 1. Inputs to the host; keep each neuron original next to its CPU copy.
  struct Arg {
    std::vector<std::optional<at::Tensor>> original;  // one entry for a tensor, several for lists
    std::vector<std::optional<at::Tensor>> cpu;
  };
  std::vector<std::optional<Arg>> converted(n);
  auto note_target = [&](const at::Tensor& t) {
    if (!target && is_neuron(t)) target = t.device();
  };
  for (size_t i = 0; i < n; ++i) {
    c10::IValue& v = (*stack)[begin + i];
    const bool is_out = schema.arguments()[i].is_out();
    if (v.isTensor()) {
      const at::Tensor t = v.toTensor();
      if (!is_neuron(t)) continue;
      note_target(t);
      // An out= tensor is only written: hand the CPU kernel an empty one (no copy to the host,
      // and the kernel resizes it silently); the result is copied back, resizing the original.
      Arg a{{t}, {is_out ? at::empty({0}, t.options().device(at::kCPU)) : to_cpu(t)}};
      if (!is_out) dtype_contract_check(t, *a.cpu[0], name);
      v = c10::IValue(*a.cpu[0]);
      converted[i] = std::move(a);
    } else if (v.isTensorList()) {
      Arg a;
      c10::List<at::Tensor> cpu_list;
      for (const at::Tensor& t : v.toTensorVector()) {
        note_target(t);
        a.original.emplace_back(t);
        // out= lists must keep their sizes (kernels check them) but not their contents.
        a.cpu.emplace_back(is_out && is_neuron(t) ? at::empty_like(t, t.options().device(at::kCPU)) : to_cpu(t));
        if (is_neuron(t) && !is_out) dtype_contract_check(t, *a.cpu.back(), name);
        cpu_list.push_back(*a.cpu.back());
      }
      v = c10::IValue(cpu_list);
      converted[i] = std::move(a);
    } else if (v.isOptionalTensorList()) {
      Arg a;
      c10::List<std::optional<at::Tensor>> cpu_list;
      for (const c10::IValue& e : v.toListRef()) {
        std::optional<at::Tensor> o;
        if (!e.isNone()) o = e.toTensor();
        if (o) note_target(*o);
        a.original.push_back(o);
        a.cpu.push_back(o ? std::optional<at::Tensor>(to_cpu(*o)) : std::nullopt);
        if (o && is_neuron(*o)) dtype_contract_check(*o, *a.cpu.back(), name);
        cpu_list.push_back(a.cpu.back());
      }
      v = c10::IValue(cpu_list);
      converted[i] = std::move(a);
    } else if (v.isDevice() && v.toDevice().type() == kNeuron) {
      if (!target) target = v.toDevice();
      v = c10::IValue(c10::Device(c10::DeviceType::CPU));
    }
  }
  if (target && !target->has_index())
    target = c10::Device(kNeuron, static_cast<c10::DeviceIndex>(rt::current_device()));

  // 2. Random ops: a CPU generator derived from the neuron generator.
  for (size_t i = 0; i < n; ++i) {
    if (!is_generator_type(schema.arguments()[i].type())) continue;
    c10::IValue& v = (*stack)[begin + i];
    if (v.isGenerator() && v.toGenerator().device().type() != kNeuron) continue;
    const at::Generator neuron_gen =
        v.isGenerator() ? v.toGenerator() : default_generator(target ? target->index() : -1);
    v = c10::IValue(cpu_generator_from(neuron_gen));
  }

  // 3. Run the CPU kernel.
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  double host_bytes = 0;
  for (const auto& a : converted)
    if (a)
      for (const auto& t : a->cpu)
        if (t) host_bytes += tensor_bytes(*t);
  for (size_t j = stack->size() - schema.returns().size(); j < stack->size(); ++j)
    if ((*stack)[j].isTensor()) host_bytes += tensor_bytes((*stack)[j].toTensor());
  rt::DeviceClock::get().host_add(nki::host_op_ns(host_bytes, device_time_params()));

  // 4. Copy mutated arguments back (in-place and out=), resizing out= tensors as the CPU did.
  for (size_t i = 0; i < n; ++i) {
    const auto* ai = schema.arguments()[i].alias_info();
    if (!ai || !ai->isWrite() || !converted[i]) continue;
    Arg& a = *converted[i];
    for (size_t k = 0; k < a.original.size(); ++k) {
      if (!a.original[k] || !is_neuron(*a.original[k])) continue;
      at::Tensor dst = *a.original[k];
      const at::Tensor& src = *a.cpu[k];
      if (dst.sizes() != src.sizes()) dst.resize_(src.sizes());
      dtype_contract_check(dst, src, name);
      dst.copy_(src);
    }
  }

  // 5. Results: aliases of mutated arguments are the originals; new tensors go to the device.
  const auto& rets = schema.returns();
  const size_t rbegin = stack->size() - rets.size();
  for (size_t j = 0; j < rets.size(); ++j) {
    c10::IValue& r = (*stack)[rbegin + j];
    const auto* rai = rets[j].alias_info();
    if (rai && rai->isWrite()) {
      for (size_t i = 0; i < n; ++i) {
        const auto* ai = schema.arguments()[i].alias_info();
        if (ai && ai->beforeSets() == rai->beforeSets() && converted[i]) {
          const Arg& a = *converted[i];
          if (a.original.size() == 1 && r.isTensor()) {
            r = c10::IValue(*a.original[0]);
          } else if (r.isTensorList()) {
            c10::List<at::Tensor> l;
            for (const auto& o : a.original) l.push_back(*o);
            r = c10::IValue(l);
          }
          break;
        }
      }
      continue;
    }
    if (!target) continue;  // no neuron input: results stay where the CPU kernel put them
    if (r.isTensor()) {
      const at::Tensor t = r.toTensor();
      check_not_quantized(t, name);
      if (t.defined() && t.device().is_cpu()) dtype_contract_check(t, t, name);
      if (t.defined() && t.device().is_cpu()) r = c10::IValue(t.to(*target));
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> l;
      for (const at::Tensor& t : r.toTensorVector()) {
        check_not_quantized(t, name);
        l.push_back(t.defined() ? t.to(*target) : t);
      }
      r = c10::IValue(l);
    }
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_cpu_fallback>());
}

}  // namespace neuron::torch_glue
