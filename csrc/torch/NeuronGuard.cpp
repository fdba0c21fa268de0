// c10 device guard for the neuron device: current device and stream are the runtime's
// thread-local ones; c10 stream ids are runtime stream ids; c10 events are rt::Event objects.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "Common.h"
#include "runtime/event.h"

namespace neuron::torch_glue {
namespace {

c10::Stream to_c10(const rt::Stream& s) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNeuron, static_cast<c10::DeviceIndex>(s.device())),
                     s.id());
}

rt::Stream& to_rt(const c10::Stream& s) { return rt_device(s.device_index()).stream(s.id()); }

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNeuron; }

  c10::Device exchangeDevice(c10::Device d) const override {
    const c10::Device old = getDevice();
    if (old.index() != d.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(kNeuron, static_cast<c10::DeviceIndex>(rt::current_device()));
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kNeuron, "expected a neuron device, got ", d);
    rt_device(d.index());  // validates
    rt::set_current_device(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    try {
      rt::set_current_device(d.index());
    } catch (...) {
      // Restoring a device in a destructor must not throw (e.g. in a forked child).
    }
  }
  c10::Stream getStream(c10::Device d) const override {
    return to_c10(current_stream(d.index()));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return to_c10(rt_device(d.index()).default_stream());
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool isHighPriority) const override {
    return to_c10(rt_device(d.index()).pool_stream(isHighPriority ? -1 : 0));
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return to_c10(rt_device(d.index()).pool_stream(priority));
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    const c10::Stream old = getStream(s.device());
    rt::set_current_stream(to_rt(s));
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    try {
      return static_cast<c10::DeviceIndex>(rt::Runtime::get().device_count());
    } catch (...) {
      return 0;  // must not throw; the error surfaces when a tensor is created
    }
  }

  // Events: `event` points to a heap rt::Event owned by c10::Event.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "event device index ", device_index, " does not match the recording stream's device ",
                stream.device_index());
    auto* ev = static_cast<rt::Event*>(*event);
    if (!ev) {
      ev = new rt::Event(flag == c10::EventFlag::BACKEND_DEFAULT);
      *event = ev;
    }
    translate_errors([&] { ev->record(to_rt(stream)); });
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (!event) return;
    translate_errors([&] { static_cast<rt::Event*>(event)->block(to_rt(stream)); });
  }
  bool queryEvent(void* event) const override {
    if (!event) return true;
    return translate_errors([&] { return static_cast<rt::Event*>(event)->query(); });
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<rt::Event*>(event);
  }
  void synchronizeEvent(void* event) const override {
    if (!event) return;
    translate_errors([&] { static_cast<rt::Event*>(event)->synchronize(); });
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "elapsed_time: both events must have been recorded");
    return translate_errors(
        [&] { return static_cast<rt::Event*>(start)->elapsed_ms(*static_cast<rt::Event*>(end)); });
  }

  bool queryStream(const c10::Stream& stream) const override {
    return translate_errors([&] { return to_rt(stream).query(); });
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    translate_errors([&] { to_rt(stream).synchronize(); });
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    translate_errors([&] { rt_device(device_index).synchronize(); });
  }
  // torch.accelerator.get_device_capability(): every dtype can be allocated on a NeuronCore's
  // HBM and converted to every other (conversions the kernels do not cover run through the
  // visible CPU fallback), so all are reported. The profile's NeuronCore version, HBM and SBUF
  // are in torch.neuron.get_device_properties().
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    translate_errors([&] { rt_device(d.index()); });  // "The device index is out of range: ..."
    return c10::DeviceCapability();
  }
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr, const c10::Stream& stream) const override {
    if (!data_ptr.get()) return;
    translate_errors([&] {
      rt::Device& dev = rt_device(stream.device_index());
      dev.allocator().record_stream(data_ptr.get(), &dev.stream(stream.id()));
    });
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

}  // namespace neuron::torch_glue
