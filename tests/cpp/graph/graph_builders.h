/// \file
/// Builders shared by the graph IR's tests: a contiguous TensorType, an OpInfo, and the sample
/// graph (every input kind, kwarg-only arguments, multi- and list-output nodes, a node without
/// outputs, a Tensor?[] argument with a None, a strided input and a mutation) that the printer's
/// golden text and the parser's round trip both use.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "graph/types.h"

namespace ember::graph::test {

inline TensorType make_type(Dims sizes, DType dtype = DType::Float32) {
  TensorType t;
  t.dtype = dtype;
  t.strides = contiguous_strides(sizes);
  t.sizes = std::move(sizes);
  return t;
}

inline OpInfo make_op(std::string name, std::string overload, std::vector<std::string> arg_names,
                      std::vector<bool> kwarg_only, bool returns_list = false) {
  return OpInfo{std::move(name), std::move(overload), std::move(arg_names), std::move(kwarg_only),
                returns_list};
}

/// One graph with every input kind, kwarg-only args, multi- and list-output nodes, a node without
/// outputs, a Tensor?[] argument with a None, a strided input and a mutation.
inline Graph build_sample() {
  Graph g;
  ValueId x = g.add_input(make_type({2, 3}), InputKind::User, "x");
  TensorType w_type = make_type({3});
  w_type.requires_grad = true;
  ValueId w = g.add_input(w_type, InputKind::Parameter, "weight");
  ValueId b = g.add_input(make_type({3}), InputKind::Buffer, "running_mean");
  ValueId c = g.add_input(make_type({3}, DType::Int64), InputKind::Constant);
  g.add_input(make_type({}), InputKind::Constant, "scale");
  TensorType y_type = make_type({3, 2});
  y_type.strides = {1, 3};
  y_type.storage_offset = 4;
  ValueId y = g.add_input(y_type, InputKind::User);

  int32_t add =
      g.intern_op(make_op("aten::add", "Tensor", {"self", "other", "alpha"}, {false, false, true}));
  int32_t var_mean =
      g.intern_op(make_op("aten::var_mean", "correction", {"self", "dim", "correction", "keepdim"},
                          {false, false, true, true}));
  int32_t index =
      g.intern_op(make_op("aten::index", "Tensor", {"self", "indices"}, {false, false}));
  int32_t unbind = g.intern_op(make_op("aten::unbind", "int", {"self", "dim"}, {false, false},
                                       /*returns_list=*/true));
  int32_t to_copy = g.intern_op(make_op("aten::_to_copy", "",
                                        {"self", "dtype", "layout", "device", "memory_format"},
                                        {false, true, true, true, true}));
  int32_t assert_msg =
      g.intern_op(make_op("aten::_assert_async", "msg", {"self", "assert_msg"}, {false, false}));

  int32_t n0 = g.add_node(add, {ValueRef{x}, ValueRef{w}, int64_t{1}}, {make_type({2, 3})});
  ValueId sum = g.nodes[n0].outputs[0];
  int32_t n1 = g.add_node(var_mean, {ValueRef{sum}, std::vector<int64_t>{0}, 1.0, false},
                          {make_type({3}), make_type({3})});
  ValueId mean = g.nodes[n1].outputs[1];
  int32_t n2 =
      g.add_node(index, {ValueRef{x}, ValueList{{std::nullopt, c}, true}}, {make_type({2, 3})});
  g.add_node(unbind, {ValueRef{y}, int64_t{1}}, {make_type({3}), make_type({3})});
  g.add_node(to_copy,
             {ValueRef{mean}, DType::BFloat16, Layout::Strided, Device{DeviceKind::CUDA, 0},
              MemoryFormat::Contiguous},
             {make_type({3}, DType::BFloat16)});
  g.add_node(assert_msg, {ValueRef{x}, std::string("x \"must\" be\tok\n")}, {});
  g.mutations.push_back(Mutation{b, mean});
  g.outputs = {sum, g.nodes[n2].outputs[0]};
  return g;
}

}  // namespace ember::graph::test
