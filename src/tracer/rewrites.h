/// \file
/// The trace-time rewrites, as one table (rewrites.cpp): the choices eager makes on a device,
/// made while an op is recorded, and the forms of ops the scheduler fuses better. Each row is
/// {name, ops it matches, where it applies, what it does, its function}; every function has one
/// signature. TraceSession::record consults the table once for each op on tracer tensors, in
/// table order: the first row whose ops match and whose function applies records the op its way
/// (its results, tracer tensors, on the stack) and the op is done; when none applies, the op is
/// recorded as it is.
///
/// A row can be turned off by name (CompileOptions::Trace::disabled_rewrites, a comma list), for
/// the before/after tests of each rewrite (tests/python/rewrite) and for measuring what one
/// gains.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>
#include <string_view>
#include <vector>

#include "graph/ops.h"

namespace ember::tracer {

class TraceSession;
struct Rewrite;

/// One op call a rewrite may record its way: the op, its arguments on the stack (the last
/// `num_args` entries), and the session recording it.
struct RewriteCall {
  TraceSession& session;
  const c10::OperatorHandle& op;
  torch::jit::Stack* stack;
  size_t base = 0;  ///< index in the stack of the first argument
  size_t num_args = 0;
  const Rewrite* row = nullptr;  ///< the row being tried

  c10::ArrayRef<c10::IValue> args() const {
    return c10::ArrayRef<c10::IValue>(stack->data() + base, num_args);
  }
  /// Replaces the arguments on the stack by `results`.
  void push_results(std::vector<at::Tensor> results);
  /// Records the op as it is, with this row (and only this row) skipped for it: for rewrites
  /// that follow an op with more ops.
  void record_as_is();
};

struct Rewrite {
  const char* name;
  /// The ops the row matches (graph/ops.def), and a family of ops by the start of their name
  /// ("aten::_foreach_"), or "".
  std::vector<graph::OpKind> ops;
  std::string_view prefix;
  /// Where it applies, as its function decides (documentation: "CUDA", "any device", ...).
  const char* where;
  /// What it records instead, in a few words.
  const char* does;
  /// True when it recorded the op (the op's results are on the stack); false leaves the stack
  /// as it was.
  bool (*apply)(RewriteCall& call);

  bool matches(graph::OpKind kind, std::string_view op_name) const;
};

/// Every rewrite, in the order TraceSession::record tries them.
const std::vector<Rewrite>& rewrite_table();

/// Whether the comma list `disabled` names `name`.
bool rewrite_disabled(std::string_view disabled, std::string_view name);

}  // namespace ember::tracer
