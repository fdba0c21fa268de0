#include "NeuronGenerator.h"

#include <ATen/Utils.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <random>

#include "Common.h"

namespace neuron::torch_glue {

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(c10::Device(kNeuron, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

uint64_t NeuronGeneratorImpl::seed() {
  std::random_device rd;
  const uint64_t s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  set_current_seed(s);
  return s;
}

// State layout: 16 bytes, seed then offset (little-endian uint64), in a CPU uint8 tensor.
void NeuronGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
              "neuron generator state must be a torch.uint8 tensor");
  TORCH_CHECK(new_state.numel() == 16, "neuron generator state must have 16 bytes, got ",
              new_state.numel());
  const auto* p = static_cast<const uint8_t*>(new_state.data());
  std::memcpy(&seed_, p, 8);
  std::memcpy(&offset_, p + 8, 8);
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
  auto t = at::detail::empty_cpu({16}, at::kByte, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  std::memcpy(p, &seed_, 8);
  std::memcpy(p + 8, &offset_, 8);
  return t.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> NeuronGeneratorImpl::philox_inputs(uint64_t increment) {
  const uint64_t off = offset_;
  offset_ += increment;
  return {seed_, off};
}

NeuronGeneratorImpl* NeuronGeneratorImpl::clone_impl() const {
  auto* g = new NeuronGeneratorImpl(device().index(), seed_);
  g->offset_ = offset_;
  return g;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex mu;
  static std::deque<at::Generator> gens;  // deque: references stay valid as it grows
  const int n = rt::Runtime::get().device_count();
  const c10::DeviceIndex d = device < 0 ? static_cast<c10::DeviceIndex>(rt::current_device()) : device;
  TORCH_CHECK(d < n, "The device index is out of range: neuron:", static_cast<int>(d), " is not available, ", n,
              " neuron devices");
  std::lock_guard<std::mutex> g(mu);
  while (static_cast<int>(gens.size()) < n) {
    gens.push_back(at::make_generator<NeuronGeneratorImpl>(static_cast<c10::DeviceIndex>(gens.size())));
  }
  return gens[static_cast<size_t>(d)];
}

at::Generator new_generator(c10::DeviceIndex device) {
  const c10::DeviceIndex d = device < 0 ? static_cast<c10::DeviceIndex>(rt::current_device()) : device;
  return at::make_generator<NeuronGeneratorImpl>(d);
}

}  // namespace neuron::torch_glue
