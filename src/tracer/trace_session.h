/// \file
/// A TraceSession turns PyTorch code run on tracer tensors into a graph::Graph.
///
/// Use: create a session, make a tracer tensor per graph input with `add_input`, `enter()`, run
/// the program on those tensors, then `finish(outputs)`. Between enter() and exit() the thread's
/// dispatch state routes every ATen op on tracer tensors, and every factory op, to ember's kernel,
/// which calls `record`.
///
/// Mutation and aliasing: inputs are wrapped in PyTorch's C++ functionalization
/// (FunctionalTensorWrapper, views re-applied), so the recorded graph is functional. `finish`
/// syncs each input and records an input whose value changed as a graph::Mutation. Functionalized
/// views stay view ops in the graph, so outputs alias as in eager. See docs/design/tracer.md.
#pragma once

#include <mutex>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "support/error.h"
#include "support/options.h"
#include "sym/guard.h"
#include "tracer/rewrite_call.h"

namespace ember::tracer {

/// A traced graph and the real tensors its constant inputs stand for, in input order.
/// The trace-time options of the session entered on this thread (the defaults when none is):
/// what a rewrite, called while an op is recorded, reads.
const CompileOptions::Trace& trace_options();

struct TracedGraph {
  graph::Graph graph;
  std::vector<at::Tensor> constants;
  /// The size relations the trace relied on (sym/guard.h), over `graph.symbols`: the graph is
  /// valid for the bindings under which each gives its expected answer. Empty for a static graph.
  std::vector<sym::SizeGuard> size_guards = {};
};

class TraceSession {
 public:
  /// `options` (support/options.h): its `trace` group decides which of `rewrites` apply.
  /// `rewrites`: the trace-time rewrites `record` tries, in order (rewrite::rewrite_table(), from
  /// src/rewrite, given by whoever creates the session; `{}` records every op as it is).
  TraceSession(CompileOptions options, RewriteTable rewrites);
  ~TraceSession();
  TraceSession(const TraceSession&) = delete;
  TraceSession& operator=(const TraceSession&) = delete;

  /// A functional tracer tensor standing for graph input `name`, with the metadata of `example`
  /// (a real tensor; its data is never read). Call before enter().
  /// `device` overrides the device the tracer tensor reports (tests trace for cuda:0 on a machine
  /// with no GPU: only the device's choices in the tracer run, nothing on the device).
  /// `dynamic_dims`: the dims whose size becomes a shape symbol (sym::ShapeEnv::create_size,
  /// with the source `name.size()[d]`; a size of 0 or 1 stays a constant, the caller's guards
  /// keep it). The tracer tensor then reports symbolic sizes (tracer/sym_node.h), results get
  /// symbolic types (graph/shape_rules.h), and decisions on them become size guards.
  /// `symbol_keys` (empty, or one per dynamic dim): dims with the same key share one symbol,
  /// across inputs (a foreign tracer's symbol names, when its graph says two sizes are one).
  at::Tensor add_input(const at::Tensor& example, graph::InputKind kind, const std::string& name,
                       std::optional<c10::Device> device = std::nullopt,
                       const std::vector<int64_t>& dynamic_dims = {},
                       const std::vector<std::string>& symbol_keys = {});

  /// A tracer tensor standing for a new graph input `name` of the sizes, dtype and device of the
  /// traced tensor `like`, contiguous: the tangent of an output in a joint graph. Its sizes are
  /// `like`'s expressions over this session's symbols (a symbolic output's tangent is symbolic
  /// in the same symbols: it adds none). Call before enter().
  at::Tensor add_input_like(const at::Tensor& like, graph::InputKind kind, const std::string& name);

  /// A tracer tensor standing for the real tensor `t` as a constant of the graph (data the
  /// program wrote, as torch.tensor([1.0, 2.0]) makes). Call while the trace is not entered.
  at::Tensor add_constant_tensor(const at::Tensor& t);

  /// Routes ATen ops on this thread to the tracer until exit(). Not reentrant.
  void enter();
  void exit();
  bool active() const { return active_; }
  /// Held while an op is recorded: another thread may record for this session while its own
  /// thread waits (autograd's device threads, see dispatch.cpp).
  std::recursive_mutex& record_mutex() { return record_mutex_; }

  /// Ends the trace: `outputs` become the graph's outputs (tracer tensors, functional wrappers or
  /// real tensors, which become constants). Syncs inputs and records their mutations. Verifies the
  /// graph. The session can not be used afterwards.
  TracedGraph finish(const std::vector<at::Tensor>& outputs);

  /// Records one op call: called by the dispatch kernel with the op's arguments on `stack`;
  /// leaves the op's results (tracer tensors) on it.
  void record(const c10::OperatorHandle& op, torch::jit::Stack* stack);

  const CompileOptions& options() const { return options_; }

  // For the rewrites (tracer/rewrite_call.h, src/rewrite), which record ops their way through
  // these and `record`.

  /// Records the op as it is, with the rewrite `row` skipped for it (and for what it records).
  void record_skipping(const Rewrite* row, const c10::OperatorHandle& op, torch::jit::Stack* stack);
  /// A convolution was recorded channels-last on a contiguous input: `finish` turns the graph's
  /// 4D outputs that came out channels-last back to contiguous, the layout eager gives them.
  void note_channels_last_from_contiguous() { channels_last_from_contiguous_ = true; }
  /// The graph input whose functional wrapper holds `t` (a tracer tensor) as its current value,
  /// or nullptr.
  const at::Tensor* functional_input_holding(const at::Tensor& t) const;
  /// Makes `value` (a tracer tensor of the input's dtype and shape) the current value of the
  /// graph input whose functional wrapper is `input`, as functionalization does for an op that
  /// mutates it: `finish` records the change as a mutation of the input.
  void update_input(const at::Tensor& input, const at::Tensor& value);
  /// The state of type `T` that a rewrite keeps for the length of this trace (made on first use,
  /// one per type): what a later op's rewrite reads of an earlier one's (a max pool's window
  /// offsets, which its backward reads).
  template <typename T>
  T& rewrite_state() {
    std::unique_ptr<StateBase>& slot = rewrite_states_[std::type_index(typeid(T))];
    if (!slot) slot = std::make_unique<State<T>>();
    return static_cast<State<T>*>(slot.get())->value;
  }

  /// The session that is entered on this thread, or nullptr.
  static TraceSession* current();
  /// The session entered on some thread, when exactly one is, else nullptr: for a thread that
  /// inherited the tracing thread's dispatch state but not its session (autograd's device
  /// threads run a factory op, `scalar_tensor` or `zeros`, with no tracer tensor to find it by).
  static TraceSession* only_entered();

  /// The thread's dispatch state from before enter(); the kernel restores it while it computes
  /// metadata, so that meta and eager calls are not traced.
  /// Requires: the session is entered.
  const c10::impl::LocalDispatchKeySet& outer_tls() const {
    EMBER_INTERNAL_ASSERT(outer_tls_.has_value())
        << "the outer dispatch state of a session not entered";
    return *outer_tls_;
  }

  const graph::Graph& graph() const { return graph_; }
  /// Decides size relations for this trace and records the guards (sym/guard.h).
  sym::GuardRecorder& size_guards() { return size_guards_; }
  /// Some input has a symbolic size.
  bool symbolic() const { return !graph_.symbols.symbols().empty(); }

  /// When set, a real tensor reaching the trace (one that is not a graph input) is unsupported,
  /// except a wrapped Python number or a 0-dim tensor (a scalar an op made from a number). Capture
  /// sets it: every tensor its program reads from outside is made an input, so another real tensor
  /// was read where capture could not see it.
  void set_strict_constants(bool strict) { strict_constants_ = strict; }

  /// The first ember error raised inside the trace. PyTorch's Python bindings turn exceptions
  /// that cross them into RuntimeError; the caller rethrows this one to keep its type.
  void note_error(std::exception_ptr e) {
    if (!pending_error_) pending_error_ = e;
  }
  bool has_pending_error() const { return pending_error_ != nullptr; }
  void rethrow_pending_error() {
    if (pending_error_) std::rethrow_exception(pending_error_);
  }

 private:
  CompileOptions options_;
  graph::ValueId value_of(const at::Tensor& t);
  graph::ValueId add_constant(const at::Tensor& t);
  /// If `out` (a functional tensor) is a view of an input that the trace mutates, adds an
  /// as_strided view of that input and returns it; otherwise -1.
  graph::ValueId aliased_view_of_mutated_input(const at::Tensor& out);

  struct StateBase {
    virtual ~StateBase() = default;
  };
  template <typename T>
  struct State : StateBase {
    T value;
  };

  graph::Graph graph_;
  sym::GuardRecorder size_guards_{graph_.symbols};
  /// add_input's symbol keys, and the symbol each stands for.
  std::unordered_map<std::string, sym::SymExpr> symbol_of_key_;
  std::vector<at::Tensor> constants_;
  std::unordered_map<const c10::TensorImpl*, graph::ValueId> constant_ids_;
  std::vector<at::Tensor> functional_inputs_;
  /// Index in graph_.inputs of each functional input (constants may come between them when
  /// inputs are added during the trace, as capture does).
  std::vector<size_t> functional_input_index_;
  std::optional<c10::impl::LocalDispatchKeySet> outer_tls_;  ///< set while entered
  bool outer_reapply_views_ = false;
  TraceSession* outer_session_ = nullptr;
  bool active_ = false;
  std::recursive_mutex record_mutex_;
  bool finished_ = false;
  /// Note [Tracing for a device this torch lacks]: set by add_input's device when it is a
  /// stand-in; `stand_in` reads the CPU as it.
  std::optional<c10::Device> stand_in_device_;
  c10::Device stand_in(c10::Device d) const {
    return stand_in_device_ && d.is_cpu() ? *stand_in_device_ : d;
  }
  bool strict_constants_ = false;
  /// A convolution was recorded channels-last on a contiguous input (see finish).
  bool channels_last_from_contiguous_ = false;
  /// Rewrites skipped for the op being recorded as it is (record_skipping).
  std::vector<const Rewrite*> skipping_;
  /// The rewrites `record` tries, in order.
  RewriteTable rewrites_;
  /// rewrite_state(), by type.
  std::unordered_map<std::type_index, std::unique_ptr<StateBase>> rewrite_states_;
  std::exception_ptr pending_error_;
};

}  // namespace ember::tracer
