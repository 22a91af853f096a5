#include "capture/compile/fx_export.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <nanobind/stl/string.h>

#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/tensor_memoryformats.h>
#include "graph/printer.h"

#include <cctype>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "support/error.h"
#include "tracer/convert.h"

namespace nb = nanobind;

namespace ember::capture {

namespace {

/// The placeholder name of input `in` (the `index`-th non-constant input): its source name as an
/// identifier as FX names nodes (`L['self'].fc.weight` -> `l_self_fc_weight`), unique among
/// `used`.
std::string placeholder_name(const graph::Input& in, size_t index,
                             std::unordered_set<std::string>& used) {
  std::string name;
  for (char c : in.name) {
    bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (word) {
      name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!name.empty() && name.back() != '_') {
      name += '_';
    }
  }
  while (!name.empty() && name.back() == '_') name.pop_back();
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) {
    name = "input" + std::to_string(index) + (name.empty() ? "" : "_" + name);
  }
  // `self` is the module's own parameter in the generated forward; keywords are not names.
  nb::object is_keyword = nb::module_::import_("keyword").attr("iskeyword");
  if (name == "self" || nb::cast<bool>(is_keyword(name))) name += "_";
  std::string unique = name;
  for (int k = 1; !used.insert(unique).second; ++k) unique = name + "_" + std::to_string(k);
  return unique;
}

template <typename T>
nb::object list_of(const std::vector<T>& items) {
  nb::list out;
  for (const T& x : items) out.append(nb::cast(x));
  return out;
}

/// The Python value of argument `a` as FX holds it: tensors are the FX nodes of their values.
nb::object python_arg(const graph::Arg& a, const std::vector<nb::object>& nodes) {
  return std::visit(
      [&](const auto& v) -> nb::object {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, graph::NoneArg>) {
          return nb::none();
        } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int64_t> ||
                             std::is_same_v<T, double> || std::is_same_v<T, std::string>) {
          return nb::cast(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                             std::is_same_v<T, std::vector<double>>) {
          return list_of(v);
        } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          nb::list out;
          for (bool x : v) out.append(nb::bool_(x));
          return out;
        } else if constexpr (std::is_same_v<T, graph::DType>) {
          return nb::borrow(reinterpret_cast<PyObject*>(torch::getTHPDtype(tracer::to_c10(v))));
        } else if constexpr (std::is_same_v<T, graph::Device>) {
          return nb::steal(THPDevice_New(tracer::to_c10(v)));
        } else if constexpr (std::is_same_v<T, graph::Layout>) {
          return nb::borrow(reinterpret_cast<PyObject*>(torch::getTHPLayout(tracer::to_c10(v))));
        } else if constexpr (std::is_same_v<T, graph::MemoryFormat>) {
          return nb::borrow(torch::utils::getTHPMemoryFormat(tracer::to_c10(v)));
        } else if constexpr (std::is_same_v<T, graph::ValueRef>) {
          return nodes[static_cast<size_t>(v.id)];
        } else if constexpr (std::is_same_v<T, graph::DimExpr> || std::is_same_v<T, graph::Dims>) {
          EMBER_UNSUPPORTED(false) << "the FX export of a graph with symbolic sizes ("
                                   << graph::print_arg(graph::Arg(v)) << ")";
          return nb::none();
        } else {
          static_assert(std::is_same_v<T, graph::ValueList>,
                        "python_arg misses an Arg alternative");
          nb::list out;
          for (const auto& item : v.items) {
            out.append(item ? nodes[static_cast<size_t>(*item)] : nb::none());
          }
          return out;
        }
      },
      a);
}

/// How an op's Python overload returns its results.
struct Returns {
  bool tuple = false;          ///< a tuple of returns (else the one return itself)
  std::vector<int> positions;  ///< the return of each tensor result before a tensor list
  int list = -1;               ///< the return that is a tensor list (the last tensor results)
};

Returns returns_of(const c10::FunctionSchema& schema) {
  Returns r;
  const auto& rets = schema.returns();
  r.tuple = rets.size() != 1;
  static const c10::TypePtr tensor = c10::OptionalType::ofTensor();
  for (size_t i = 0; i < rets.size(); ++i) {
    const c10::TypePtr& type = rets[i].type();
    const auto* list_type = type->castRaw<c10::ListType>();
    bool is_tensor = type->isSubtypeOf(*tensor);
    bool is_list = list_type != nullptr && list_type->getElementType()->isSubtypeOf(*tensor);
    EMBER_UNSUPPORTED(r.list < 0 || !(is_tensor || is_list))
        << "operator " << schema.name() << "." << schema.overload_name()
        << " returns a tensor list before other tensors (its results have no fixed positions)";
    if (is_tensor) r.positions.push_back(static_cast<int>(i));
    if (is_list) r.list = static_cast<int>(i);
  }
  return r;
}

/// Values that nodes read only as single tensor arguments: not in a tensor list, not an output,
/// not a mutation's value (a Python scalar may stand for them).
std::vector<bool> read_as_tensor_arguments_only(const graph::Graph& g) {
  std::vector<bool> only(g.values.size(), true);
  for (const graph::Node& n : g.nodes) {
    for (const graph::Arg& a : n.args) {
      if (const auto* l = std::get_if<graph::ValueList>(&a)) {
        for (const auto& item : l->items) {
          if (item) only[static_cast<size_t>(*item)] = false;
        }
      }
    }
  }
  for (graph::ValueId v : g.outputs) only[static_cast<size_t>(v)] = false;
  for (const graph::Mutation& m : g.mutations) only[static_cast<size_t>(m.value)] = false;
  return only;
}

/// One export: the FX graph under construction and the FX value of each graph value.
struct Exporter {
  explicit Exporter(const tracer::TracedGraph& t) : traced(t), values(t.graph.values.size()) {}

  const tracer::TracedGraph& traced;
  nb::object fx_graph = nb::module_::import_("torch.fx").attr("Graph")();
  nb::object torch_ops = nb::module_::import_("torch").attr("ops");
  nb::object getitem = nb::module_::import_("operator").attr("getitem");
  std::vector<nb::object> values;
  nb::dict attributes;  ///< the module's buffers: the constants

  nb::object call(nb::handle target, nb::object args, nb::object kwargs = nb::dict()) {
    return fx_graph.attr("call_function")(target, args, kwargs);
  }
  nb::object& value(graph::ValueId v) { return values[static_cast<size_t>(v)]; }

  void add_inputs() {
    const graph::Graph& g = traced.graph;
    // Placeholders first (the module's forward takes them in this order), then the constants.
    std::unordered_set<std::string> used;
    size_t index = 0;
    for (const graph::Input& in : g.inputs) {
      if (in.kind == graph::InputKind::Constant) continue;
      value(in.value) = fx_graph.attr("placeholder")(placeholder_name(in, index++, used));
    }
    // A wrapped number read only as a tensor argument is the scalar (int32 tensor * 2.5 stays
    // float32, as it would not with a float64 buffer).
    std::vector<bool> scalar_ok = read_as_tensor_arguments_only(g);
    size_t constant = 0;
    for (const graph::Input& in : g.inputs) {
      if (in.kind != graph::InputKind::Constant) continue;
      const at::Tensor& t = traced.constants.at(constant++);
      nb::object tensor = nb::steal(THPVariable_Wrap(t));
      if (t.unsafeGetTensorImpl()->is_wrapped_number() &&
          scalar_ok[static_cast<size_t>(in.value)]) {
        value(in.value) = tensor.attr("item")();
        continue;
      }
      std::string name = "_tensor_constant" + std::to_string(attributes.size());
      attributes[name.c_str()] = tensor;
      value(in.value) = fx_graph.attr("get_attr")(name);
    }
  }

  /// The `torch.ops` overload of `op`, and how it returns its results.
  std::pair<nb::object, Returns> resolve(const graph::OpInfo& op) {
    auto handle = c10::Dispatcher::singleton().findSchema({op.name, op.overload});
    EMBER_UNSUPPORTED(handle.has_value())
        << "operator " << op.qualified_name() << " is not registered in this process";
    size_t sep = op.name.find("::");
    EMBER_INTERNAL_ASSERT(sep != std::string::npos) << "operator name " << op.name;
    nb::object packet =
        torch_ops.attr(op.name.substr(0, sep).c_str()).attr(op.name.substr(sep + 2).c_str());
    return {packet.attr(op.overload.empty() ? "default" : op.overload.c_str()),
            returns_of(handle->schema())};
  }

  void add_node(const graph::Node& n, nb::handle target, const Returns& r) {
    const graph::OpInfo& op = traced.graph.op_of(n);
    nb::list args;
    nb::dict kwargs;
    for (size_t i = 0; i < n.args.size(); ++i) {
      nb::object v = python_arg(n.args[i], values);
      if (i < op.kwarg_only.size() && op.kwarg_only[i]) {
        kwargs[op.arg_names[i].c_str()] = v;
      } else {
        args.append(v);
      }
    }
    nb::object result = call(target, nb::tuple(args), kwargs);
    auto item_of = [&](const nb::object& seq, int i) {
      return call(getitem, nb::make_tuple(seq, i));
    };
    nb::object list;  // the FX value of the tensor list return, made on first use
    const int before_list = static_cast<int>(r.positions.size());
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      int slot = n.result_slots.empty() ? static_cast<int>(k) : n.result_slots[k];
      if (slot < before_list) {
        value(n.outputs[k]) =
            r.tuple ? item_of(result, r.positions[static_cast<size_t>(slot)]) : result;
        continue;
      }
      EMBER_INTERNAL_ASSERT(r.list >= 0) << op.qualified_name() << ": result " << slot;
      if (!list.is_valid()) list = r.tuple ? item_of(result, r.list) : result;
      value(n.outputs[k]) = item_of(list, slot - before_list);
    }
  }

  nb::object finish() {
    const graph::Graph& g = traced.graph;
    nb::object copy = torch_ops.attr("aten").attr("copy_").attr("default");
    for (const graph::Mutation& m : g.mutations) {
      call(copy, nb::make_tuple(value(m.input), value(m.value)));
    }
    nb::list outputs;
    for (graph::ValueId v : g.outputs) outputs.append(value(v));
    fx_graph.attr("output")(nb::tuple(outputs));
    fx_graph.attr("lint")();
    return nb::module_::import_("torch.fx").attr("GraphModule")(attributes, fx_graph);
  }
};

}  // namespace

nb::object to_graph_module(const tracer::TracedGraph& traced) {
  Exporter e(traced);
  e.add_inputs();
  std::vector<std::pair<nb::object, Returns>> ops;
  for (const graph::OpInfo& op : traced.graph.ops) ops.push_back(e.resolve(op));
  for (const graph::Node& n : traced.graph.nodes) {
    const auto& [target, returns] = ops[static_cast<size_t>(n.op)];
    e.add_node(n, target, returns);
  }
  return e.finish();
}

}  // namespace ember::capture
