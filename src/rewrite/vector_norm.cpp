#include "rewrite/vector_norm.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tracer/convert.h"

namespace ember::rewrite {

std::optional<at::Tensor> vector_norm_as_reduction(const c10::OperatorHandle& op,
                                                   c10::ArrayRef<c10::IValue> args) {
  const c10::FunctionSchema& schema = op.schema();
  if (tracer::op_kind(schema) != graph::OpKind::linalg_vector_norm ||
      !schema.overload_name().empty() || args.size() != 5 || !args[0].isTensor() ||
      !args[1].isScalar() || !args[3].isBool()) {
    return std::nullopt;
  }
  const at::Tensor& x = args[0].toTensor();
  if (!x.defined() || !at::isFloatingType(x.scalar_type())) return std::nullopt;
  const at::ScalarType out_type =
      args[4].isNone() ? x.scalar_type() : static_cast<at::ScalarType>(args[4].toInt());
  if (!at::isFloatingType(out_type)) return std::nullopt;
  const double ord = args[1].toScalar().toDouble();
  const bool inf = std::isinf(ord);
  if (!(ord > 0 || (inf && ord < 0))) return std::nullopt;  // 0, negative, nan: as it is
  std::optional<std::vector<int64_t>> dims;
  if (!args[2].isNone()) {
    if (!args[2].isIntList()) return std::nullopt;
    dims = args[2].toIntVector();
  }
  const bool keepdim = args[3].toBool();
  const at::ScalarType acc =
      out_type == at::kHalf || out_type == at::kBFloat16 ? at::kFloat : out_type;
  at::Tensor xa = args[4].isNone() ? x : x.to(out_type);
  xa = xa.to(acc);
  const at::OptionalIntArrayRef dim =
      dims.has_value() ? at::OptionalIntArrayRef(*dims) : at::OptionalIntArrayRef();
  const at::IntArrayRef all_or_dims = dims.has_value() ? at::IntArrayRef(*dims) : at::IntArrayRef();
  at::Tensor r;
  if (ord == 2) {
    r = at::sqrt(at::sum(xa * xa, dim, keepdim));
  } else if (ord == 1) {
    r = at::sum(at::abs(xa), dim, keepdim);
  } else if (inf) {
    r = ord > 0 ? at::amax(at::abs(xa), all_or_dims, keepdim)
                : at::amin(at::abs(xa), all_or_dims, keepdim);
  } else {
    r = at::pow(at::sum(at::pow(at::abs(xa), ord), dim, keepdim), 1.0 / ord);
  }
  return r.to(out_type);
}

}  // namespace ember::rewrite
