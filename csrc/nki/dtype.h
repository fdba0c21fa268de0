// Element types of the NKI language (nl.float32, nl.bfloat16, nl.float8_e4m3, ...) as the
// NeuronCore model stores them, and the row conversions every instruction uses: engines read
// their inputs as fp32 and round results to the destination type (round to nearest even),
// which is what gives bf16/fp8 their hardware numerics here.
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/dtype.h"

namespace neuron::nki {

enum class DT : uint8_t {
  Bool,
  Int8,
  Int16,
  Int32,
  UInt8,
  UInt16,
  UInt32,
  Float16,
  BFloat16,
  Float32,
  TFloat32,    // fp32 storage, mantissa rounded to 10 bits on write
  F8E4M3,      // IEEE-style e4m3 (bias 7, has inf/nan, max 240)
  F8E4M3FN,    // OCP e4m3fn (no inf, max 448)
  F8E5M2,      // e5m2
  F8E8M0FNU,   // exponent-only scale type (MX)
  F8E5M2x4,    // four packed e5m2 (nc_matmul_mx operand; moved by DMA only)
  F8E4M3FNx4,  // four packed e4m3fn
  F4E2M1FNx4,  // four packed e2m1 (2 bytes)
  Count,
};

constexpr int kNumDTypes = static_cast<int>(DT::Count);

int dt_size(DT t);
// The nl.* name ("float32", "bfloat16", ...).
std::string_view dt_name(DT t);
bool dt_is_int(DT t);    // bool and integers
bool dt_is_packed(DT t);
// Types whose engine arithmetic is exact in int64 (the GpSimd integer path).
inline bool dt_is_int32(DT t) { return t == DT::Int32 || t == DT::UInt32; }
// The kernels-layer type with the same storage, or Undefined.
kernels::DType to_kernel_dtype(DT t);

// Converts n elements of type t at `src` (consecutive elements `stride` bytes apart) to fp32.
void load_f32(DT t, const uint8_t* src, int64_t stride, int64_t n, float* out);
// Rounds n fp32 values to type t and writes them `stride` bytes apart.
void store_f32(DT t, uint8_t* dst, int64_t stride, int64_t n, const float* in);
// Integer path (exact for 32-bit integers): widen to / narrow from int64 (wraps like hardware
// integer ALUs; float types go through fp32).
void load_i64(DT t, const uint8_t* src, int64_t stride, int64_t n, int64_t* out);
void store_i64(DT t, uint8_t* dst, int64_t stride, int64_t n, const int64_t* in);

// Scalar conversions.
float to_f32(DT t, const uint8_t* p);
void from_f32(DT t, float v, uint8_t* p);

// fp8 e4m3 (IEEE-like) and e8m0 conversions, exposed for tests.
float f8e4m3_to_f32(uint8_t v);
uint8_t f32_to_f8e4m3(float f);
float f8e8m0_to_f32(uint8_t v);
uint8_t f32_to_f8e8m0(float f);
float round_tf32(float f);

}  // namespace neuron::nki
