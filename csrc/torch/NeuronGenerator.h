// Per-device random generators of the neuron device: counter-based (seed, offset) state like
// Philox, so a seed determines every random number regardless of thread count. Each random
// op reserves a block of offsets.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <utility>

namespace neuron::torch_glue {

struct NeuronGeneratorImpl final : public c10::GeneratorImpl {
  explicit NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed = 67280421310721ULL);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // Returns (seed, first offset) and advances the offset by `increment`. Caller holds mutex_.
  std::pair<uint64_t, uint64_t> philox_inputs(uint64_t increment);

 private:
  NeuronGeneratorImpl* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The default generator of a device (created lazily, seeded with the default seed).
const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

}  // namespace neuron::torch_glue
