// Maps a runtime DType to its C++ storage type and calls a generic functor with it.
#pragma once

#include <complex>
#include <stdexcept>
#include <string>

#include "dtype.h"

namespace neuron::kernels {

template <DType T> struct CType;
template <> struct CType<DType::Bool> { using type = bool; };
template <> struct CType<DType::UInt8> { using type = uint8_t; };
template <> struct CType<DType::Int8> { using type = int8_t; };
template <> struct CType<DType::Int16> { using type = int16_t; };
template <> struct CType<DType::Int32> { using type = int32_t; };
template <> struct CType<DType::Int64> { using type = int64_t; };
template <> struct CType<DType::UInt16> { using type = uint16_t; };
template <> struct CType<DType::UInt32> { using type = uint32_t; };
template <> struct CType<DType::UInt64> { using type = uint64_t; };
template <> struct CType<DType::Float16> { using type = f16; };
template <> struct CType<DType::BFloat16> { using type = bf16; };
template <> struct CType<DType::Float32> { using type = float; };
template <> struct CType<DType::Float64> { using type = double; };
template <> struct CType<DType::Complex64> { using type = std::complex<float>; };
template <> struct CType<DType::Complex128> { using type = std::complex<double>; };
template <> struct CType<DType::Float8_e4m3fn> { using type = f8e4m3fn; };
template <> struct CType<DType::Float8_e5m2> { using type = f8e5m2; };

template <typename T> struct is_complex_t : std::false_type {};
template <typename T> struct is_complex_t<std::complex<T>> : std::true_type {};
template <typename T> inline constexpr bool is_complex_v = is_complex_t<T>::value;
template <typename T>
inline constexpr bool is_small_float_v = std::is_same_v<T, f16> || std::is_same_v<T, bf16> ||
                                         std::is_same_v<T, f8e4m3fn> || std::is_same_v<T, f8e5m2>;

// Calls f(T{}) with the storage type of `t` (a value-initialised tag).
template <typename F>
decltype(auto) dispatch_all(DType t, F&& f) {
  switch (t) {
#define NEURON_DT_CASE(D) \
  case DType::D:          \
    return f(typename CType<DType::D>::type{});
    NEURON_DT_CASE(Bool)
    NEURON_DT_CASE(UInt8)
    NEURON_DT_CASE(Int8)
    NEURON_DT_CASE(Int16)
    NEURON_DT_CASE(Int32)
    NEURON_DT_CASE(Int64)
    NEURON_DT_CASE(UInt16)
    NEURON_DT_CASE(UInt32)
    NEURON_DT_CASE(UInt64)
    NEURON_DT_CASE(Float16)
    NEURON_DT_CASE(BFloat16)
    NEURON_DT_CASE(Float32)
    NEURON_DT_CASE(Float64)
    NEURON_DT_CASE(Complex64)
    NEURON_DT_CASE(Complex128)
    NEURON_DT_CASE(Float8_e4m3fn)
    NEURON_DT_CASE(Float8_e5m2)
#undef NEURON_DT_CASE
    case DType::Undefined:
      break;
  }
  throw std::invalid_argument("neuron kernels: undefined dtype");
}

// Converts one value between storage types with ATen's rules: complex -> real takes the real
// part, float -> unsigned goes through int64, anything -> bool is "!= 0".
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_complex_v<From>) {
    if constexpr (std::is_same_v<To, bool>) {
      return v.real() != 0 || v.imag() != 0;
    } else if constexpr (is_complex_v<To>) {
      return To(static_cast<typename To::value_type>(v.real()),
                static_cast<typename To::value_type>(v.imag()));
    } else {
      return convert<To>(v.real());
    }
  } else if constexpr (is_small_float_v<From>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (is_complex_v<To>) {
    return To(static_cast<typename To::value_type>(v), 0);
  } else if constexpr (is_small_float_v<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_unsigned_v<To> && std::is_floating_point_v<From>) {
    return static_cast<To>(static_cast<int64_t>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace neuron::kernels
