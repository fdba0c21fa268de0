#include "Common.h"

#include "DeviceTime.h"

namespace neuron::torch_glue {

rt::Device& rt_device(c10::DeviceIndex index) {
  return translate_errors([&]() -> rt::Device& {
    auto& runtime = rt::Runtime::get();
    return runtime.device(index < 0 ? rt::current_device() : index);
  });
}

rt::Stream& current_stream(c10::DeviceIndex index) {
  return translate_errors([&]() -> rt::Stream& {
    const int d = index < 0 ? rt::current_device() : index;
    rt::Runtime::get().device(d);  // validates the index
    return rt::current_stream(d);
  });
}

kernels::DType to_kernel_dtype(at::ScalarType t) {
  using K = kernels::DType;
  switch (t) {
    case at::kBool: return K::Bool;
    case at::kByte: return K::UInt8;
    case at::kChar: return K::Int8;
    case at::kShort: return K::Int16;
    case at::kInt: return K::Int32;
    case at::kLong: return K::Int64;
    case at::kUInt16: return K::UInt16;
    case at::kUInt32: return K::UInt32;
    case at::kUInt64: return K::UInt64;
    case at::kHalf: return K::Float16;
    case at::kBFloat16: return K::BFloat16;
    case at::kFloat: return K::Float32;
    case at::kDouble: return K::Float64;
    case at::kComplexFloat: return K::Complex64;
    case at::kComplexDouble: return K::Complex128;
    case at::kFloat8_e4m3fn: return K::Float8_e4m3fn;
    case at::kFloat8_e5m2: return K::Float8_e5m2;
    default: return K::Undefined;
  }
}

kernels::TensorRef make_ref(const at::Tensor& t) {
  kernels::TensorRef r;
  TORCH_CHECK(t.dim() <= kernels::kMaxDims, "neuron: tensors with more than ", kernels::kMaxDims,
              " dimensions are not supported (got ", t.dim(), ")");
  r.data = t.numel() ? t.data_ptr() : nullptr;
  r.dtype = to_kernel_dtype(t.scalar_type());
  r.ndim = static_cast<int>(t.dim());
  for (int i = 0; i < r.ndim; ++i) {
    r.sizes[i] = t.size(i);
    r.strides[i] = t.stride(i);
  }
  return r;
}

void launch(c10::DeviceIndex device, const char* name, rt::TaskFn fn) {
  launch_op(device, name, std::move(fn), nki::WorkCost{});  // an op sized by its launch alone
}

}  // namespace neuron::torch_glue
