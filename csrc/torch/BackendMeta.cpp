// Tensor backend metadata of neuron tensors: the str -> bool flags of
// torch._utils.set_tensor_metadata / get_tensor_metadata, kept on the TensorImpl (c10::BackendMeta)
// and carried by torch.save / torch.load through the pickler's registry of the device type.
//
// Semantics, as PyTorch's own out-of-tree device tests expect them: a fresh tensor has none
// ({}); set_tensor_metadata replaces the tensor's flags with the given ones (an empty dict
// clears them); torch.load restores them on neuron and drops them with map_location="cpu";
// detached tensors carry a copy (TensorImpl clones the BackendMeta with the rest of its
// metadata); views and results of ops start without (PyTorch builds them as new TensorImpls). The flags never change
// how a tensor computes.
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <map>
#include <string>
#include <unordered_map>

namespace neuron::torch_glue {
namespace {

struct NeuronBackendMeta final : c10::BackendMeta {
  std::map<std::string, bool> flags;  // ordered: get_tensor_metadata lists them the same way every time

  c10::intrusive_ptr<c10::BackendMeta> clone(const c10::intrusive_ptr<c10::BackendMeta>& ptr) const override {
    (void)ptr;
    auto copy = c10::make_intrusive<NeuronBackendMeta>();
    copy->flags = flags;
    return copy;
  }
};

void get_flags(const at::Tensor& t, std::unordered_map<std::string, bool>& out) {
  if (const auto* meta = dynamic_cast<NeuronBackendMeta*>(t.unsafeGetTensorImpl()->get_backend_meta()))
    for (const auto& [key, value] : meta->flags) out[key] = value;
}

void set_flags(const at::Tensor& t, std::unordered_map<std::string, bool>& flags) {
  if (flags.empty()) {
    t.unsafeGetTensorImpl()->set_backend_meta(c10::intrusive_ptr<c10::BackendMeta>());
    return;
  }
  auto meta = c10::make_intrusive<NeuronBackendMeta>();
  meta->flags.insert(flags.begin(), flags.end());
  t.unsafeGetTensorImpl()->set_backend_meta(meta);
}

const int kRegistered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &get_flags, &set_flags);
  return 0;
}();

}  // namespace
}  // namespace neuron::torch_glue
