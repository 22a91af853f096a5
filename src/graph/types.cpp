#include "graph/types.h"

#include <algorithm>

#include "support/error.h"
#include "sym/printer.h"

namespace ember::graph {

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
    case DType::ComplexHalf:
      return "c32";
    case DType::ComplexFloat:
      return "c64";
    case DType::ComplexDouble:
      return "c128";
    case DType::Bool:
      return "b8";
    case DType::BFloat16:
      return "bf16";
    case DType::Float8_e5m2:
      return "f8e5m2";
    case DType::Float8_e4m3fn:
      return "f8e4m3fn";
    case DType::UInt16:
      return "u16";
    case DType::UInt32:
      return "u32";
    case DType::UInt64:
      return "u64";
  }
  return "dtype<" + std::to_string(static_cast<int>(t)) + ">";
}

int element_size(DType t) {
  switch (t) {
    case DType::UInt8:
    case DType::Int8:
    case DType::Bool:
    case DType::Float8_e5m2:
    case DType::Float8_e4m3fn:
      return 1;
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16:
    case DType::UInt16:
      return 2;
    case DType::Int32:
    case DType::Float32:
    case DType::ComplexHalf:
    case DType::UInt32:
      return 4;
    case DType::Int64:
    case DType::Float64:
    case DType::ComplexFloat:
    case DType::UInt64:
      return 8;
    case DType::ComplexDouble:
      return 16;
  }
  return 0;
}

bool is_floating(DType t) {
  switch (t) {
    case DType::Float16:
    case DType::Float32:
    case DType::Float64:
    case DType::BFloat16:
    case DType::Float8_e5m2:
    case DType::Float8_e4m3fn:
      return true;
    default:
      return false;
  }
}

std::string device_name(Device d) {
  std::string base;
  switch (d.kind) {
    case DeviceKind::CPU:
      base = "cpu";
      break;
    case DeviceKind::CUDA:
      base = "cuda";
      break;
    case DeviceKind::Meta:
      base = "meta";
      break;
    case DeviceKind::PrivateUse1:
      base = "privateuseone";
      break;
    default:
      base = "device<" + std::to_string(static_cast<int>(d.kind)) + ">";
      break;
  }
  if (d.index >= 0) base += ":" + std::to_string(d.index);
  return base;
}

std::string layout_name(Layout l) {
  switch (l) {
    case Layout::Strided:
      return "strided";
    case Layout::Sparse:
      return "sparse_coo";
    case Layout::SparseCsr:
      return "sparse_csr";
    case Layout::Mkldnn:
      return "mkldnn";
  }
  return "layout<" + std::to_string(static_cast<int>(l)) + ">";
}

std::string memory_format_name(MemoryFormat m) {
  switch (m) {
    case MemoryFormat::Contiguous:
      return "contiguous_format";
    case MemoryFormat::Preserve:
      return "preserve_format";
    case MemoryFormat::ChannelsLast:
      return "channels_last";
    case MemoryFormat::ChannelsLast3d:
      return "channels_last_3d";
  }
  return "memory_format<" + std::to_string(static_cast<int>(m)) + ">";
}

DimExpr::DimExpr(sym::SymExpr e) {
  if (std::optional<int64_t> c = e.as_constant()) {
    value_ = *c;
  } else {
    node_ = e.node_ptr();
  }
}

int64_t DimExpr::constant() const {
  EMBER_UNSUPPORTED(is_constant())
      << "the size " << str() << " is symbolic where a constant is needed";
  return value_;
}

bool DimExpr::operator==(const DimExpr& o) const {
  if (is_constant() != o.is_constant()) return false;
  return is_constant() ? value_ == o.value_ : expr() == o.expr();
}

std::string DimExpr::str() const {
  return node_ ? sym::print(expr()) : std::to_string(value_);
}

uint64_t DimExpr::hash() const {
  return expr().hash();
}

namespace {
/// Applies `op` to constants directly (the fast path of static graphs), else to expressions.
template <typename IntOp, typename SymOp>
DimExpr combine(const DimExpr& a, const DimExpr& b, IntOp int_op, SymOp sym_op) {
  if (a.is_constant() && b.is_constant()) return int_op(a.constant(), b.constant());
  return DimExpr(sym_op(a.expr(), b.expr()));
}
}  // namespace

DimExpr operator+(const DimExpr& a, const DimExpr& b) {
  return combine(
      a, b, [](int64_t x, int64_t y) { return sym::SymExpr(x) + sym::SymExpr(y); },
      [](const sym::SymExpr& x, const sym::SymExpr& y) { return x + y; });
}
DimExpr operator-(const DimExpr& a, const DimExpr& b) {
  return combine(
      a, b, [](int64_t x, int64_t y) { return sym::SymExpr(x) - sym::SymExpr(y); },
      [](const sym::SymExpr& x, const sym::SymExpr& y) { return x - y; });
}
DimExpr operator*(const DimExpr& a, const DimExpr& b) {
  return combine(
      a, b, [](int64_t x, int64_t y) { return sym::SymExpr(x) * sym::SymExpr(y); },
      [](const sym::SymExpr& x, const sym::SymExpr& y) { return x * y; });
}
DimExpr floordiv(const DimExpr& a, const DimExpr& b) {
  return combine(
      a, b, [](int64_t x, int64_t y) { return sym::floordiv(sym::SymExpr(x), sym::SymExpr(y)); },
      [](const sym::SymExpr& x, const sym::SymExpr& y) { return sym::floordiv(x, y); });
}
DimExpr mod(const DimExpr& a, const DimExpr& b) {
  return combine(
      a, b, [](int64_t x, int64_t y) { return sym::mod(sym::SymExpr(x), sym::SymExpr(y)); },
      [](const sym::SymExpr& x, const sym::SymExpr& y) { return sym::mod(x, y); });
}

Dims contiguous_strides(const Dims& sizes) {
  Dims strides(sizes.size());
  DimExpr acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = acc;
    const DimExpr& s = sizes[i];
    if (s.is_constant()) {
      if (s.constant() > 1) acc = acc * s;
    } else {
      // A symbolic size is a symbol of ember's ShapeEnv, which specializes 0 and 1 (its range
      // starts at 2), or an expression over them: torch's max(size, 1) is the size itself.
      acc = acc * s;
    }
  }
  return strides;
}

DimExpr sym_numel(const Dims& sizes) {
  DimExpr n = 1;
  for (const DimExpr& s : sizes) n = n * s;
  return n;
}

bool all_constant(const Dims& dims) {
  return std::all_of(dims.begin(), dims.end(), [](const DimExpr& d) { return d.is_constant(); });
}

int64_t numel(const Dims& sizes) {
  int64_t n = 1;
  for (const DimExpr& s : sizes) n *= s.constant();
  return n;
}

int64_t nbytes(const TensorType& t) {
  return numel(t.sizes) * std::max(element_size(t.dtype), 1);
}

std::vector<int64_t> constant_values(const Dims& dims) {
  std::vector<int64_t> out;
  out.reserve(dims.size());
  for (const DimExpr& d : dims) out.push_back(d.constant());
  return out;
}

bool TensorType::is_static() const {
  auto constant = [](const DimExpr& d) { return d.is_constant(); };
  return std::all_of(sizes.begin(), sizes.end(), constant) &&
         std::all_of(strides.begin(), strides.end(), constant) && storage_offset.is_constant();
}

namespace {
std::string dims_str(const Dims& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ", ";
    s += d[i].str();
  }
  return s;
}
}  // namespace

std::string type_str(const TensorType& t) {
  std::string s = dtype_name(t.dtype) + "[" + dims_str(t.sizes) + "]";
  if (!t.is_contiguous()) s += "{" + dims_str(t.strides) + "}";
  if (!(t.storage_offset == DimExpr(0))) {
    // A symbolic offset is parenthesized: the device name follows it.
    s += t.storage_offset.is_constant() ? "+" + t.storage_offset.str()
                                        : "+(" + t.storage_offset.str() + ")";
  }
  s += " " + device_name(t.device);
  if (t.requires_grad) s += " grad";
  return s;
}

}  // namespace ember::graph
