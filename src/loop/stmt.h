/// \file
/// Statements of the loop IR and the top-level `Kernel`. The node list is nodes.def; expression
/// semantics are in expr.h.
///
/// Semantics:
///  - Statements run in order. Side effects are Stores and Accumulates into buffers.
///  - A buffer is named by a kernel parameter or by an enclosing Allocate, and holds elements of
///    one dtype. Buffer indices are i64 element offsets from the buffer's base; strides are
///    already applied (the index expression spells them out). An index outside the buffer is
///    undefined behaviour; lowering guards such accesses (Select, IfThenElse).
///  - Scopes: a For or Let binds its variable for its body only; an Allocate's buffer exists for
///    its body only. A name is bound at most once along any path from the kernel root: no
///    shadowing of variables, size variables or buffers.
///  - Loop kinds never change the result of a verifier-valid program, with one exception stated
///    by Accumulate: reductions may be reassociated. Parallel iterations must not write an
///    element that another iteration reads or writes, except through Accumulate.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loop/expr.h"

namespace ember::loop {

enum class StmtKind : uint8_t {
#define EMBER_LOOP_STMT(Name) Name,
#include "loop/nodes.def"
};
const char* stmt_kind_name(StmtKind k);

struct StmtNode {
  const StmtKind kind;
  virtual ~StmtNode() = default;

 protected:
  explicit StmtNode(StmtKind k) : kind(k) {}
};

/// A shared, immutable handle to a statement node; may be undefined (null).
class Stmt {
 public:
  Stmt() = default;
  explicit Stmt(std::shared_ptr<const StmtNode> node) : node_(std::move(node)) {}

  bool defined() const { return node_ != nullptr; }
  const StmtNode* get() const { return node_.get(); }
  const StmtNode* operator->() const { return node_.get(); }
  StmtKind kind() const { return node_->kind; }
  template <typename T>
  const T* as() const {
    return node_ && node_->kind == T::kKind ? static_cast<const T*>(node_.get()) : nullptr;
  }
  bool same_as(const Stmt& other) const { return node_ == other.node_; }

 private:
  std::shared_ptr<const StmtNode> node_;
};

/// How a backend may run the iterations of a For. Never changes the result (see above).
enum class ForKind : uint8_t { Serial, Parallel, Vectorized, Unrolled };
/// "serial", "parallel", "vectorized", "unrolled".
const char* for_kind_name(ForKind k);

/// Runs `body` for `var` = min, min + 1, ..., min + extent - 1; nothing when extent <= 0. `var`
/// is an i64 Var, bound in `body` only; `min` and `extent` are i64 and evaluated once, before
/// the first iteration. A Parallel loop with `parallel_when` (a bool over size variables, defined
/// only on Parallel loops) runs its iterations in parallel only when that holds: a kernel over
/// shape symbols decides at run time whether its size is worth a fork and join.
struct For final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::For;
  const Expr var, min, extent;
  const ForKind for_kind;
  const Stmt body;
  const Expr parallel_when;
  For(Expr v, Expr mn, Expr ext, ForKind k, Stmt b, Expr when)
      : StmtNode(kKind),
        var(std::move(v)),
        min(std::move(mn)),
        extent(std::move(ext)),
        for_kind(k),
        body(std::move(b)),
        parallel_when(std::move(when)) {}
  static Stmt make(Expr var, Expr min, Expr extent, ForKind kind, Stmt body,
                   Expr parallel_when = Expr());
  /// The same loop with another body (and bounds), keeping its kind and parallel_when.
  Stmt with(Expr min, Expr extent, Stmt body) const;
  auto fields() const { return std::tie(var, min, extent, for_kind, body, parallel_when); }
};

/// Runs `stmts` in order. Blocks are flat and never hold exactly one statement: make() splices
/// nested Blocks into their parent and returns a lone statement itself. The empty Block is the
/// no-op.
struct Block final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Block;
  const std::vector<Stmt> stmts;
  explicit Block(std::vector<Stmt> s) : StmtNode(kKind), stmts(std::move(s)) {}
  static Stmt make(std::vector<Stmt> stmts);
  auto fields() const { return std::tie(stmts); }
};

/// buffer[index] = value. `value` has the buffer's dtype.
struct Store final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Store;
  const std::string buffer;
  const Expr index, value;
  Store(std::string buf, Expr i, Expr v)
      : StmtNode(kKind), buffer(std::move(buf)), index(std::move(i)), value(std::move(v)) {}
  static Stmt make(std::string buffer, Expr index, Expr value);
  auto fields() const { return std::tie(buffer, index, value); }
};

/// The reductions of Accumulate. Buffers are the accumulator buffers, in order; values are the
/// operands folded in, in order.
///  - Sum, Prod: 1 buffer, 1 value, numeric. Integer sums wrap.
///  - Max, Min: 1 buffer, 1 value, numeric; NaN propagates (as torch.amax).
///  - ArgMax, ArgMin: buffers (value, index), values (candidate value, candidate i64 index). The
///    best value wins, NaN counting as the best; ties go to the lower index (as torch.argmax).
///  - Any, All: 1 buffer, 1 value, b8.
///  - WelfordReduce: buffers (mean, m2, weight), 1 value x, all one float dtype: adds the sample x
///    with weight 1 (m2 is the sum of squared deviations from the mean).
///  - WelfordCombine: buffers (mean, m2, weight), values (mean, m2, weight): merges a partial
///    result (Chan et al.).
enum class ReduceOp : uint8_t {
  Sum,
  Prod,
  Max,
  Min,
  ArgMax,
  ArgMin,
  Any,
  All,
  WelfordReduce,
  WelfordCombine
};
/// "sum", "prod", "max", "min", "argmax", "argmin", "any", "all", "welford", "welford_combine".
const char* reduce_op_name(ReduceOp op);
std::optional<ReduceOp> parse_reduce_op(std::string_view name);
int reduce_op_num_buffers(ReduceOp op);
int reduce_op_num_values(ReduceOp op);
/// The identity of `op` for the accumulator buffer at `position` of dtype `t`: what lowering
/// stores before the first Accumulate (0, 1, -inf/+inf or the type's lowest/highest, false,
/// true; for ArgMax/ArgMin the index slot holds INT64_MAX so ties resolve to real indices).
Expr reduction_identity(ReduceOp op, int position, DType t);

/// Folds `values` into the accumulators buffers[k][index] with `op`. A group of Accumulates into
/// the same accumulator element is a reduction: its result is the combination of every value in
/// an unspecified association order, so backends may reassociate (pairwise float sums, vector
/// lanes, per-thread partials combined after a parallel loop). Only Accumulates of the same op
/// may touch an accumulator between its initializing Store and its final read.
struct Accumulate final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Accumulate;
  const ReduceOp op;
  const std::vector<std::string> buffers;
  const Expr index;
  const std::vector<Expr> values;
  Accumulate(ReduceOp o, std::vector<std::string> bufs, Expr i, std::vector<Expr> vals)
      : StmtNode(kKind),
        op(o),
        buffers(std::move(bufs)),
        index(std::move(i)),
        values(std::move(vals)) {}
  /// Requires the op's buffer and value counts and value dtypes it accepts.
  static Stmt make(ReduceOp op, std::vector<std::string> buffers, Expr index,
                   std::vector<Expr> values);
  auto fields() const { return std::tie(op, buffers, index, values); }
};

/// Binds `var` (a Var of value's dtype) to `value`, evaluated once, within `body`.
struct Let final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Let;
  const Expr var, value;
  const Stmt body;
  Let(Expr v, Expr val, Stmt b)
      : StmtNode(kKind), var(std::move(v)), value(std::move(val)), body(std::move(b)) {}
  static Stmt make(Expr var, Expr value, Stmt body);
  auto fields() const { return std::tie(var, value, body); }
};

/// Runs `then_case` when the b8 `cond` holds, else `else_case` (which may be undefined).
struct IfThenElse final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::IfThenElse;
  const Expr cond;
  const Stmt then_case, else_case;
  IfThenElse(Expr c, Stmt t, Stmt e)
      : StmtNode(kKind), cond(std::move(c)), then_case(std::move(t)), else_case(std::move(e)) {}
  static Stmt make(Expr cond, Stmt then_case, Stmt else_case = {});
  auto fields() const { return std::tie(cond, then_case, else_case); }
};

/// A scratch buffer of `dtype` with dense row-major `sizes` (i64, evaluated on entry), alive
/// within `body`. Its contents start undefined. A backend may keep a one-element allocation in a
/// register.
struct Allocate final : StmtNode {
  static constexpr StmtKind kKind = StmtKind::Allocate;
  const std::string buffer;
  const DType dtype;
  const std::vector<Expr> sizes;
  const Stmt body;
  Allocate(std::string buf, DType t, std::vector<Expr> s, Stmt b)
      : StmtNode(kKind),
        buffer(std::move(buf)),
        dtype(t),
        sizes(std::move(s)),
        body(std::move(b)) {}
  static Stmt make(std::string buffer, DType dtype, std::vector<Expr> sizes, Stmt body);
  auto fields() const { return std::tie(buffer, dtype, sizes, body); }
};

/// What a kernel parameter buffer is for. Input: read only. Output: written (its prior contents
/// are undefined). InOut: read and written in place. Temp: scratch memory the caller's memory plan
/// provides; contents undefined on entry and dead on exit.
enum class BufferRole : uint8_t { Input, Output, InOut, Temp };
/// "input", "output", "inout", "temp".
const char* buffer_role_name(BufferRole r);

/// A buffer parameter: its element type, logical sizes and strides (in elements) as i64
/// expressions over the kernel's size variables. Loads and Stores index it by flat offset; the
/// sizes and strides describe the tensor for the runtime and for analyses.
struct BufferParam {
  std::string name;
  BufferRole role = BufferRole::Input;
  DType dtype = DType::Float32;
  std::vector<Expr> sizes;
  std::vector<Expr> strides;
};

/// A loop function: one compiled kernel. `size_vars` are its shape symbols (the i64 scalar
/// arguments after the buffers); `buffers` are its buffer arguments, in order.
///
/// A combo kernel (`combo`, made by sched/combo.h: horizontal fusion) runs independent parts: the
/// statements of its body Block (or the body itself, when it is not a Block). No part reads or
/// writes a buffer that another part writes, so running them in order, in any other order or at
/// once gives the same result: the C++ backend runs them in order, the Triton backend gives each
/// part its own range of programs of one launch.
struct Kernel {
  std::string name;
  std::vector<std::string> size_vars;
  std::vector<BufferParam> buffers;
  Stmt body;
  bool combo = false;

  /// The parameter named `name`, or nullptr.
  const BufferParam* find_buffer(const std::string& name) const;
  /// A combo kernel's parts, in order: the body Block's statements, or the body alone. The whole
  /// body as one part for any other kernel.
  std::vector<Stmt> parts() const;
};

/// Values of size variables, by name. Kept outside the IR so that sizes stay symbolic.
using Bindings = std::map<std::string, int64_t>;

}  // namespace ember::loop
