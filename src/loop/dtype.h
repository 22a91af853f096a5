/// \file
/// Element types of the loop IR. The loop stage depends only on src/support, so it does not use
/// graph::DType; this enum mirrors the same numbering (c10::ScalarType codes) and printer names,
/// so converting between the two is a checked cast done by the scheduler, which sees both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ember::loop {

/// The element types the loop IR computes with. Codes mirror c10::ScalarType.
enum class DType : int8_t {
  UInt8 = 0,
  Int8 = 1,
  Int16 = 2,
  Int32 = 3,
  Int64 = 4,
  Float16 = 5,
  Float32 = 6,
  Float64 = 7,
  Bool = 11,
  BFloat16 = 15,
};

/// The type of every index expression, loop variable and size.
inline constexpr DType kIndexType = DType::Int64;

/// Short name: u8 i8 i16 i32 i64 f16 f32 f64 b8 bf16.
std::string dtype_name(DType t);
/// Inverse of dtype_name; nullopt for an unknown name.
std::optional<DType> parse_dtype(std::string_view name);
/// f16, bf16, f32, f64.
bool is_float(DType t);
/// u8, i8, i16, i32, i64 (not bool).
bool is_int(DType t);
/// Float or int: the types that arithmetic accepts.
bool is_numeric(DType t);
/// Width in bits (bool: 8).
int dtype_bits(DType t);
/// `v` wrapped to integer type `t` (two's complement; b8: v != 0); i64 and floats unchanged.
int64_t wrap_int(DType t, int64_t v);
/// True when `t` is an integer type or b8 that holds `v` exactly.
inline bool int_fits(DType t, int64_t v) {
  return (is_int(t) || t == DType::Bool) && wrap_int(t, v) == v;
}

}  // namespace ember::loop
