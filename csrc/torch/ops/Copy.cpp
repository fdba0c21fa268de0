// Copy paths. Tasks never capture at::Tensor/Storage objects (releasing them on a worker
// thread could need the GIL); they capture raw pointers, and lifetimes are guaranteed by
// stream-ordered device memory and by waiting for host memory that is not pinned.
#include "Copy.h"

#include <ATen/MemoryOverlap.h>

#include "../Common.h"
#include "../DeviceTime.h"
#include "../DtypeContract.h"
#include "../NeuronAllocator.h"
#include "kernels/copy.h"
#include "runtime/event.h"

namespace neuron::torch_glue {
namespace {

// A dtype the kernels can move bytes for: the tensor's own, or a same-sized stand-in when only
// a byte copy is needed (quantized, bits, exotic float8 formats).
kernels::DType byte_dtype(size_t itemsize) {
  switch (itemsize) {
    case 1: return kernels::DType::UInt8;
    case 2: return kernels::DType::Int16;
    case 4: return kernels::DType::Int32;
    case 8: return kernels::DType::Int64;
    case 16: return kernels::DType::Complex128;
    default: return kernels::DType::Undefined;
  }
}

// Refs for a kernel copy dst <- src, or false if the dtypes need a conversion the kernels lack.
bool make_copy_refs(const at::Tensor& dst, const at::Tensor& src, kernels::TensorRef& d,
                    kernels::TensorRef& s) {
  d = make_ref(dst);
  s = make_ref(src);
  if (dst.scalar_type() == src.scalar_type()) {
    if (d.dtype == kernels::DType::Undefined) d.dtype = s.dtype = byte_dtype(dst.element_size());
    return d.dtype != kernels::DType::Undefined;
  }
  return d.dtype != kernels::DType::Undefined && s.dtype != kernels::DType::Undefined;
}

void check_overlap(const at::Tensor& dst, const at::Tensor& src) {
  at::assert_no_internal_overlap(dst);
  if (is_neuron(dst) && is_neuron(src) && dst.device() == src.device()) {
    at::assert_no_partial_overlap(dst, src);
  }
}

bool storage_is_pinned(const at::Tensor& t) { return t.numel() > 0 && is_pinned_ptr(t.data_ptr()); }

// Host-side wait for the task just launched on `stream` (and everything before it).
void finish(rt::Stream& stream) {
  translate_errors([&] { stream.synchronize(); });
}

void copy_h2d(const at::Tensor& dst, const at::Tensor& src_in, bool non_blocking) {
  at::Tensor src = src_in;
  kernels::TensorRef d, s;
  if (!make_copy_refs(dst, src, d, s)) {
    src = src.to(dst.scalar_type());  // convert on the host first
    TORCH_CHECK(make_copy_refs(dst, src, d, s), "neuron: cannot copy ", src_in.scalar_type(),
                " to ", dst.scalar_type());
  }
  // The device holds 64-bit values in 32 bits: with NEURON_EMU_STRICT_DTYPES=1 a value that
  // does not fit fails here, where it enters the device, not only at a later kernel.
  if (dtype_contract::is_64bit(dst.scalar_type()) && dtype_contract::strict())
    dtype_contract::check_host_tensor(src, "copy to neuron (tensor.to('neuron'), copy_)");
  const auto dev = dst.device().index();
  rt::Stream& stream = current_stream(dev);
  const bool async = non_blocking && src.is_same(src_in) && storage_is_pinned(src);
  launch_est(dev, "neuron::copy_h2d", [d, s] { kernels::copy(d, s); },
             nki::transfer_ns(tensor_bytes(dst), device_time_params()));
  if (async) {
    record_pinned_use(src.data_ptr(), stream, stream.launched());
  } else {
    finish(stream);
  }
}

void copy_d2h(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  kernels::TensorRef d, s;
  const auto dev = src.device().index();
  rt::Stream& stream = current_stream(dev);
  if (make_copy_refs(dst, src, d, s)) {
    const bool async = non_blocking && storage_is_pinned(dst);
    launch_est(dev, "neuron::copy_d2h", [d, s] { kernels::copy(d, s); },
               nki::transfer_ns(tensor_bytes(src), device_time_params()));
    if (async) {
      record_pinned_use(dst.data_ptr(), stream, stream.launched());
    } else {
      finish(stream);
    }
    return;
  }
  // Conversion the kernels lack: bring the bytes over, then convert on the host.
  at::Tensor tmp = at::empty(src.sizes(), src.options().device(at::kCPU));
  copy_d2h(tmp, src, false);
  dst.copy_(tmp);
}

void copy_d2d(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  kernels::TensorRef d, s;
  if (!make_copy_refs(dst, src, d, s)) {
    at::Tensor tmp = src.to(at::kCPU).to(dst.scalar_type());
    copy_h2d(dst, tmp, false);
    return;
  }
  const auto ddev = dst.device().index();
  const auto sdev = src.device().index();
  rt::Stream& dstream = current_stream(ddev);
  if (ddev != sdev) {
    // Order after the producer on the source device, and keep the source block from being
    // reused there until this copy has read it.
    rt::Stream& sstream = current_stream(sdev);
    translate_errors([&] {
      rt::Event ev;
      ev.record(sstream);
      ev.block(dstream);
      rt_device(src).allocator().record_stream(src.storage().data_ptr().get(), &dstream);
    });
  }
  launch_op(ddev, "neuron::copy_d2d", [d, s] { kernels::copy(d, s); }, bytes_of({&dst, &src}));
  (void)non_blocking;  // device-to-device copies are always asynchronous
}

}  // namespace

void copy_into(const at::Tensor& dst, const at::Tensor& src_in, bool non_blocking) {
  if (dst.numel() == 0) return;
  at::Tensor src = src_in.sizes() == dst.sizes() ? src_in : src_in.expand(dst.sizes());
  check_overlap(dst, src);
  if (is_neuron(dst) && is_neuron(src)) return copy_d2d(dst, src, non_blocking);
  if (is_neuron(dst)) {
    TORCH_CHECK(src.device().is_cpu(), "neuron: cannot copy from ", src.device(), " to ", dst.device());
    return copy_h2d(dst, src, non_blocking);
  }
  TORCH_CHECK(dst.device().is_cpu(), "neuron: cannot copy from ", src.device(), " to ", dst.device());
  copy_d2h(dst, src, non_blocking);
}

}  // namespace neuron::torch_glue
