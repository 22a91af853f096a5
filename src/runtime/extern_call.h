/// \file
/// One graph node as a boxed dispatcher call from C++: the operator resolved and the constant
/// arguments converted once, then run any number of times on an environment of tensors (one slot
/// per graph value). Used by the executor's extern steps and by constant folding.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "sym/shape_env.h"

namespace ember::runtime {

struct ExternCall {
  std::optional<c10::OperatorHandle> op;
  std::vector<c10::IValue> args;  ///< constant arguments; tensor slots hold None
  std::vector<std::pair<int, graph::ValueId>> tensor_args;
  /// Tensor-list arguments; the pointers are into the graph the call was made from, which must
  /// outlive it.
  std::vector<std::pair<int, const graph::ValueList*>> list_args;
  std::vector<graph::ValueId> outputs;
  std::vector<int32_t> result_slots;  ///< see graph::Node::result_slots
  /// Arguments over shape symbols (a `DimExpr` or `Dims` that is not constant): evaluated at
  /// each call under its bindings. The pointers are into the graph, as list_args'.
  std::vector<std::pair<int, const graph::Arg*>> symbolic_args;

  /// The values the call reads, tensor lists included.
  std::vector<graph::ValueId> reads() const;
  /// Calls the operator with the tensors of `env` and stores its results in `env` (`stack` is
  /// scratch space, reused between calls). `evaluated`: symbolic_args' values at this call, in
  /// their order (BindingLayouts::extern_args), required when `symbolic_args` is not empty.
  /// Throws what the operator throws; InternalError when it returns another number of tensors
  /// than it did while tracing.
  void run(std::vector<at::Tensor>& env, torch::jit::Stack& stack,
           const std::vector<c10::IValue>* evaluated = nullptr) const;
};

/// Prepares node `node` of `g`: constant arguments converted once, symbolic ones (symbolic_args)
/// left to each call. Throws Unsupported when its operator is not registered in this process.
ExternCall make_extern_call(const graph::Graph& g, int32_t node);

}  // namespace ember::runtime
