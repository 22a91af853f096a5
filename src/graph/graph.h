/// \file
/// The ATen-level graph: one representation for the whole pipeline (capture, training, lowering).
///
/// Semantics:
///  - A Graph is a straight-line SSA program. Every tensor is a Value, defined exactly once: as a
///    graph input or as an output of one Node. Nodes appear in execution order; an argument may
///    only name a Value defined earlier.
///  - A Node is a call of one schema-resolved ATen operator overload (`aten::add.Tensor`). Its
///    arguments follow the schema's order, every argument present (defaults filled in).
///  - The graph is functional: nodes do not mutate their arguments. Mutation of graph inputs (say
///    BatchNorm's running statistics) is explicit, as `mutations`: after the last node, input
///    `input` takes the contents of `value`, in list order. Outputs may alias inputs through view
///    ops, exactly as the traced program's outputs did.
///  - Inputs come in kinds: user inputs, parameters and buffers are passed on each call; constants
///    are real tensors captured while tracing and held by the graph's owner (the tracer's
///    TracedGraph), in the order of their inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "graph/ops.h"
#include "graph/types.h"
#include "sym/shape_env.h"

namespace ember::graph {

using ValueId = int32_t;

/// An argument that names a tensor value.
struct ValueRef {
  ValueId id = -1;
  bool operator==(const ValueRef&) const = default;
};

/// `Tensor[]` or `Tensor?[]`. Missing entries (nullopt) appear only in `Tensor?[]`.
struct ValueList {
  std::vector<std::optional<ValueId>> items;
  bool optional_items = false;  ///< the schema type is Tensor?[]
  bool operator==(const ValueList&) const = default;
};

struct NoneArg {
  bool operator==(const NoneArg&) const = default;
};

/// One argument of a node. A `Scalar` schema argument is stored as its Python kind (bool, int,
/// float). The variant's order is part of the structural hash: append only.
///
/// A `SymInt` or `SymInt[]` argument that holds a symbol is a `DimExpr` or `Dims`; a constant one
/// is an `int64_t` or `std::vector<int64_t>`, so static graphs never hold the symbolic kinds (build
/// them through `int_arg` and `int_list_arg`, which keep that form).
using Arg = std::variant<NoneArg, bool, int64_t, double, std::string, std::vector<int64_t>,
                         std::vector<double>, std::vector<bool>, DType, Device, Layout,
                         MemoryFormat, ValueRef, ValueList, DimExpr, Dims>;

/// `d` as an argument: an `int64_t` when constant, else a `DimExpr`.
Arg int_arg(const DimExpr& d);
/// `dims` as an argument: a `std::vector<int64_t>` when every dim is constant, else `Dims`.
Arg int_list_arg(const Dims& dims);
/// The argument as a dim, when it is an int or a `DimExpr`.
std::optional<DimExpr> dim_arg(const Arg& a);
/// The argument as dims, when it is an int list or `Dims`.
std::optional<Dims> dims_arg(const Arg& a);

/// A schema-resolved operator overload, interned once per graph.
struct OpInfo {
  std::string name;      ///< "aten::add"
  std::string overload;  ///< "Tensor"; empty for the default overload
  std::vector<std::string> arg_names;
  std::vector<bool> kwarg_only;
  bool returns_list = false;  ///< the single return is Tensor[]
  /// op_kind(name), set by Graph::intern_op: derived from `name`, so neither compared nor hashed.
  OpKind kind = OpKind::Unknown;

  /// "aten::add.Tensor", or "aten::relu" for the default overload.
  std::string qualified_name() const;
  /// Whether this is overload `overload_name` of op `k`: op.is(OpKind::add, "Tensor") is
  /// add.Tensor, op.is(OpKind::relu) the default overload of relu. (Any overload: `kind == k`.)
  bool is(OpKind k, std::string_view overload_name = {}) const {
    return kind == k && overload == overload_name;
  }
  /// Every field but `kind`.
  bool operator==(const OpInfo& o) const {
    return name == o.name && overload == o.overload && arg_names == o.arg_names &&
           kwarg_only == o.kwarg_only && returns_list == o.returns_list;
  }
};

struct Node {
  int32_t op = -1;  ///< index into Graph::ops
  std::vector<Arg> args;
  std::vector<ValueId> outputs;
  /// For each output, its position among the op's tensor results (each Tensor return, and each
  /// element of a Tensor[] return, counted in order, undefined ones included). Results that were
  /// undefined while tracing have no output. Empty means outputs are results 0, 1, ...
  std::vector<int32_t> result_slots;
};

enum class InputKind : int8_t { User, Parameter, Buffer, Constant };
std::string input_kind_name(InputKind k);
/// A module's parameter or registered buffer: state that outlives a call, unlike a user input.
inline bool is_module_state(InputKind k) {
  return k == InputKind::Parameter || k == InputKind::Buffer;
}

struct Input {
  ValueId value = -1;
  InputKind kind = InputKind::User;
  std::string name;  ///< source name, for printing and error messages; may be empty
};

struct Value {
  TensorType type;
  int32_t node = -1;  ///< producing node, or -1 for a graph input
  int32_t index = 0;  ///< output position in the producing node, or input position
};

/// The tensor values node `n` reads, in argument order (list elements included; a value read
/// twice appears twice).
std::vector<ValueId> tensor_reads(const Node& n);

/// After the last node, graph input `input` takes the contents of `value`.
struct Mutation {
  ValueId input = -1;
  ValueId value = -1;
};

class Graph {
 public:
  std::vector<OpInfo> ops;
  std::vector<Value> values;
  std::vector<Input> inputs;
  std::vector<Node> nodes;
  std::vector<ValueId> outputs;
  std::vector<Mutation> mutations;
  /// The shape symbols the types and arguments use (their ranges, hints and sources); empty for
  /// a static graph.
  sym::ShapeEnv symbols;

  /// Adds an input of the given type; returns its value.
  ValueId add_input(TensorType type, InputKind kind, std::string name = {});
  /// Returns the index of `op`, adding it if no equal OpInfo is interned yet; the interned copy has
  /// its kind set from its name.
  int32_t intern_op(const OpInfo& op);
  /// Appends a node; creates one output value per entry of `output_types`; returns the node index.
  int32_t add_node(int32_t op, std::vector<Arg> args, std::vector<TensorType> output_types);

  const TensorType& type(ValueId v) const { return values.at(v).type; }
  const OpInfo& op_of(const Node& n) const { return ops.at(n.op); }
  /// Number of inputs of kind Constant.
  int num_constants() const;
};

/// The nodes of `g` that computing `roots` needs, transitively (a flag per node).
std::vector<bool> nodes_needed_by(const Graph& g, const std::vector<ValueId>& roots);

/// Appends node `n` of `from` to `to`, its arguments renamed by `remap` (from's value -> to's;
/// each argument must be mapped already: an internal error names it otherwise), and maps its
/// outputs in `remap`. For passes that rebuild a graph without some of its nodes.
void copy_node(const Graph& from, const Node& n, Graph& to, std::vector<ValueId>& remap);

}  // namespace ember::graph
