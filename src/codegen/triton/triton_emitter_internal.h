/// \file
/// The Triton emitter's class, shared by its translation units: triton_emitter.cpp
/// (expressions, statements, the kernel function) and triton_block_loops.cpp (loops over
/// blocks: row accumulators, column tiles). Internal to ember_codegen; the interface is
/// triton_emitter.h.
#pragma once

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "codegen/triton/triton_emitter.h"
#include "codegen/triton/triton_kernel_shape.h"
#include "codegen/triton/triton_memory_order.h"
#include "loop/simplify.h"
#include "support/error.h"

namespace ember::codegen::triton_detail {

using namespace loop;
using namespace triton_shape;

/// Why a kernel has no Triton form; caught by emit_triton.
struct NoTritonForm {
  std::string why;
};

[[noreturn]] inline void refuse(const std::string& why) {
  throw NoTritonForm{why};
}

inline const char* tl_dtype(DType t) {
  switch (t) {
    case DType::UInt8:
      return "tl.uint8";
    case DType::Int8:
      return "tl.int8";
    case DType::Int16:
      return "tl.int16";
    case DType::Int32:
      return "tl.int32";
    case DType::Int64:
      return "tl.int64";
    case DType::Float16:
      return "tl.float16";
    case DType::Float32:
      return "tl.float32";
    case DType::Float64:
      return "tl.float64";
    case DType::Bool:
      return "tl.int1";
    case DType::BFloat16:
      return "tl.bfloat16";
  }
  return "tl.float32";
}

inline bool is_half(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}

/// Float literal text that round-trips (Triton takes a Python float as f32 beside an f32 block).
inline std::string float_text(double v) {
  if (std::isnan(v)) return "float(\"nan\")";
  if (std::isinf(v)) return v > 0 ? "float(\"inf\")" : "float(\"-inf\")";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

/// What reduce helper and identity an accumulator op uses.
struct ReduceText {
  const char* combine;  ///< a jit helper taking (a, b)
  const char* reduce;   ///< a jit helper taking (block) -> scalar
};

inline ReduceText reduce_text(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return {"_ember_add", "_ember_sum"};
    case ReduceOp::Prod:
      return {"_ember_mul", "_ember_prod"};
    case ReduceOp::Max:
      return {"_ember_max", "_ember_amax"};
    case ReduceOp::Min:
      return {"_ember_min", "_ember_amin"};
    case ReduceOp::Any:
      return {"_ember_or", "_ember_any"};
    case ReduceOp::All:
      return {"_ember_and", "_ember_all"};
    default:
      refuse(std::string("the ") + reduce_op_name(op) + " reduction");
  }
}

/// Arrays (Allocates of more than one element) live in one block: at most this many elements.
constexpr int64_t kMaxArray = 1024;

class Emitter {
 public:
  /// `row_tiles`: a persistent row program may handle several short rows (rows_per_program);
  /// false keeps one row per program (what emit_triton falls back to when a row tile refuses).
  /// `private_buffers`: see emit_triton.
  Emitter(const Kernel& k, bool row_tiles, const std::vector<std::string>& private_buffers,
          bool persistent = true)
      : k_(k),
        row_tiles_(row_tiles),
        persistent_allowed_(persistent),
        private_buffers_(private_buffers) {}

  TritonKernel run();

  /// Emits the kernel as a matrix template's epilogue (emit_triton_epilogue): a flat nest whose
  /// reads of `product` are all at the nest's own row-major element, replaced by `acc_c`; `lin`
  /// and `xmask` come from the template.
  void set_epilogue(const std::string& product) { product_ = product; }
  /// Emits the kernel as a part of a combo kernel (emit_triton of a loop::Kernel::combo): its
  /// program id is the variable `pid` (the program's index among the part's programs), and a
  /// flat nest stays flat (no 2D tiles: the combo's XBLOCK is a flat block).
  void set_part() {
    pid_ = "pid";
    part_ = true;
  }
  /// `e` (an index expression over the kernel's size variables) as Python text.
  std::string index_text(const Expr& e) { return expr(e); }
  /// The kernel function's body, one statement per line at its indentation (after run()).
  const std::string& body() const { return body_; }

 private:
  /// Whether `index` (of a read of the product) is the nest's row-major element index.
  bool is_nest_element(const Expr& index) const;
  // --- expressions ---
  std::string expr(const Expr& e);
  std::string binary(const Expr& e);
  std::string load(const Load& l);
  /// `s` computed in f32 and rounded to `t` when `t` is f16 or bf16.
  std::string half_wrap(DType t, const std::string& s) const {
    return is_half(t) ? "(" + s + ").to(" + tl_dtype(t) + ")" : s;
  }
  std::string operand(const Expr& e) {
    std::string s = expr(e);
    return is_half(e.dtype()) ? "(" + s + ").to(tl.float32)" : s;
  }
  /// The mask a memory access uses here: the block's, and the Select arms it is under.
  std::string mask() const {
    std::string m;
    if (!block_mask_.empty()) m = block_mask_;
    if (m.empty()) m = row_mask_;  // a row tile's program level: its rows
    for (const std::string& g : guards_) m = m.empty() ? g : "(" + m + ") & (" + g + ")";
    return m;
  }

  // --- statements ---
  void line(const std::string& s) { lines_.push_back(std::string(indent_ * 4, ' ') + s); }
  /// Straight-line statements at program level (Rows) or in the flattened body (Flat).
  void stmt(const Stmt& s);
  /// An inner loop run as a loop over blocks.
  void block_loop(const For& f);
  /// A loop around one block loop that only folds lane-indexed arrays (a column reduction:
  /// `x.sum(0)`, a mean over H and W of a channels-last tensor) as 2D tiles: rows along axis 0,
  /// the block loop's lanes along axis 1, each tile reduced along axis 0 into the arrays. False
  /// (nothing emitted) for any other loop.
  bool column_tiles(const For& rows);
  void block_stmt(const Stmt& s, const std::string& rmask);
  /// The accumulators (buffer, index) of the loop body updated at an element that does not
  /// depend on the loop variable, in first-seen order.
  void collect_row_accumulators(const Stmt& s, const std::string& var);

  std::string fresh(const std::string& base) { return base + std::to_string(counter_++); }
  /// Temporaries ("t" and a number: the scheduler numbers them across a whole graph) are
  /// renumbered in the order this kernel first names them, so that kernels that differ only in
  /// those numbers have the same source (and are compiled once).
  std::string var_name(const std::string& n) const {
    const bool temporary =
        n.size() > 1 && n[0] == 't' && n.find_first_not_of("0123456789", 1) == std::string::npos;
    if (!temporary) return "v_" + n;
    auto [it, fresh] = temporaries_.try_emplace(n, "");
    if (fresh) it->second = "v_t" + std::to_string(temporaries_.size() - 1);
    return it->second;
  }
  static std::string buf_name(const std::string& n) { return "b_" + n; }

  /// Drops every store to a private buffer that the program never reads back from memory (its
  /// reads were all forwarded from registers), and lists those buffers in `out.unused_buffers`.
  void drop_private_stores(TritonKernel& out);

  const Kernel& k_;
  const bool row_tiles_;
  /// CompileOptions::Triton::persistent: row programs may be persistent (persistent_form).
  const bool persistent_allowed_;
  const std::vector<std::string> private_buffers_;
  std::string product_;  ///< set_epilogue
  std::string pid_ = "tl.program_id(0)";
  bool part_ = false;  ///< set_part
  /// The flat nest's loop variables and their row-major weights (an epilogue's check).
  std::vector<std::pair<std::string, int64_t>> nest_weights_;
  std::string body_;
  /// Rows form: rows per program. Above 1 (a row tile), the row loops' variables are [rows, 1]
  /// blocks, masked by `row_mask_`, block loops run over [rows, RBLOCK] blocks and reduce along
  /// axis 1 (the prelude's `_rows` helpers).
  int rows_ = 1;
  std::string row_mask_;
  /// In a row tile's block loop: the block variables of the program level (rows, their Lets).
  std::set<std::string> row_level_vars_;
  /// A row tile's block masks -> their lanes' part alone ([1, RBLOCK]): what a load that does
  /// not vary with the row (a layer norm's weight) is masked by.
  std::map<std::string, std::string> lane_masks_;
  /// The shape of a block: "[RBLOCK]", or "[XBLOCK, RBLOCK]" in a row tile.
  std::string block_shape() const { return rows_ > 1 ? "[XBLOCK, RBLOCK]" : "[RBLOCK]"; }
  /// rows_per_program for a row program over `rows` (constant, or 1) with body `rest`.
  int rows_per_program(const Expr& rows, const Stmt& rest) const {
    const Expr simple = simplify(rows);  // held: `as` points into it
    const auto* n = simple.as<IntImm>();
    return n == nullptr ? 1 : triton_shape::rows_per_program(n->value, persistent_extent(rest));
  }
  void refuse_in_row_tile(const std::string& what) const {
    if (rows_ > 1) refuse(what + " in a row tile");
  }
  std::vector<std::string> lines_;  ///< the kernel body; an emptied line is a dropped store
  int indent_ = 1;
  int counter_ = 0;
  mutable std::map<std::string, std::string> temporaries_;  ///< see var_name
  std::string block_mask_;            ///< the current block's mask ("" at scalar level)
  std::vector<std::string> guards_;   ///< Select conditions the current expression is under
  std::vector<bool> guard_is_block_;  ///< whether each guard depends on a block variable
  std::set<std::string> block_vars_;  ///< variables that are blocks (loop variables, their Lets)
  std::map<std::string, std::string> scalars_;  ///< one-element Allocates -> their variable
  std::map<std::string, DType> scalar_types_;
  /// Allocates of up to kMaxArray elements whose every access is at the index of the current
  /// block loop (min 0): one block variable, lane i holding element i.
  std::map<std::string, std::string> arrays_;
  std::map<std::string, DType> array_types_;
  std::string block_var_;  ///< the current block loop's variable ("" at scalar level)
  bool block_min_zero_ = false;
  /// The array element `index` addresses: the current block loop's lane. Refuses others.
  void require_lane_index(const std::string& buffer, const Expr& index) const {
    const auto* v = index.as<Var>();
    if (v == nullptr || v->name != block_var_ || !block_min_zero_) {
      refuse("an access to allocation " + buffer + " that is not at the block loop's index");
    }
  }
  struct RowAcc {
    ReduceOp op;
    std::string buffer;
    Expr index;
    std::string block;  ///< the block variable of partials
    DType dtype;
    // ArgMax/ArgMin: the index accumulator (an i64 buffer) and its block.
    std::string index_buffer;
    std::string index_block;
  };
  /// The two-buffer (value, index) accumulators of argmax/argmin, folded with the candidate
  /// (cv, ci) where `take` holds.
  void arg_update(bool larger, const std::string& v, const std::string& i, const std::string& cv,
                  const std::string& ci, const std::string& extra_mask) {
    std::string take = std::string("_ember_arg_take(") + v + ", " + i + ", " + cv + ", " + ci +
                       ", " + (larger ? "True" : "False") + ")";
    if (!extra_mask.empty()) take = "(" + take + ") & (" + extra_mask + ")";
    std::string t = fresh("take");
    line(t + " = " + take);
    line(v + " = tl.where(" + t + ", " + cv + ", " + v + ")");
    line(i + " = tl.where(" + t + ", " + ci + ", " + i + ")");
  }
  /// Reads/writes an accumulator element: a scalar variable or memory.
  std::string acc_read(const std::string& buffer, const Expr& index) {
    if (auto it = scalars_.find(buffer); it != scalars_.end()) return it->second;
    refuse_in_row_tile("an accumulator in memory");
    pending_stores_.erase(buffer);
    return scalar_load(buffer, expr(index), "");
  }
  void acc_write(const std::string& buffer, const Expr& index, const std::string& value) {
    if (auto it = scalars_.find(buffer); it != scalars_.end()) {
      line(it->second + " = " + value);
    } else {
      refuse_in_row_tile("an accumulator in memory");
      load_cache_.erase(buffer);
      scalar_store(buffer, expr(index), value);
    }
  }
  /// One element of `buffer` read by the whole program: the value the program stored there, or a
  /// load (after a barrier if the program wrote the buffer; see triton_memory_order.h).
  std::string scalar_load(const std::string& buffer, const std::string& index,
                          const std::string& mask_args) {
    if (std::string v = memory_.forwarded(buffer, index); !v.empty()) return v;
    sync_before_read(buffer);
    return "tl.load(" + buf_name(buffer) + " + (" + index + ")" + mask_args + ")";
  }
  /// Stores one element at program level, keeping the value for later reads of it.
  void scalar_store(const std::string& buffer, const std::string& index, const std::string& value) {
    std::string v = fresh("sv");
    // tl.cast, not .to(): the value may be a Python literal (an identity, a constant).
    line(v + " = tl.cast(" + value + ", " + tl_dtype(buffer_dtype(buffer)) + ")");
    line("tl.store(" + buf_name(buffer) + " + (" + index + "), " + v + ")");
    memory_.wrote(buffer, index, v);
  }
  void sync_before_read(const std::string& buffer) {
    if (memory_.barrier_before_read(buffer)) line("tl.debug_barrier()");
  }
  DType buffer_dtype(const std::string& buffer) const {
    for (const BufferParam& b : k_.buffers) {
      if (b.name == buffer) return b.dtype;
    }
    refuse("a store to " + buffer + ", which is not a buffer argument");
  }
  ProgramMemory memory_;
  std::vector<RowAcc> row_accs_;
  /// Appended to program ids and aranges: i64 unless every index provably fits in i32
  /// (int32_indices).
  std::string index_cast_ = ".to(tl.int64)";
  /// Every block loop fits one block (persistent_form): no loops, loads reused.
  bool persistent_ = false;
  /// Flat and tiled forms: each distinct block load is done once, into a variable (a pointwise
  /// body that names an input twice, such as gelu's x * (1 + erf(x)), loads it once).
  bool reuse_block_loads_ = false;
  /// A flat kernel whose nest has one element: stores at constant addresses are one lane's.
  bool one_element_ = false;
  std::map<std::string, std::pair<std::string, std::string>> persistent_lanes_;
  std::map<std::string, std::map<std::string, std::string>> load_cache_;  ///< buffer -> load
  /// Persistent rows: stores not yet read from memory, per buffer (load text -> line index).
  std::map<std::string, std::map<std::string, size_t>> pending_stores_;
  Expr block_extent_;
  Expr array_extent_;  ///< the largest array allocation (RBLOCK covers it)
};

}  // namespace ember::codegen::triton_detail
