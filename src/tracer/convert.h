/// \file
/// The bridge between c10 types and the graph's plain types, and between IValues and graph::Arg.
/// One of the few places (with the rest of src/tracer, src/runtime and src/python) that includes
/// torch headers.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include "graph/graph.h"

namespace ember::tracer {

graph::DType to_graph(c10::ScalarType t);
c10::ScalarType to_c10(graph::DType t);
graph::Device to_graph(c10::Device d);
c10::Device to_c10(graph::Device d);
graph::Layout to_graph(c10::Layout l);
c10::Layout to_c10(graph::Layout l);
graph::MemoryFormat to_graph(c10::MemoryFormat m);
c10::MemoryFormat to_c10(graph::MemoryFormat m);

/// The type of `t` as the graph records it. `device` overrides t.device() (tracer tensors report a
/// device their meta value does not have).
graph::TensorType tensor_type(const at::Tensor& t,
                              std::optional<c10::Device> device = std::nullopt);

/// Converts a non-tensor IValue to an Arg, guided by the schema type of its argument. Throws
/// Unsupported for argument kinds the graph does not represent (complex scalars, generators,
/// custom classes, ...). Tensor-valued IValues are the caller's job.
graph::Arg to_arg(const c10::IValue& v, const c10::TypePtr& type, const std::string& op_name);

/// The IValue that `a` stands for, for a non-tensor Arg.
c10::IValue to_ivalue(const graph::Arg& a);

/// The OpInfo of a schema.
graph::OpInfo op_info(const c10::FunctionSchema& schema);

/// The op-table kind of a schema's operator name (graph/ops.def); Unknown when not in the table.
inline graph::OpKind op_kind(const c10::FunctionSchema& schema) {
  return graph::op_kind(schema.name());
}

}  // namespace ember::tracer
