/// \file
/// The op table (graph/ops.def) as an enum: every ATen operator ember recognises by name has an
/// OpKind, interned once when an op enters a graph (Graph::intern_op sets OpInfo::kind), so the
/// tracer, the scheduler and the runtime switch on kinds instead of comparing strings. A name
/// outside the table is OpKind::Unknown: the code treats it as an op it has no rule for.
#pragma once

#include <compare>
#include <cstdint>
#include <string_view>

namespace ember::graph {

enum class OpKind : uint16_t {
  Unknown,
#define EMBER_OP(Id, Name, Category) Id,
#include "graph/ops.def"
};

/// What an op does, as ops.def groups its rows.
enum class OpCategory : uint8_t {
  Other,      ///< OpKind::Unknown
  Pointwise,  ///< elementwise, conversions and copies included
  Reduction,  ///< reduces dimensions: sums, softmax, the normalizations
  View,       ///< the result may alias the first input
  Index,      ///< elements read from computed positions: indexing, scatters, layout changes
  Factory,    ///< a new tensor from sizes and scalars
  Extern,     ///< run as an ATen call: matrix products, convolutions, pools, attention
  Backward,   ///< a derivative op, decomposed by the tracer
  Host,       ///< reads tensor data back to the host
};

/// The kind of a qualified operator name without its overload ("aten::add"); Unknown for a name
/// not in the table.
OpKind op_kind(std::string_view name);
/// The operator name of a kind ("aten::add"); "" for Unknown.
std::string_view op_name(OpKind kind);
OpCategory op_category(OpKind kind);
/// The category View: the op's result may alias its first input.
inline bool is_view_op(OpKind kind) {
  return op_category(kind) == OpCategory::View;
}
/// An operator overload as the key of a rule table: the row and the overload name ("" for the
/// default overload), so that tables keyed by overload name their operator by kind.
struct OpOverload {
  OpKind kind = OpKind::Unknown;
  std::string_view overload;
  auto operator<=>(const OpOverload&) const = default;
};

/// The number of rows of the table (the kinds after Unknown).
int num_op_kinds();

}  // namespace ember::graph
