#include "tracer/convert.h"

#include "graph/printer.h"
#include "tracer/sym_node.h"

#include "support/error.h"

namespace ember::tracer {

static_assert(static_cast<int>(c10::ScalarType::Float) == static_cast<int>(graph::DType::Float32));
static_assert(static_cast<int>(c10::ScalarType::BFloat16) ==
              static_cast<int>(graph::DType::BFloat16));
static_assert(static_cast<int>(c10::ScalarType::UInt64) == static_cast<int>(graph::DType::UInt64));
static_assert(static_cast<int>(c10::DeviceType::Meta) == static_cast<int>(graph::DeviceKind::Meta));
static_assert(static_cast<int>(c10::DeviceType::PrivateUse1) ==
              static_cast<int>(graph::DeviceKind::PrivateUse1));
static_assert(static_cast<int>(c10::Layout::Mkldnn) == static_cast<int>(graph::Layout::Mkldnn));
static_assert(static_cast<int>(c10::MemoryFormat::ChannelsLast3d) ==
              static_cast<int>(graph::MemoryFormat::ChannelsLast3d));

graph::DType to_graph(c10::ScalarType t) {
  return static_cast<graph::DType>(t);
}
c10::ScalarType to_c10(graph::DType t) {
  return static_cast<c10::ScalarType>(t);
}
graph::Device to_graph(c10::Device d) {
  return graph::Device{static_cast<graph::DeviceKind>(d.type()), d.index()};
}
c10::Device to_c10(graph::Device d) {
  return c10::Device(static_cast<c10::DeviceType>(d.kind), d.index);
}
graph::Layout to_graph(c10::Layout l) {
  return static_cast<graph::Layout>(l);
}
c10::Layout to_c10(graph::Layout l) {
  return static_cast<c10::Layout>(l);
}
graph::MemoryFormat to_graph(c10::MemoryFormat m) {
  return static_cast<graph::MemoryFormat>(m);
}
c10::MemoryFormat to_c10(graph::MemoryFormat m) {
  return static_cast<c10::MemoryFormat>(m);
}

graph::TensorType tensor_type(const at::Tensor& t, std::optional<c10::Device> device) {
  EMBER_UNSUPPORTED(t.layout() == c10::kStrided)
      << "only strided tensors are supported, got layout " << t.layout();
  graph::TensorType ty;
  ty.dtype = to_graph(t.scalar_type());
  ty.device = to_graph(device.value_or(t.device()));
  if (t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) {
    for (const c10::SymInt& s : t.sym_sizes()) ty.sizes.push_back(to_dim(s));
    for (const c10::SymInt& s : t.sym_strides()) ty.strides.push_back(to_dim(s));
    ty.storage_offset = to_dim(t.sym_storage_offset());
  } else {
    for (int64_t s : t.sizes()) ty.sizes.emplace_back(s);
    for (int64_t s : t.strides()) ty.strides.emplace_back(s);
    ty.storage_offset = t.storage_offset();
  }
  ty.requires_grad = t.requires_grad();
  return ty;
}

namespace {

// The schema type with Optional[...] peeled off.
c10::TypePtr unwrap_optional(const c10::TypePtr& type) {
  if (auto opt = type->cast<c10::OptionalType>()) return opt->getElementType();
  return type;
}

}  // namespace

graph::Arg to_arg(const c10::IValue& v, const c10::TypePtr& schema_type, const std::string& op) {
  if (v.isNone()) return graph::NoneArg{};
  c10::TypePtr type = unwrap_optional(schema_type);
  switch (type->kind()) {
    case c10::TypeKind::ScalarTypeType:
      return to_graph(static_cast<c10::ScalarType>(v.toInt()));
    case c10::TypeKind::LayoutType:
      return to_graph(static_cast<c10::Layout>(v.toInt()));
    case c10::TypeKind::MemoryFormatType:
      return to_graph(static_cast<c10::MemoryFormat>(v.toInt()));
    case c10::TypeKind::DeviceObjType:
      return to_graph(v.toDevice());
    default:
      break;
  }
  if (v.isBool()) return v.toBool();
  if (v.isInt()) return v.toInt();
  if (v.isDouble()) return v.toDouble();
  if (v.isSymInt()) return graph::int_arg(to_dim(v.toSymInt()));
  if (v.isString()) return v.toStringRef();
  if (v.isIntList()) return v.toIntVector();
  if (v.isDoubleList()) return v.toDoubleVector();
  if (v.isBoolList()) {
    std::vector<bool> out;
    for (bool b : v.toBoolList()) out.push_back(b);
    return out;
  }
  if (v.isList()) {
    // SymInt[] arrives as a generic list of ints.
    graph::Dims out;
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isInt()) {
        out.push_back(e.toInt());
      } else if (e.isSymInt()) {
        out.push_back(to_dim(e.toSymInt()));
      } else {
        EMBER_UNSUPPORTED(false) << op << ": list argument of " << e.tagKind() << " elements";
      }
    }
    return graph::int_list_arg(out);
  }
  EMBER_UNSUPPORTED(false) << op << ": argument of type " << schema_type->str() << " ("
                           << v.tagKind() << ")";
  return graph::NoneArg{};  // unreachable
}

c10::IValue to_ivalue(const graph::Arg& a) {
  return std::visit(
      [](const auto& x) -> c10::IValue {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, graph::NoneArg>) {
          return c10::IValue();
        } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, int64_t> ||
                             std::is_same_v<T, double> || std::is_same_v<T, std::string>) {
          return c10::IValue(x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                             std::is_same_v<T, std::vector<double>>) {
          return c10::IValue(x);
        } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          c10::List<bool> l;
          for (bool b : x) l.push_back(b);
          return c10::IValue(l);
        } else if constexpr (std::is_same_v<T, graph::DType>) {
          return c10::IValue(to_c10(x));
        } else if constexpr (std::is_same_v<T, graph::Device>) {
          return c10::IValue(to_c10(x));
        } else if constexpr (std::is_same_v<T, graph::Layout>) {
          return c10::IValue(to_c10(x));
        } else if constexpr (std::is_same_v<T, graph::MemoryFormat>) {
          return c10::IValue(to_c10(x));
        } else if constexpr (std::is_same_v<T, graph::DimExpr> || std::is_same_v<T, graph::Dims>) {
          EMBER_UNSUPPORTED(false) << "the symbolic argument " << graph::print_arg(graph::Arg(x))
                                   << " has no value without the sizes of a call";
          return c10::IValue();
        } else {
          EMBER_INTERNAL_ASSERT(false) << "tensor argument has no constant IValue";
          return c10::IValue();
        }
      },
      a);
}

graph::OpInfo op_info(const c10::FunctionSchema& schema) {
  graph::OpInfo info;
  info.name = schema.name();
  info.overload = schema.overload_name();
  info.kind = graph::op_kind(info.name);
  for (const c10::Argument& a : schema.arguments()) {
    info.arg_names.push_back(a.name());
    info.kwarg_only.push_back(a.kwarg_only());
  }
  info.returns_list =
      schema.returns().size() == 1 && schema.returns()[0].type()->kind() == c10::TypeKind::ListType;
  return info;
}

}  // namespace ember::tracer
