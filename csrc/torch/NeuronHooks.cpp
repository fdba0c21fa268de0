// PrivateUse1 hooks: how core PyTorch asks about the neuron device (availability, generators,
// pinned memory, primary context, device of a pointer).
#include <ATen/detail/PrivateUse1HooksInterface.h>

#include "Common.h"
#include "NeuronAllocator.h"
#include "NeuronGenerator.h"

namespace neuron::torch_glue {
namespace {

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override {
    try {
      return rt::Runtime::get().device_count() > 0;
    } catch (...) {
      return false;
    }
  }
  void init() const override {
    translate_errors([] { rt::Runtime::get(); });
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return rt::Runtime::initialized(); }
  c10::DeviceIndex deviceCount() const override {
    try {
      return static_cast<c10::DeviceIndex>(rt::Runtime::get().device_count());
    } catch (...) {
      return 0;
    }
  }
  void setCurrentDevice(c10::DeviceIndex d) const override {
    rt_device(d);
    rt::set_current_device(d);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return static_cast<c10::DeviceIndex>(rt::current_device());
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    const auto old = getCurrentDevice();
    setCurrentDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return translate_errors([&]() -> const at::Generator& { return default_generator(device_index); });
  }
  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return new_generator(device_index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    if (rt::Runtime::initialized()) {
      auto& runtime = rt::Runtime::get();
      for (int i = 0; i < runtime.device_count(); ++i)
        if (runtime.device(i).allocator().owns(data))
          return at::Device(kNeuron, static_cast<c10::DeviceIndex>(i));
    }
    TORCH_CHECK(false, "pointer ", data, " is not neuron device memory");
  }
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return host_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

}  // namespace

// Defined in ops/Minimal.cpp (resizing storage must copy the old bytes on the stream).
void resize_storage_bytes(c10::StorageImpl* storage, size_t newsize);

void NeuronHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
}

static bool g_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
  return true;
}();

}  // namespace neuron::torch_glue
