/// \file
/// Internals of the C++ emitter shared by its source files: naming and type helpers, and the
/// Emitter class (one kernel -> one C++ function). cpp_emitter.cpp holds expressions and
/// statements; cpp_lane_reduction.cpp the reductions over vectorized loops. Not a public header.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "loop/bounds.h"
#include "loop/stmt.h"

namespace ember::codegen::detail {

using loop::Accumulate;
using loop::DType;
using loop::Expr;
using loop::For;
using loop::Kernel;
using loop::ReduceOp;
using loop::Stmt;

// Names in generated code get a prefix per namespace, so IR names never collide with C++
// keywords or with each other: v_ variables, s_ sizes, b_ buffers.
std::string var_name(const std::string& n);
std::string size_name(const std::string& n);
std::string buf_name(const std::string& n);

/// The C++ element type of `t` (`ember_bf16` for bf16).
const char* cpp_type(loop::DType t);
/// Low-precision floats (bf16, f16) compute in f32 and round at every node.
bool is_low_float(loop::DType t);
/// The type a value of `t` is computed in.
const char* compute_type(loop::DType t);
/// Literals of `t`: exact (hex floats), deterministic.
std::string int_literal(loop::DType t, int64_t v);
std::string float_literal(loop::DType t, double v);

/// Emits one Kernel as a C++ function (see cpp_emitter.h for the ABI and semantics).
class Emitter {
 public:
  explicit Emitter(const loop::Kernel& k) : k_(k) {}

  /// The kernel's function, without the prelude.
  std::string function();

 private:
  void line(int indent, const std::string& s) { out_ << std::string(2 * indent, ' ') << s << "\n"; }

  // ---- expressions and statements (cpp_emitter.cpp) ------------------------------------

  // An operand in its compute type.
  std::string val(const Expr& e);
  // A computed value (in compute type) rounded to `t`.
  std::string round_to(DType t, const std::string& computed);
  std::string expr(const Expr& e);
  static std::pair<Expr, Expr> operands(const Expr& e);
  // The largest element offset of kernel buffer `buffer`, when its sizes and strides are
  // constants (non-negative strides); nullopt otherwise (and for local buffers).
  std::optional<int64_t> last_element(const std::string& buffer) const;
  // Whether the loop and Let bounds around the current statement place `index` in [0, last].
  bool in_range(const Expr& index, int64_t last) const;
  // Whether `e` may be evaluated where the program would not evaluate it (an arm of a select the
  // condition does not choose): every load reads inside its buffer (clamped, or in range by the
  // bounds) and no integer division or modulo can be by zero. See Note [Selects of loads].
  bool speculatable(const Expr& e) const;
  std::string binary(const Expr& e, const char* op);
  std::string helper2(const Expr& e, const char* fn);
  std::string compare(const Expr& e, const char* op);
  std::string cast(DType to, const Expr& v);
  std::string call(const Expr& e);
  // A Parallel loop runs its iterations on several threads. Plain stores never collide (the IR
  // forbids it); an Accumulate may, unless this iteration also initialises that accumulator
  // (stores to it at the same index), which makes the reduction private to the iteration.
  bool parallel_safe(const Stmt& body);
  void stmt(const Stmt& s, int ind);
  /// Declares every buffer parameter b_<name> as a __restrict__ copy of p_<name>.
  void restrict_pointers(int ind);
  void emit_for(const std::string& v, const std::string& lo, const std::string& hi,
                const Stmt& body, int ind);
  void accumulate(const Accumulate& a, int ind);

  // ---- reductions over a vectorized loop (cpp_lane_reduction.cpp) ----------------------

  // A Vectorized For whose body accumulates into elements that do not depend on the loop (a
  // reduction over the loop) cannot take `omp simd` as written: every iteration updates the same
  // accumulator. Lanes: each accumulator gets K lanes, iteration j of a block of K updates lane j
  // (so the block vectorizes), and the lanes are combined by a fixed tree at the end. Float sums
  // also flush the lanes into second and third level lanes every C blocks (a cascade), so the
  // rounding error of a long sum grows with its length / (K * C), not its length.
  struct LaneReduction {
    enum class Kind : uint8_t { None, Lanes, Serial };
    Kind kind = Kind::None;
    std::vector<const Accumulate*> accs;  // the distinct accumulators reduced over the loop
    int64_t lanes = 0;                    // K
    // A symbolic extent: the K for short rows (below kShortRows lanes' worth) and the most
    // elements this form runs in its branch (-1: unbounded). See Note [Lanes over a symbolic
    // extent].
    int64_t short_lanes = 0;
    int64_t max_extent = -1;
  };

  static constexpr int64_t kCascadeBlocks = 32;  // C

  static std::string acc_key(const Accumulate& a, const std::string& index);
  static bool lane_op(ReduceOp op);
  // Bytes of one lane of `a`'s accumulators in registers.
  static int64_t lane_bytes(const Accumulate& a);
  LaneReduction analyze_lane_reduction(const For& f);

  // The lane arrays of accumulator `i`: one per buffer of its op.
  struct LaneAcc {
    const Accumulate* acc = nullptr;
    std::string index;               // the accumulator element, as C++
    std::vector<std::string> lanes;  // per buffer: the lane array
    std::vector<std::string> ctype;  // per buffer: the lane type
  };

  // `dst op= src` for lanes or accumulators given as C++ lvalues/values, per buffer.
  void combine(int ind, ReduceOp op, const std::string& ct, const std::vector<std::string>& dst,
               const std::vector<std::string>& src);
  void emit_lane_reduction(const For& f, const LaneReduction& lr, int ind);
  // emit_lane_reduction, or over a symbolic extent one for short rows and one for long ones.
  void emit_vectorized_reduction(const For& f, const LaneReduction& lr, int ind);

  // Largest scratch buffer kept on the stack (per-row accumulators, tiles of them, scratch rows).
  static constexpr int64_t kMaxStackBytes = 64 * 1024;

  const Kernel& k_;
  std::ostringstream out_;
  // Selects being emitted around the current expression: a load inside one is clamped into its
  // buffer (last_element), since a vectorized loop evaluates both arms of a select.
  int select_depth_ = 0;
  // Intervals of the loop variables (and integer Lets) around the statement being emitted.
  loop::VarBounds bounds_;
  int parallel_depth_ = 0;
  int lane_counter_ = 0;  // numbers the lane reductions of the kernel, for unique C++ names
  // While emitting a lane reduction's body: accumulator element -> its lane lvalues.
  std::map<std::string, std::vector<std::string>> lane_refs_;
};

}  // namespace ember::codegen::detail
