/// \file
/// What a trace-time rewrite sees of the tracer: the op call it may record its way
/// (`RewriteCall`), the row type of a table of rewrites (`Rewrite`), and the table a
/// TraceSession is given (`RewriteTable`). The rewrites themselves, and the table of them, are
/// the stage library above the tracer (src/rewrite, `rewrite::rewrite_table()`); the tracer
/// includes none of it, and a session tries the rows it was given.
///
/// TraceSession::record consults the table once for each op on tracer tensors, in table order: a
/// row is tried when its ops match, it is not turned off by name
/// (CompileOptions::Trace::disabled_rewrites, a comma list) and its device predicate holds for
/// the device the op runs on (`Where`, or every device under its widening option); the first row
/// whose function applies records the op its way (its results, tracer tensors, on the stack) and
/// the op is done; when none applies, the op is recorded as it is.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Device.h>

#include <span>
#include <string_view>
#include <vector>

#include "graph/ops.h"
#include "support/options.h"

namespace ember::tracer {

class TraceSession;
struct Rewrite;

/// The devices a row applies on, by the device the traced op runs on (`RewriteCall::target`).
enum class Where {
  Any,      ///< every device
  Cuda,     ///< a CUDA device (a tracer tensor that reports one: a stand-in device too)
  Cpu,      ///< the CPU
  Nowhere,  ///< none: only where the row's widening option holds
};

/// The option of CompileOptions::Trace that widens a row to every device (the CPU tests compare
/// the CUDA-only rewrites with eager under it).
enum class Widening {
  None,
  SplitsEverywhere,             ///< trace.splits_everywhere (EMBER_SPLIT_REDUCTIONS=all)
  DecomposeBackwardEverywhere,  ///< trace.decompose_backward_everywhere
                                ///< (EMBER_DECOMPOSE_BACKWARD=all)
};

/// "any", "cuda", "cpu", "nowhere".
const char* where_name(Where w);
/// The option's name in ember.config ("trace.splits_everywhere"); "" for Widening::None.
const char* widening_option(Widening w);
/// Whether `options` set the widening option `w`.
bool widened(Widening w, const CompileOptions::Trace& options);

/// The device an op called with `args` runs on, as the rewrites decide it: that of its first
/// defined tensor argument (in a tensor list too) that is not a 0-dim CPU tensor (a Python
/// scalar's), else that of its first tensor argument, else the CPU. A tracer tensor reports the
/// device it traces for, a stand-in included (TraceSession::add_input); a real tensor its own.
c10::Device target_device(c10::ArrayRef<c10::IValue> args);

/// One op call a rewrite may record its way: the op, its arguments on the stack (the last
/// `num_args` entries), the device it runs on, and the session recording it.
struct RewriteCall {
  TraceSession& session;
  const c10::OperatorHandle& op;
  torch::jit::Stack* stack;
  size_t base = 0;  ///< index in the stack of the first argument
  size_t num_args = 0;
  /// The device the op runs on (target_device of its arguments), decided once per call; the
  /// row's device predicate held for it.
  c10::Device target = c10::Device(c10::kCPU);
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
  /// Where it applies: on `where`, or on every device when `widened_by` is set. Checked before
  /// `apply` is called; the function does not check the device again.
  Where where;
  Widening widened_by;
  /// What else its function requires (documentation: "training, f32/f16"), or "".
  const char* when;
  /// What it records instead, in a few words.
  const char* does;
  /// True when it recorded the op (the op's results are on the stack); false leaves the stack
  /// as it was.
  bool (*apply)(RewriteCall& call);

  bool matches(graph::OpKind kind, std::string_view op_name) const;
  /// The row's device predicate for an op on `target` under `options`.
  bool applies_on(c10::Device target, const CompileOptions::Trace& options) const;
};

/// The rows a TraceSession tries, in order (rewrite::rewrite_table(), or none).
using RewriteTable = std::span<const Rewrite>;

/// Whether the comma list `disabled` names `name`.
bool rewrite_disabled(std::string_view disabled, std::string_view name);

}  // namespace ember::tracer
