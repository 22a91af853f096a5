#include "loop/dtype.h"

namespace ember::loop {

std::string dtype_name(DType t) {
  switch (t) {
    case DType::UInt8:
      return "u8";
    case DType::Int8:
      return "i8";
    case DType::Int16:
      return "i16";
    case DType::Int32:
      return "i32";
    case DType::Int64:
      return "i64";
    case DType::Float16:
      return "f16";
    case DType::Float32:
      return "f32";
    case DType::Float64:
      return "f64";
    case DType::Bool:
      return "b8";
    case DType::BFloat16:
      return "bf16";
  }
  return "dtype<" + std::to_string(static_cast<int>(t)) + ">";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType t : {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64,
                  DType::Float16, DType::Float32, DType::Float64, DType::Bool, DType::BFloat16}) {
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

bool is_float(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}

bool is_int(DType t) {
  return t == DType::UInt8 || t == DType::Int8 || t == DType::Int16 || t == DType::Int32 ||
         t == DType::Int64;
}

bool is_numeric(DType t) {
  return is_float(t) || is_int(t);
}

int dtype_bits(DType t) {
  switch (t) {
    case DType::UInt8:
    case DType::Int8:
    case DType::Bool:
      return 8;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16:
      return 16;
    case DType::Int32:
    case DType::Float32:
      return 32;
    case DType::Int64:
    case DType::Float64:
      return 64;
  }
  return 0;
}

int64_t wrap_int(DType t, int64_t v) {
  switch (t) {
    case DType::Bool:
      return v != 0;
    case DType::UInt8:
      return static_cast<uint8_t>(v);
    case DType::Int8:
      return static_cast<int8_t>(v);
    case DType::Int16:
      return static_cast<int16_t>(v);
    case DType::Int32:
      return static_cast<int32_t>(v);
    default:
      return v;
  }
}

}  // namespace ember::loop
