// The ops every PrivateUse1 backend needs natively: factories, copies, views, resize/set,
// reading a scalar, fill and zero, record_stream, and the cross-device `.data =` hook.
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <ATen/native/Copy.h>
#include <ATen/native/DispatchStub.h>
#include <torch/library.h>

#include <cstring>

#include "../Common.h"
#include "../NeuronAllocator.h"
#include "../OpTracker.h"
#include "Copy.h"
#include "kernels/copy.h"

namespace neuron::torch_glue {

// Replaces the storage's memory by a block of `newsize` bytes holding the old contents
// (truncated or extended). The copy is queued on the current stream; the old block is marked
// as used by that stream so it is not reused before the copy has read it.
void resize_storage_bytes(c10::StorageImpl* storage, size_t newsize) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const c10::DeviceIndex d = storage->device().index() >= 0 ? storage->device().index()
                                                           : static_cast<c10::DeviceIndex>(rt::current_device());
  c10::DeviceGuard guard(c10::Device(kNeuron, d));
  at::DataPtr fresh = newsize ? device_allocator()->allocate(newsize) : at::DataPtr(nullptr, c10::Device(kNeuron, d));
  const size_t keep = std::min(storage->nbytes(), newsize);
  void* old_ptr = storage->mutable_data();
  if (keep > 0 && old_ptr) {
    void* new_ptr = fresh.get();
    rt::Stream& stream = current_stream(d);
    translate_errors([&] { rt_device(d).allocator().record_stream(old_ptr, &stream); });
    launch(d, "neuron::resize_storage", [new_ptr, old_ptr, keep] { std::memcpy(new_ptr, old_ptr, keep); });
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(newsize);
}

namespace {

c10::Device neuron_device(std::optional<c10::Device> device) {
  c10::Device d = device.value_or(c10::Device(kNeuron));
  TORCH_CHECK(d.type() == kNeuron, "expected a neuron device, got ", d);
  if (!d.has_index()) d = c10::Device(kNeuron, static_cast<c10::DeviceIndex>(rt::current_device()));
  return d;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  NEURON_TRACK_OP("aten::empty.memory_format");
  TORCH_CHECK(!pin_memory.value_or(false), "only CPU tensors can be pinned");
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided, "neuron supports only strided tensors, got layout ",
              *layout);
  const c10::Device d = neuron_device(device);
  c10::DeviceGuard guard(d);
  rt_device(d.index());  // raises a clear error for a device that does not exist
  return at::detail::empty_generic(size, device_allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  NEURON_TRACK_OP("aten::empty_strided");
  TORCH_CHECK(!pin_memory.value_or(false), "only CPU tensors can be pinned");
  const c10::Device d = neuron_device(device);
  c10::DeviceGuard guard(d);
  rt_device(d.index());
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  NEURON_TRACK_OP("aten::as_strided");
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  NEURON_TRACK_OP("aten::view");
  return at::native::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  NEURON_TRACK_OP("aten::_reshape_alias");
  return at::native::_reshape_alias(self, size, stride);
}

// `src` may carry the lazy conjugate / negative bits (views from x.conj(), x.neg()): copy its
// stored values, then apply the bits to dst. (_copy_from is a fallthrough for the Conjugate
// and Negative keys below; their generic fallback would clone, which copies, which recurses.)
}  // namespace

void copy_resolving_bits(const at::Tensor& dst_in, const at::Tensor& src_in, bool non_blocking) {
  at::Tensor dst = dst_in, src = src_in;
  // Writing v through a conjugate / negative view stores conj(v) / -v.
  if (dst.is_conj()) {
    dst = at::_conj(dst);
    src = src.conj();
  }
  if (dst.is_neg()) {
    dst = at::_neg_view(dst);
    src = at::_neg_view(src);
  }
  const bool conj = src.is_conj(), neg = src.is_neg();
  if (!conj && !neg) return copy_into(dst, src, non_blocking);
  at::Tensor stored = src;
  if (conj) stored = at::_conj(stored);  // the same memory with the bit cleared
  if (neg) stored = at::_neg_view(stored);
  copy_into(dst, stored, false);
  if (conj && dst.is_complex()) {
    if (dst.is_cpu()) {
      dst.conj_physical_();
    } else {  // conj_physical_ has no neuron kernel: negate the imaginary parts
      at::view_as_real(dst).select(-1, 1).neg_();
    }
  }
  if (neg) dst.neg_();
}

namespace {

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  NEURON_TRACK_OP("aten::_copy_from");
  copy_resolving_bits(dst, self, non_blocking);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  NEURON_TRACK_OP("aten::_copy_from_and_resize");
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  copy_resolving_bits(dst, self, false);
  return dst;
}

void ensure_storage(const at::Tensor& self, size_t needed) {
  c10::StorageImpl* storage = self.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  if (needed > storage->nbytes()) resize_storage_bytes(storage, needed);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  NEURON_TRACK_OP("aten::resize_");
  for (auto s : size) TORCH_CHECK(s >= 0, "resize_: negative dimension ", s);
  auto* impl = self.unsafeGetTensorImpl();
  const auto fmt = memory_format.value_or(c10::MemoryFormat::Contiguous);
  if (self.sizes() == size && (!memory_format || self.is_contiguous(fmt))) return self;
  impl->set_sizes_contiguous(size);
  if (fmt != c10::MemoryFormat::Contiguous && fmt != c10::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(fmt);
  }
  const size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize(),
                                                         self.storage_offset());
  ensure_storage(self, needed);
  return self;
}

at::Tensor& set_storage_offset(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                               c10::IntArrayRef size, c10::IntArrayRef stride) {
  NEURON_TRACK_OP("aten::set_.source_Storage_storage_offset");
  TORCH_CHECK(source.device().type() == kNeuron || source.nbytes() == 0,
              "set_: expected a neuron storage, got one on ", source.device());
  TORCH_CHECK(storage_offset >= 0, "set_: storage offset must be non-negative, got ", storage_offset);
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(storage_offset);
  if (stride.data() != nullptr && !stride.empty()) {
    TORCH_CHECK(stride.size() == size.size(), "set_: ", size.size(), " sizes but ", stride.size(), " strides");
    impl->set_sizes_and_strides(size, stride);
  } else {
    impl->set_sizes_contiguous(size);
  }
  const size_t needed =
      at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize(), storage_offset);
  ensure_storage(self, needed);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source) {
  NEURON_TRACK_OP("aten::set_.source_Storage");
  const int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {n}, {});
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& src) {
  NEURON_TRACK_OP("aten::set_.source_Tensor");
  TORCH_CHECK(self.dtype() == src.dtype(), "set_: could not set a ", self.dtype(), " tensor from a ", src.dtype(),
              " tensor");
  if (self.is_same(src)) return self;
  return set_storage_offset(self, src.storage(), src.storage_offset(), src.sizes(), src.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  NEURON_TRACK_OP("aten::set_");
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, device_allocator(), /*resizable=*/true);
  return set_storage_offset(self, std::move(empty), 0, {0}, {});
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  NEURON_TRACK_OP("aten::_local_scalar_dense");
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  translate_errors([&] { current_stream(self.device().index()).synchronize(); });
  // After the synchronization the host may read the device memory directly.
  at::Tensor host = at::from_blob(self.data_ptr(), {}, self.options().device(at::kCPU));
  return host.item();
}

at::Tensor& fill_scalar(at::Tensor& self, const c10::Scalar& value) {
  NEURON_TRACK_OP("aten::fill_.Scalar");
  if (self.numel() == 0) return self;
  at::assert_no_internal_overlap(self);
  kernels::TensorRef ref = make_ref(self);
  TORCH_CHECK(ref.dtype != kernels::DType::Undefined, "fill_: unsupported dtype ", self.scalar_type());
  struct Bytes {
    unsigned char b[16];
  } bytes{};
  at::Tensor host = at::scalar_tensor(value, self.options().device(at::kCPU));
  std::memcpy(bytes.b, host.data_ptr(), self.element_size());
  launch(self.device().index(), "aten::fill_.Scalar", [ref, bytes] { kernels::fill(ref, bytes.b); });
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  NEURON_TRACK_OP("aten::fill_.Tensor");
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ", value.dim(),
              " dimensions.");
  if (!is_neuron(value)) return fill_scalar(self, value.item());
  copy_into(self, value, false);
  return self;
}

at::Tensor& zero_(at::Tensor& self) {
  NEURON_TRACK_OP("aten::zero_");
  return fill_scalar(self, 0);
}

void record_stream(at::Tensor& self, c10::Stream s) {
  NEURON_TRACK_OP("aten::record_stream");
  TORCH_CHECK(s.device_type() == kNeuron, "record_stream: expected a neuron stream, got ", s);
  if (!self.storage().data_ptr().get()) return;
  translate_errors([&] {
    rt::Device& dev = rt_device(s.device_index());
    dev.allocator().record_stream(self.storage().data_ptr().get(), &dev.stream(s.id()));
  });
}

bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  // `param.data = t` between CPU and neuron tensors swaps the TensorImpl contents.
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && (t.device().is_cpu() || t.device().type() == kNeuron);
  };
  return dense(self) && dense(from);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
  m.impl("fill_.Tensor", TORCH_FN(fill_tensor));
  m.impl("zero_", TORCH_FN(zero_));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace neuron::torch_glue

// ATen's copy_ sends a copy whose source and destination disagree on the conjugate / negative
// bits through copy_stub of the neuron device (instead of _copy_from).
namespace neuron::torch_glue {
void neuron_copy_stub(at::TensorIterator& iter, bool non_blocking) {
  copy_resolving_bits(iter.tensor(0), iter.tensor(1), non_blocking);
}
}  // namespace neuron::torch_glue

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(copy_stub, &neuron::torch_glue::neuron_copy_stub)
}  // namespace at::native

// The conjugate / negative bits of a copy's source are applied by copy_resolving_bits.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
