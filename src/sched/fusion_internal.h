/// \file
/// Internals of the fusion scheduler, shared by fusion.cpp (the Scheduler: which values are
/// realized, the order of steps, the cost rule) and kernel_builder.cpp (the KernelBuilder: one
/// kernel's loop IR, inlining index functions). Not part of the sched API.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "loop/bounds.h"
#include "loop/equality.h"
#include "loop/expr.h"
#include "loop/stmt.h"
#include "loop/traverse.h"
#include "sched/fusion.h"
#include "sched/index_ops.h"
#include "sched/reduction_spec.h"

namespace ember::sched::fusion_detail {

using graph::ValueId;
using loop::Expr;
using loop::Stmt;

// Note [Recompute or realize]
// A value that is not realized is inlined into every read of it, at the index of that read. When
// a kernel reads it at several different indices, or at an index that ignores a loop of the
// kernel (a broadcast), or several kernels read it, it is computed more than once per element.
// That is fine for cheap values: a cast, an add, a view. A value whose inlined expression costs
// more than kMaxRecomputeCost (an op counts 1, a transcendental call such as exp or tanh counts 5,
// views and data movement count 0, summed over the inlined producers) is realized instead: a
// kernel of its own shape writes it once and the readers load it.
constexpr int kMaxRecomputeCost = 3;
// A value computed from values of at most 1/64 of its elements (Scheduler::generated: a loss's
// gradient from the targets, a mask from positions) is recomputed up to this cost: it reads
// almost nothing, where realizing it writes it whole and reads it back in every reader.
constexpr int kMaxGeneratedCost = 12;
constexpr int kTranscendentalCost = 5;
// The most a reduction's input computed inline (a prologue) may cost: it is computed once per
// pass over the row (two or three), instead of being written and read once more.
constexpr int kMaxPrologueCost = 6;
// The same for a sum, mean, prod, amax or amin (reduction.h, takes_siblings): one pass computes
// the input once per element (an epilogue may compute parts of it again). Batch norm's backward
// sum of g * x^ with g a ReLU's masked gradient of a residual add costs about 8.
constexpr int kMaxSinglePassPrologueCost = 12;
// Instances of one value in one kernel beyond which it is realized at once, whatever its cost:
// inlining at many indices can grow exponentially (x.roll(1) + x, repeated), so the rounds of the
// cost rule must not wait for a complete plan.
constexpr int kMaxInstances = 16;

// Thrown while building when a value exceeds kMaxInstances in one kernel.
struct TooManyInstances {
  graph::ValueId value;
};

// ViewStep: a view that something outside the kernels needs; a PlanStep::Kind::View step.
// Scatter: a write at indexed positions (scatter.h), a one-node kernel group like Reduction.
enum class NodeClass : uint8_t { Extern, Reduction, Pointwise, View, Compute, ViewStep, Scatter };

// Every tensor value a node reads, in argument order (ValueRefs only).
std::vector<ValueId> tensor_args(const graph::Node& n);
// Every value a node reads: ValueRefs and the items of ValueLists.
std::vector<ValueId> all_reads(const graph::Node& n);

// The kernel's loop variable of dim `d`.
std::string loop_var(size_t d);
// A buffer name used while building, replaced by buf<k> at the end.
std::string value_buffer(ValueId v);
// The flat offset of `index` in a tensor of type `t` (dims of size 1 contribute nothing: their
// index is 0). Symbolic strides are SizeVar expressions (size_expr.h).
Expr offset_of(const graph::TensorType& t, const Index& index);
// `index` (of a tensor of sizes `out`) broadcast to an operand of sizes `in`: right-aligned,
// size-1 dims read element 0. A symbolic size is never 1 (0/1 specialization): never broadcast.
Index broadcast(const Index& index, const graph::Dims& in);
// An element of an index tensor (i64 or i32) as an i64 index.
Expr as_index(Expr e);
using loop::collect_vars;
// What evaluating `e` once costs (Note [Recompute or realize]).
int expression_cost(const Expr& e);
// Statements: loop::rename_buffers (loop/traverse.h).
Expr rename_buffers(const Expr& e, const std::map<std::string, std::string>& names);

// One instantiation of an inlined value in a kernel: the value at one index.
struct Use {
  ValueId value = -1;
  std::string key;         // the value and its printed index
  bool broadcast = false;  // the index ignores a loop of the kernel (extent > 1)
};

/// What a KernelBuilder asks of the scheduler about values outside the kernel.
class FusionState {
 public:
  virtual ~FusionState() = default;
  virtual const graph::Graph& graph() const = 0;
  virtual NodeClass node_class(ValueId v) const = 0;
  /// Lives in memory: a graph input, the output of an extern, reduction or view step, or a
  /// kernel output.
  virtual bool realized(ValueId v) const = 0;
  /// An output of a view node the kernels read through.
  virtual bool is_view(ValueId v) const = 0;
  /// The value a view aliases at the end of its chain of views.
  virtual ValueId view_root(ValueId v) const = 0;
  /// ScheduleOptions::index_asserts.
  virtual bool index_asserts() const = 0;
};

// Builds one kernel: the values it stores (one shape, the iteration space) and everything they
// inline. Reads go through element() (the ElementReader of index_ops.h). The shape may hold
// symbolic sizes (a kernel of pointwise values over shape symbols): its loops then run over
// SizeVar extents, its reads and writes at symbolic strides and offsets, and the symbols' hints
// decide only loop kinds and order.
class KernelBuilder final : public ElementReader {
 public:
  KernelBuilder(const FusionState& s, graph::Dims shape);
  KernelBuilder(const FusionState& s, const std::vector<int64_t>& shape)
      : KernelBuilder(s, graph::Dims(shape.begin(), shape.end())) {}

  const graph::Dims& shape() const { return shape_; }
  bool stores(ValueId v) const {
    for (const auto& [sv, var] : st_.stores) {
      if (sv == v) return true;
    }
    return false;
  }
  /// Adds realized value `v` (of this kernel's shape) as an output. Returns false, changing
  /// nothing, when `v` reads a value this kernel stores at another index than its own, or uses one
  /// as an index tensor: that value must be written by an earlier kernel.
  bool add_store(ValueId v);
  /// The group: inputs, outputs, nodes and the loop-IR kernel named `name`.
  KernelGroup finish(const std::string& name, const ScheduleOptions& options) const;
  const std::vector<Use>& uses() const { return st_.uses; }

  // ---- pieces for other kernels (reduction prologues and epilogues, reduction_fusion.cpp) ----

  /// The value of computed value `v` (of this builder's shape) at the identity index, reading
  /// through element(); its lets are lets(). A view (a reduction's input may be one) is read as
  /// element() reads views: over shape symbols a reshape is not an index function, and its
  /// realized root is loaded at the view's geometry (a reshape feeding a reduction made OPT's
  /// decoder compile per size).
  Expr compute(ValueId v) {
    return s_.is_view(v) ? element(v, identity(), false) : define(v, identity());
  }
  const std::vector<std::pair<Expr, Expr>>& lets() const { return st_.lets; }
  /// Reads of realized value `v` must be at flat offset `offset` (in the loop variables): any
  /// other read, or a use of `v` as an index tensor, makes add_store fail.
  void bind_reads(ValueId v, const Expr& offset);
  /// Realized value `v` is computed from its node where this builder reads it, not loaded: the
  /// kernel stores it itself, later (Note [Stored prologues] in fusion.cpp).
  void compute_inline(ValueId v) { inline_.insert(v); }
  /// The per-element statement: the lets, then the stores of every added value (buffers named
  /// value_buffer(v), loop variables loop_var(d)).
  Stmt body() const;
  /// KernelGroup::reuse of a kernel whose loop body is `body` (before buffers are renamed).
  std::vector<std::pair<ValueId, ValueId>> reusable_inputs(const Stmt& body) const;
  /// `body` preceded by the range checks of index tensors (see KernelGroup::index_status): adds
  /// the status buffer to group.kernel and sets group.index_status when there are any.
  Stmt with_index_checks(Stmt body, KernelGroup& group) const;
  bool has_index_checks() const { return !st_.checks.empty(); }
  const std::vector<ValueId>& inputs() const { return st_.inputs; }
  const std::set<int32_t>& nodes() const { return st_.nodes; }
  std::vector<ValueId> stored_values() const {
    std::vector<ValueId> out;
    for (const auto& [v, var] : st_.stores) out.push_back(v);
    return out;
  }

  Expr element(ValueId v, const Index& index, bool guarded) override;
  Expr index_element(ValueId v, const Index& index, const Expr& size, bool negative_wraps) override;

 private:
  struct IndexCheck {
    ValueId v;
    Expr size;  ///< a constant, or an expression over size variables
    bool negative_wraps;
    bool operator==(const IndexCheck& o) const {
      return v == o.v && negative_wraps == o.negative_wraps &&
             loop::structurally_equal(size, o.size);
    }
  };
  struct State {
    std::vector<std::pair<Expr, Expr>> lets;  // (var, value), in order
    std::map<std::string, Expr> memo;         // "value@index" -> let var
    std::map<ValueId, int> num_lets;          // per value, for naming
    std::map<ValueId, int> num_instances;     // per value, instantiations (see kMaxInstances)
    std::vector<ValueId> inputs;              // realized values read, in first-use order
    std::vector<std::pair<ValueId, Expr>> stores;
    std::vector<IndexCheck> checks;
    std::set<int32_t> nodes;
    std::vector<Use> uses;
  };

  Index simplified(const Index& index) const;
  Index identity() const;
  std::string key(ValueId v, const Index& index) const;
  Expr load(ValueId buffer_value, const graph::TensorType& geometry, const Index& index,
            const graph::DimExpr& base_offset);
  bool is_one(size_t d) const { return shape_[d] == graph::DimExpr(1); }
  /// Extent > 1 (a symbolic size is at least 2).
  bool is_loop(size_t d) const {
    const std::optional<int64_t> c = shape_[d].as_constant();
    return !c || *c > 1;
  }
  Expr define(ValueId v, const Index& index);
  void add_input(ValueId v) {
    if (std::find(st_.inputs.begin(), st_.inputs.end(), v) == st_.inputs.end()) {
      st_.inputs.push_back(v);
    }
  }

  const FusionState& s_;
  const graph::Graph& g_;
  graph::Dims shape_;
  loop::VarBounds bounds_;
  State st_;
  std::map<ValueId, Expr> bound_;  // see bind_reads
  std::set<ValueId> inline_;       // see compute_inline
  bool conflict_ = false;
  int guard_depth_ = 0;
};

/// The kernel group of one reduction node (reduction.h) with what it fuses
/// (docs/design/scheduler.md, "Reduction prologues and epilogues"):
///  - a prologue: when the node's input is not realized, the kernel computes it inline (a
///    KernelBuilder over the input's shape) in every pass that reads it;
///  - epilogues: values of the input's shape that the scheduler would store next, added while
///    they read the node's outputs only at the element's own row (or element), stored by an extra
///    pass over each row after the reduction. A value that cannot join closes the group.
class ReductionGroupBuilder {
 public:
  /// `outputs`: the node's outputs something needs, in output order; `fuse`: whether epilogues may
  /// join (ScheduleOptions::reduction_fusion). Requires a reduction kernel node whose input is
  /// realized unless `fuse` and supports_reduction_fusion.
  /// `stored`: realized values of the input's shape that the prologue computes inline and the
  /// kernel stores as its first epilogues (Note [Stored prologues] in fusion.cpp). absorbed()
  /// tells whether that worked.
  ReductionGroupBuilder(const FusionState& s, int32_t node, std::vector<ValueId> outputs, bool fuse,
                        const std::vector<ValueId>& stored = {});
  bool absorbed() const { return absorbed_; }

  bool has_prologue() const { return prologue_.has_value(); }
  /// The node's input.
  ValueId input() const { return x_value_; }
  /// Written by this kernel: a needed output of the node, or an epilogue value.
  bool stores(ValueId v) const;
  /// Adds stored value `v` as an epilogue. Returns false, changing nothing, when it cannot join.
  bool add_epilogue(ValueId v);
  /// Adds reduction node `node`, which comes later in the graph, as a sibling (Note [Sibling
  /// reductions] in reduction_fusion.cpp): one more accumulator in the same pass over the rows.
  /// `outputs`: its outputs something needs. Returns false, changing nothing, when it cannot
  /// join: not a sum, mean, prod, amax or amin over this node's space, this node not one either,
  /// an epilogue already added, or an input that reads a value this kernel stores.
  bool add_sibling(int32_t node, std::vector<ValueId> outputs);
  KernelGroup finish(const std::string& name, const ScheduleOptions& options) const;
  std::vector<Use> uses() const;

 private:
  const FusionState& s_;
  const graph::Graph& g_;
  int32_t node_;
  bool absorbed_ = false;
  ReductionSpec spec_;  // of node_, over the input's dims (analyze_reduction, not coalesced)
  std::vector<ValueId> outputs_;
  bool fusible_ = false;
  ValueId x_value_ = -1;
  graph::Dims x_sizes_;
  std::optional<KernelBuilder> prologue_;
  Expr x_;  // the input at the identity index (prologue)
  std::optional<KernelBuilder> epilogue_;
  struct Sibling {
    int32_t node;
    ReductionSpec spec;
    std::vector<ValueId> outputs;
    ValueId x_value;
    Expr x;  // computed by the prologue builder; undefined: loaded
  };
  std::vector<Sibling> siblings_;
};

}  // namespace ember::sched::fusion_detail
