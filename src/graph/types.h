/// \file
/// Value types of the ATen-level graph: dtypes, devices, layouts, memory formats, sizes and tensor
/// types. Plain C++, no torch headers. The enums mirror c10's numbering so that the torch bridge
/// (src/tracer/convert.h) is a checked cast.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sym/expr.h"

namespace ember::graph {

/// Mirrors c10::ScalarType. Codes past the named ones are legal and print as `dtype<N>`.
enum class DType : int8_t {
  UInt8 = 0,
  Int8 = 1,
  Int16 = 2,
  Int32 = 3,
  Int64 = 4,
  Float16 = 5,
  Float32 = 6,
  Float64 = 7,
  ComplexHalf = 8,
  ComplexFloat = 9,
  ComplexDouble = 10,
  Bool = 11,
  BFloat16 = 15,
  Float8_e5m2 = 23,
  Float8_e4m3fn = 24,
  UInt16 = 27,
  UInt32 = 28,
  UInt64 = 29,
};

/// Short name used by the printer: f32, bf16, i64, b8, ...
std::string dtype_name(DType t);
/// Size of one element in bytes; 0 when unknown.
int element_size(DType t);
bool is_floating(DType t);

/// Mirrors c10::DeviceType for the device kinds ember knows by name.
enum class DeviceKind : int8_t { CPU = 0, CUDA = 1, Meta = 14, PrivateUse1 = 20 };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int8_t index = -1;  ///< -1: the current device of that kind
  bool operator==(const Device&) const = default;
};
/// "cpu", "cuda:0", "meta", "device<K>:I".
std::string device_name(Device d);

/// Mirrors c10::Layout.
enum class Layout : int8_t { Strided = 0, Sparse = 1, SparseCsr = 2, Mkldnn = 3 };
std::string layout_name(Layout l);

/// Mirrors c10::MemoryFormat.
enum class MemoryFormat : int8_t {
  Contiguous = 0,
  Preserve = 1,
  ChannelsLast = 2,
  ChannelsLast3d = 3
};
std::string memory_format_name(MemoryFormat m);

/// A size, stride or offset: a constant, or an expression over shape symbols (`s0*768`,
/// `(s1 + 1) // 2`; docs/design/symbolic.md). Constants are stored as plain integers, so static
/// graphs pay nothing for symbols; a `sym::SymExpr` that is a constant is stored as one, so
/// `is_constant()` is exact. The symbols' ranges, hints and sources live in the graph's
/// `Graph::symbols`, never here.
class DimExpr {
 public:
  DimExpr() = default;
  /*implicit*/ DimExpr(int64_t v) : value_(v) {}
  /*implicit*/ DimExpr(int v) : value_(v) {}
  /*implicit*/ DimExpr(sym::SymExpr e);
  bool is_constant() const { return node_ == nullptr; }
  /// The value. Requires `is_constant()` (an internal error otherwise).
  int64_t constant() const;
  std::optional<int64_t> as_constant() const {
    return is_constant() ? std::optional<int64_t>(value_) : std::nullopt;
  }
  /// The value as an expression (a constant expression when constant).
  sym::SymExpr expr() const { return node_ ? sym::SymExpr(node_) : sym::SymExpr(value_); }
  bool operator==(const DimExpr& o) const;
  /// A constant prints as its digits, an expression in sym/printer.h's form.
  std::string str() const;
  uint64_t hash() const;

 private:
  int64_t value_ = 0;
  /// The expression's node, set exactly when the value is not a constant (a plain pointer, not an
  /// optional SymExpr: constants cost nothing).
  std::shared_ptr<const sym::ExprNode> node_;
};

DimExpr operator+(const DimExpr& a, const DimExpr& b);
DimExpr operator-(const DimExpr& a, const DimExpr& b);
DimExpr operator*(const DimExpr& a, const DimExpr& b);
/// Python's `//` and `%`.
DimExpr floordiv(const DimExpr& a, const DimExpr& b);
DimExpr mod(const DimExpr& a, const DimExpr& b);

using Dims = std::vector<DimExpr>;

/// Contiguous (row-major) strides for `sizes`.
Dims contiguous_strides(const Dims& sizes);
/// Number of elements. Requires constant sizes.
int64_t numel(const Dims& sizes);
/// Number of elements, as an expression.
DimExpr sym_numel(const Dims& sizes);
/// Every dim is a constant.
bool all_constant(const Dims& dims);
/// The values of `dims`. Requires every dim to be constant.
std::vector<int64_t> constant_values(const Dims& dims);

/// The static type of a tensor value: everything but its data.
struct TensorType {
  DType dtype = DType::Float32;
  Device device;
  Dims sizes;
  Dims strides;
  DimExpr storage_offset = 0;
  bool requires_grad = false;

  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
  bool is_contiguous() const { return strides == contiguous_strides(sizes); }
  /// Sizes, strides and storage offset are all constants.
  bool is_static() const;
  bool operator==(const TensorType&) const = default;
};

/// Bytes of a tensor of type `t` (its elements, at least one byte each). Requires constant sizes.
int64_t nbytes(const TensorType& t);

/// "f32[2, 3]", with "{s0, s1}" strides when not contiguous, "+off" when the storage offset is not
/// zero, then the device and " grad" when requires_grad.
std::string type_str(const TensorType& t);

}  // namespace ember::graph
