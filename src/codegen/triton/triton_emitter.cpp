#include "codegen/triton/triton_emitter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "codegen/triton/triton_kernel_shape.h"
#include "codegen/triton/triton_memory_order.h"
#include "codegen/triton/triton_prelude.h"
#include "support/error.h"

namespace ember::codegen {

using namespace loop;
using namespace triton_shape;

namespace {

/// Why a kernel has no Triton form; caught by emit_triton.
struct NoTritonForm {
  std::string why;
};

[[noreturn]] void refuse(const std::string& why) {
  throw NoTritonForm{why};
}

const char* tl_dtype(DType t) {
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

bool is_half(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}

/// Float literal text that round-trips (Triton takes a Python float as f32 beside an f32 block).
std::string float_text(double v) {
  if (std::isnan(v)) return "float(\"nan\")";
  if (std::isinf(v)) return v > 0 ? "float(\"inf\")" : "float(\"-inf\")";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

const char* call_text(CallFn fn) {
  switch (fn) {
    case CallFn::Abs:
      return "tl.abs";
    case CallFn::Exp:
      return "libdevice.exp";
    case CallFn::Exp2:
      return "libdevice.exp2";
    case CallFn::Log:
      return "libdevice.log";
    case CallFn::Log2:
      return "libdevice.log2";
    case CallFn::Sqrt:
      return "tl.sqrt_rn";
    case CallFn::Rsqrt:
      return "tl.rsqrt";
    case CallFn::Sin:
      return "libdevice.sin";
    case CallFn::Cos:
      return "libdevice.cos";
    case CallFn::Erf:
      return "libdevice.erf";
    case CallFn::Floor:
      return "tl.floor";
    case CallFn::Ceil:
      return "tl.ceil";
    case CallFn::Expm1:
      return "libdevice.expm1";
    case CallFn::Log10:
      return "libdevice.log10";
    case CallFn::Log1p:
      return "libdevice.log1p";
    case CallFn::Tan:
      return "libdevice.tan";
    case CallFn::Asin:
      return "libdevice.asin";
    case CallFn::Acos:
      return "libdevice.acos";
    case CallFn::Atan:
      return "libdevice.atan";
    case CallFn::Sinh:
      return "libdevice.sinh";
    case CallFn::Cosh:
      return "libdevice.cosh";
    case CallFn::Tanh:
      return "libdevice.tanh";
    case CallFn::Asinh:
      return "libdevice.asinh";
    case CallFn::Acosh:
      return "libdevice.acosh";
    case CallFn::Atanh:
      return "libdevice.atanh";
    case CallFn::Erfc:
      return "libdevice.erfc";
    case CallFn::Round:
      return "libdevice.nearbyint";
    case CallFn::Trunc:
      return "libdevice.trunc";
    case CallFn::Pow:
      return "libdevice.pow";
    case CallFn::Atan2:
      return "libdevice.atan2";
    case CallFn::Fmod:
      return "libdevice.fmod";
    default:
      return nullptr;
  }
}

/// What reduce helper and identity an accumulator op uses.
struct ReduceText {
  const char* combine;  ///< a jit helper taking (a, b)
  const char* reduce;   ///< a jit helper taking (block) -> scalar
};

ReduceText reduce_text(ReduceOp op) {
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
  explicit Emitter(const Kernel& k) : k_(k) {}

  TritonKernel run();

 private:
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
    for (const std::string& g : guards_) m = m.empty() ? g : "(" + m + ") & (" + g + ")";
    return m;
  }

  // --- statements ---
  void line(const std::string& s) { lines_.push_back(std::string(indent_ * 4, ' ') + s); }
  /// Straight-line statements at program level (Rows) or in the flattened body (Flat).
  void stmt(const Stmt& s);
  /// An inner loop run as a loop over blocks.
  void block_loop(const For& f);
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

  const Kernel& k_;
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
    pending_stores_.erase(buffer);
    return scalar_load(buffer, expr(index), "");
  }
  void acc_write(const std::string& buffer, const Expr& index, const std::string& value) {
    if (auto it = scalars_.find(buffer); it != scalars_.end()) {
      line(it->second + " = " + value);
    } else {
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
  std::map<std::string, std::pair<std::string, std::string>> persistent_lanes_;
  std::map<std::string, std::map<std::string, std::string>> load_cache_;  ///< buffer -> load
  /// Persistent rows: stores not yet read from memory, per buffer (load text -> line index).
  std::map<std::string, std::map<std::string, size_t>> pending_stores_;
  Expr block_extent_;
  Expr array_extent_;  ///< the largest array allocation (RBLOCK covers it)
};

std::string Emitter::expr(const Expr& e) {
  switch (e.kind()) {
    case ExprKind::IntImm: {
      const auto* i = e.as<IntImm>();
      if (e.dtype() == DType::Bool) return i->value != 0 ? "True" : "False";
      if (e.dtype() == DType::Int64) return std::to_string(i->value);
      return "tl.full([], " + std::to_string(i->value) + ", " + tl_dtype(e.dtype()) + ")";
    }
    case ExprKind::FloatImm: {
      double v = e.as<FloatImm>()->value;
      if (e.dtype() == DType::Float32) return float_text(v);
      if (is_half(e.dtype())) {  // exact in f32 (Triton's interpreter has no half constants)
        return "tl.full([], " + float_text(v) + ", tl.float32).to(" + tl_dtype(e.dtype()) + ")";
      }
      return "tl.full([], " + float_text(v) + ", " + tl_dtype(e.dtype()) + ")";
    }
    case ExprKind::Var: {
      const std::string& n = e.as<Var>()->name;
      return var_name(n);
    }
    case ExprKind::SizeVar:
      return "s_" + e.as<SizeVar>()->name;
    case ExprKind::Not:
      return "(" + expr(e.as<Not>()->a) + " == 0)";
    case ExprKind::Select: {
      const auto* s = e.as<Select>();
      std::string c = expr(s->cond);
      guards_.push_back(c);
      guard_is_block_.push_back(uses_any(s->cond, block_vars_));
      std::string t = expr(s->t);
      guards_.back() = "(" + c + ") == 0";
      std::string f = expr(s->f);
      guards_.pop_back();
      guard_is_block_.pop_back();
      return "tl.where(" + c + ", " + t + ", " + f + ")";
    }
    case ExprKind::Cast: {
      const auto* c = e.as<Cast>();
      if (e.dtype() == DType::Bool) return "(" + expr(c->value) + " != 0)";
      std::string v = expr(c->value);
      // An i64, f32 or bool immediate is a Python literal, which has no .to(): a typed scalar.
      if (c->value.as<IntImm>() || c->value.as<FloatImm>()) {
        if (v.rfind("tl.", 0) != 0)
          v = "tl.full([], " + v + ", " + tl_dtype(c->value.dtype()) + ")";
      }
      if (is_half(e.dtype()) && c->value.dtype() != DType::Float32) {
        // Through f32, as c10::Half and c10::BFloat16 convert (and Triton's interpreter
        // converts integers to halves wrongly).
        return "(" + v + ").to(tl.float32).to(" + tl_dtype(e.dtype()) + ")";
      }
      return "(" + v + ").to(" + tl_dtype(e.dtype()) + ")";
    }
    case ExprKind::Load:
      return load(*e.as<Load>());
    case ExprKind::Call: {
      const auto* c = e.as<Call>();
      std::vector<std::string> args;
      for (const Expr& a : c->args) args.push_back(operand(a));
      std::string s;
      switch (c->fn) {
        case CallFn::Neg:
          s = "(-" + args[0] + ")";
          break;
        case CallFn::Reciprocal:
          s = e.dtype() == DType::Float64 ? "(1.0 / " + args[0] + ")"
                                          : "tl.math.div_rn(1.0, " + args[0] + ")";
          break;
        case CallFn::Sigmoid:
          s = e.dtype() == DType::Float64 ? "(1.0 / (1.0 + tl.exp(-" + args[0] + ")))"
                                          : "tl.math.div_rn(1.0, 1.0 + tl.exp(-" + args[0] + "))";
          break;
        case CallFn::Sqrt:  // f32: sqrt_rn (tl.sqrt is approximate); f64: IEEE already
          s = std::string(e.dtype() == DType::Float64 ? "tl.sqrt(" : "tl.sqrt_rn(") + args[0] + ")";
          break;
        case CallFn::IsNan:
          return "(" + args[0] + " != " + args[0] + ")";
        case CallFn::IsInf:
          return "(tl.abs(" + args[0] + ") == float(\"inf\"))";
        default: {
          const char* f = call_text(c->fn);
          if (f == nullptr) refuse(std::string("the call ") + call_fn_name(c->fn));
          if (c->fn == CallFn::Abs && !is_float(e.dtype())) return "tl.abs(" + args[0] + ")";
          s = std::string(f) + "(" + args[0];
          for (size_t i = 1; i < args.size(); ++i) s += ", " + args[i];
          s += ")";
        }
      }
      return half_wrap(e.dtype(), s);
    }
    default:
      return binary(e);
  }
}

std::string Emitter::binary(const Expr& e) {
  auto two = [&](const auto* b) { return std::make_pair(operand(b->a), operand(b->b)); };
  switch (e.kind()) {
#define EMBER_ARITH(Name, Op)                                    \
  case ExprKind::Name: {                                         \
    auto [a, b] = two(e.as<BinaryNode<ExprKind::Name>>());       \
    return half_wrap(e.dtype(), "(" + a + " " Op " " + b + ")"); \
  }
    EMBER_ARITH(Add, "+")
    EMBER_ARITH(Sub, "-")
    EMBER_ARITH(Mul, "*")
#undef EMBER_ARITH
    case ExprKind::Div: {
      auto [a, b] = two(e.as<loop::Div>());
      // f32 division is approximate unless asked (div_rn); f64 division is IEEE already.
      if (e.dtype() == DType::Float64) return "(" + a + " / " + b + ")";
      return half_wrap(e.dtype(), "tl.math.div_rn(" + a + ", " + b + ")");
    }
    case ExprKind::FloorDiv: {
      auto [a, b] = two(e.as<FloorDiv>());
      return "_ember_floordiv(" + a + ", " + b + ")";
    }
    case ExprKind::Mod: {
      auto [a, b] = two(e.as<Mod>());
      return "_ember_mod(" + a + ", " + b + ")";
    }
    case ExprKind::Min:
    case ExprKind::Max: {
      const bool mx = e.kind() == ExprKind::Max;
      auto [a, b] = mx ? two(e.as<loop::Max>()) : two(e.as<loop::Min>());
      if (is_float(e.dtype())) {
        return half_wrap(e.dtype(),
                         std::string(mx ? "_ember_max(" : "_ember_min(") + a + ", " + b + ")");
      }
      return std::string(mx ? "tl.maximum(" : "tl.minimum(") + a + ", " + b + ")";
    }
#define EMBER_PLAIN(Name, Op)                              \
  case ExprKind::Name: {                                   \
    auto [a, b] = two(e.as<BinaryNode<ExprKind::Name>>()); \
    return "(" + a + " " Op " " + b + ")";                 \
  }
      EMBER_PLAIN(LT, "<")
      EMBER_PLAIN(LE, "<=")
      EMBER_PLAIN(EQ, "==")
      EMBER_PLAIN(NE, "!=")
      EMBER_PLAIN(And, "&")
      EMBER_PLAIN(Or, "|")
      EMBER_PLAIN(BitAnd, "&")
      EMBER_PLAIN(BitOr, "|")
      EMBER_PLAIN(BitXor, "^")
#undef EMBER_PLAIN
    default:
      refuse(std::string("the expression ") + expr_kind_name(e.kind()));
  }
}

std::string Emitter::load(const Load& l) {
  if (auto it = scalars_.find(l.buffer); it != scalars_.end()) return it->second;
  if (auto it = arrays_.find(l.buffer); it != arrays_.end()) {
    require_lane_index(l.buffer, l.index);
    return it->second;
  }
  std::string index = expr(l.index);
  if (!uses_any(l.index, block_vars_)) {
    pending_stores_.erase(l.buffer);  // read from memory: earlier stores to it stay
    // One element for the whole block: in bounds wherever the block's lanes are, so only the
    // Select arms it is under mask it. Triton masks a scalar address only with a scalar mask.
    bool block_guard = false;
    std::string g;
    for (size_t i = 0; i < guards_.size(); ++i) {
      block_guard = block_guard || guard_is_block_[i];
      g = g.empty() ? guards_[i] : "(" + g + ") & (" + guards_[i] + ")";
    }
    if (g.empty()) return scalar_load(l.buffer, index, "");
    if (!block_guard) return scalar_load(l.buffer, index, ", mask=" + g + ", other=0");
    return scalar_load(l.buffer, index + ") + ((" + g + ").to(tl.int64) * 0",
                       ", mask=" + g + ", other=0");
  }
  std::string m = mask();
  std::string addr = buf_name(l.buffer) + " + (" + index + ")";
  std::string text =
      m.empty() ? "tl.load(" + addr + ")" : "tl.load(" + addr + ", mask=" + m + ", other=0)";
  if (!persistent_ || m.empty()) {
    pending_stores_.erase(l.buffer);
    sync_before_read(l.buffer);
    return text;
  }
  // A persistent program loads each block once: the same load again (a later loop over the
  // row) reads the variable, until a store to that buffer.
  auto& cached = load_cache_[l.buffer];
  if (auto it = cached.find(text); it != cached.end()) return it->second;
  pending_stores_.erase(l.buffer);
  sync_before_read(l.buffer);
  std::string v = fresh("ld");
  line(v + " = " + text);
  cached.emplace(text, v);
  return v;
}

void Emitter::stmt(const Stmt& s) {
  switch (s.kind()) {
    case StmtKind::Block:
      for (const Stmt& c : s.as<Block>()->stmts) stmt(c);
      return;
    case StmtKind::Let: {
      const auto* l = s.as<Let>();
      const std::string& n = l->var.as<Var>()->name;
      if (!block_mask_.empty() || uses_any(l->value, block_vars_)) block_vars_.insert(n);
      line(var_name(n) + " = " + expr(l->value));
      stmt(l->body);
      return;
    }
    case StmtKind::Store: {
      const auto* st = s.as<Store>();
      std::string v = expr(st->value);
      if (auto it = scalars_.find(st->buffer); it != scalars_.end()) {
        line(it->second + " = " + v);
        return;
      }
      if (auto it = arrays_.find(st->buffer); it != arrays_.end()) {
        require_lane_index(st->buffer, st->index);
        line(it->second + " = tl.where(" + mask() + ", " + v + ", " + it->second + ")");
        return;
      }
      load_cache_.erase(st->buffer);
      std::string m = mask();
      const std::string index = expr(st->index);
      std::string addr = buf_name(st->buffer) + " + (" + index + ")";
      if (!m.empty() && !uses_any(st->index, block_vars_)) {
        refuse("a store of one element inside a block");
      }
      if (m.empty()) {
        scalar_store(st->buffer, index, v);
        return;
      }
      if (persistent_ && !m.empty()) {
        // A later load of what this stores (the same address and mask) reads the value.
        std::string sv = fresh("st");
        line(sv + " = " + v);
        std::string key = "tl.load(" + addr + ", mask=" + m + ", other=0)";
        // A store of the same elements earlier, with no read of the buffer from memory since,
        // is dead: this one overwrites all of it.
        auto& pending = pending_stores_[st->buffer];
        if (auto it = pending.find(key); it != pending.end()) lines_[it->second].clear();
        line("tl.store(" + addr + ", " + sv + ", mask=" + m + ")");
        memory_.wrote(st->buffer);
        pending[key] = lines_.size() - 1;
        load_cache_[st->buffer][key] = sv;
        return;
      }
      line("tl.store(" + addr + ", " + v + ", mask=" + m + ")");
      memory_.wrote(st->buffer);
      return;
    }
    case StmtKind::Allocate: {
      const auto* a = s.as<Allocate>();
      int64_t n = 1;
      for (const Expr& d : a->sizes) {
        const auto* i = d.as<IntImm>();
        if (i == nullptr) refuse("an allocation of symbolic size");
        n *= i->value;
      }
      if (!block_mask_.empty()) refuse("an allocation inside a block loop");
      std::string v = "a_" + a->buffer;
      if (n == 1) {
        scalars_[a->buffer] = v;
        scalar_types_[a->buffer] = a->dtype;
      } else {
        if (n > kMaxArray)
          refuse("an allocation of more than " + std::to_string(kMaxArray) + " elements");
        // Blocks are at least `n` wide (triton_launch picks RBLOCK from the block loops'
        // extents, which include the loops over this allocation).
        arrays_[a->buffer] = v;
        array_types_[a->buffer] = a->dtype;
        line(v + " = tl.full([RBLOCK], 0, " + tl_dtype(a->dtype) + ")");
        array_extent_ = array_extent_.defined()
                            ? make_binary(ExprKind::Max, array_extent_, IntImm::make(kIndexType, n))
                            : IntImm::make(kIndexType, n);
      }
      stmt(a->body);
      return;
    }
    case StmtKind::IfThenElse: {
      const auto* i = s.as<IfThenElse>();
      if (!block_mask_.empty() || uses_any(i->cond, block_vars_)) {
        refuse("a conditional on a block value");
      }
      // What a branch loads, stores or names is not known after it: no reuse across the if.
      auto forget = [&] {
        load_cache_.clear();
        pending_stores_.clear();
        persistent_lanes_.clear();
        memory_.forget();
      };
      std::string cond = expr(i->cond);
      forget();
      line("if " + cond + ":");
      ++indent_;
      stmt(i->then_case);
      line("pass");
      --indent_;
      forget();
      if (i->else_case.defined()) {
        line("else:");
        ++indent_;
        stmt(i->else_case);
        line("pass");
        --indent_;
        forget();
      }
      return;
    }
    case StmtKind::For: {
      if (!block_mask_.empty()) refuse("nested inner loops");
      const For& f = *s.as<For>();
      if (!has_loop(f.body)) {
        block_loop(f);
        return;
      }
      // A loop around block loops (a column reduction's rows): a serial loop of scalars.
      const std::string v = var_name(f.var.as<Var>()->name);
      const std::string mn = expr(f.min);
      line("for " + v + " in range(" + mn + ", " + mn + " + " + expr(f.extent) + "):");
      ++indent_;
      memory_.enter_loop();
      stmt(f.body);
      memory_.exit_loop();
      line("pass");
      --indent_;
      return;
    }
    case StmtKind::Accumulate: {
      // A program-level Accumulate (no inner loop): one value folded in.
      const auto* a = s.as<Accumulate>();
      if ((a->op == ReduceOp::ArgMax || a->op == ReduceOp::ArgMin) && block_mask_.empty()) {
        std::string cv = fresh("cv"), ci = fresh("ci");
        line(cv + " = " + acc_read(a->buffers[0], a->index));
        line(ci + " = " + acc_read(a->buffers[1], a->index));
        arg_update(a->op == ReduceOp::ArgMax, cv, ci, expr(a->values[0]), expr(a->values[1]), "");
        acc_write(a->buffers[0], a->index, cv);
        acc_write(a->buffers[1], a->index, ci);
        return;
      }
      ReduceText r = reduce_text(a->op);
      std::string v = expr(a->values[0]);
      const std::string& b = a->buffers[0];
      if (auto it = scalars_.find(b); it != scalars_.end()) {
        line(it->second + " = " +
             half_wrap(scalar_types_[b],
                       std::string(r.combine) + "(" + it->second + ", " + v + ")"));
        return;
      }
      if (auto it = arrays_.find(b); it != arrays_.end()) {
        require_lane_index(b, a->index);
        line(
            it->second + " = tl.where(" + mask() + ", " +
            half_wrap(array_types_[b], std::string(r.combine) + "(" + it->second + ", " + v + ")") +
            ", " + it->second + ")");
        return;
      }
      std::string m = mask();
      if (m.empty()) {
        acc_write(b, a->index,
                  std::string(r.combine) + "(" + acc_read(b, a->index) + ", " + v + ")");
        return;
      }
      load_cache_.erase(b);
      std::string addr = buf_name(b) + " + (" + expr(a->index) + ")";
      std::string mk = ", mask=" + m;
      pending_stores_.erase(b);
      sync_before_read(b);
      line("tl.store(" + addr + ", " + r.combine + "(tl.load(" + addr + mk + "), " + v + ")" + mk +
           ")");
      memory_.wrote(b);
      return;
    }
  }
}

void Emitter::collect_row_accumulators(const Stmt& s, const std::string& var) {
  switch (s.kind()) {
    case StmtKind::Block:
      for (const Stmt& c : s.as<Block>()->stmts) collect_row_accumulators(c, var);
      return;
    case StmtKind::Let:
      collect_row_accumulators(s.as<Let>()->body, var);
      return;
    case StmtKind::Accumulate: {
      const auto* a = s.as<Accumulate>();
      const bool arg = a->op == ReduceOp::ArgMax || a->op == ReduceOp::ArgMin;
      if (a->buffers.size() != 1 && !arg) {
        refuse(std::string("the ") + reduce_op_name(a->op) + " reduction");
      }
      if (uses_any(a->index, {var}) || uses_any(a->index, block_vars_)) {
        if (arg) refuse("an elementwise " + std::string(reduce_op_name(a->op)));
        return;  // elementwise
      }
      for (const RowAcc& r : row_accs_) {
        if (r.buffer == a->buffers[0] && r.op == a->op) return;  // one block per accumulator
      }
      DType t = a->values[0].dtype();
      RowAcc r{a->op, a->buffers[0], a->index, fresh("acc"), t, "", ""};
      if (arg) {
        r.index_buffer = a->buffers[1];
        r.index_block = fresh("acci");
      }
      row_accs_.push_back(r);
      return;
    }
    default:
      return;
  }
}

void Emitter::block_loop(const For& f) {
  const std::string& var = f.var.as<Var>()->name;
  row_accs_.clear();
  collect_row_accumulators(f.body, var);
  std::string ext = fresh("ext");
  line(ext + " = " + expr(f.extent));
  for (const RowAcc& r : row_accs_) {
    line(r.block + " = tl.full([RBLOCK], " + expr(reduction_identity(r.op, 0, r.dtype)) + ", " +
         tl_dtype(r.dtype) + ")");
    if (!r.index_block.empty()) {
      line(r.index_block + " = tl.full([RBLOCK], " +
           expr(reduction_identity(r.op, 1, DType::Int64)) + ", tl.int64)");
    }
  }
  std::string rmask, off;
  if (persistent_) {
    // One block holds the whole loop: no loop, and lanes and masks shared by every loop of
    // this extent, so that their loads are the same expressions (load()'s cache).
    std::string key = expr(f.extent);
    auto [it, added] = persistent_lanes_.emplace(key, std::make_pair(std::string(), std::string()));
    if (added) {
      it->second = {fresh("roff"), fresh("rmask")};
      line(it->second.first + " = tl.arange(0, RBLOCK)" + index_cast_);
      line(it->second.second + " = " + it->second.first + " < " + ext);
    }
    off = it->second.first;
    rmask = it->second.second;
    ++indent_;  // balanced below; persistent code keeps the program's indentation
    --indent_;
  } else {
    std::string r0 = fresh("r");
    rmask = fresh("rmask");
    line("for " + r0 + " in range(0, " + ext + ", RBLOCK):");
    ++indent_;
    memory_.enter_loop();
    off = fresh("roff");
    line(off + " = " + r0 + " + tl.arange(0, RBLOCK)" + index_cast_);
    line(rmask + " = " + off + " < " + ext);
  }
  block_vars_.insert(var);
  line(var_name(var) + " = " + expr(f.min) + " + " + off);
  block_mask_ = rmask;
  block_var_ = var;
  const auto* mn = f.min.as<IntImm>();
  block_min_zero_ = mn != nullptr && mn->value == 0;
  block_stmt(f.body, rmask);
  block_mask_.clear();
  block_var_.clear();
  if (!persistent_) {
    memory_.exit_loop();
    --indent_;
  }
  for (const RowAcc& r : row_accs_) {
    if (!r.index_block.empty()) {
      const bool larger = r.op == ReduceOp::ArgMax;
      std::string rv = fresh("rv"), ri = fresh("ri");
      line(rv + ", " + ri + " = tl.reduce((" + r.block + ", " + r.index_block + "), 0, " +
           (larger ? "_ember_argmax_pair" : "_ember_argmin_pair") + ")");
      std::string cv = fresh("cv"), ci = fresh("ci");
      line(cv + " = " + acc_read(r.buffer, r.index));
      line(ci + " = " + acc_read(r.index_buffer, r.index));
      arg_update(larger, cv, ci, rv, ri, "");
      acc_write(r.buffer, r.index, cv);
      acc_write(r.index_buffer, r.index, ci);
      continue;
    }
    ReduceText t = reduce_text(r.op);
    std::string red = std::string(t.reduce) + "(" + r.block + ")";
    if (auto it = scalars_.find(r.buffer); it != scalars_.end()) {
      line(it->second + " = " +
           half_wrap(scalar_types_[r.buffer],
                     std::string(t.combine) + "(" + it->second + ", " + red + ")"));
    } else {
      acc_write(r.buffer, r.index,
                std::string(t.combine) + "(" + acc_read(r.buffer, r.index) + ", " + red + ")");
    }
  }
  row_accs_.clear();
  // The extent that picks RBLOCK: the longest inner loop (a Max over the kernel's loops). An
  // extent over loop variables (a tile's) is bounded by the arrays it walks.
  if (uses_any(f.extent, {}, true)) {
    if (!array_extent_.defined()) refuse("an inner loop whose extent depends on a loop variable");
  } else {
    block_extent_ =
        block_extent_.defined() ? make_binary(ExprKind::Max, block_extent_, f.extent) : f.extent;
  }
}

void Emitter::block_stmt(const Stmt& s, const std::string& rmask) {
  if (s.kind() == StmtKind::Accumulate) {
    const auto* a = s.as<Accumulate>();
    for (const RowAcc& r : row_accs_) {
      if (r.buffer != a->buffers[0] || r.op != a->op) continue;
      if (!r.index_block.empty()) {
        std::string cv = fresh("cand"), ci = fresh("candi");
        line(cv + " = " + expr(a->values[0]));
        line(ci + " = " + expr(a->values[1]));
        arg_update(a->op == ReduceOp::ArgMax, r.block, r.index_block, cv, ci, mask());
        return;
      }
      ReduceText t = reduce_text(a->op);
      std::string v = expr(a->values[0]);
      std::string m = mask();
      std::string id = expr(reduction_identity(a->op, 0, r.dtype));
      line(r.block + " = " +
           half_wrap(r.dtype, std::string(t.combine) + "(" + r.block + ", tl.where(" + m + ", " +
                                  v + ", " + id + "))"));
      return;
    }
    stmt(s);  // elementwise: each lane its own element
    return;
  }
  if (s.kind() == StmtKind::Block) {
    for (const Stmt& c : s.as<Block>()->stmts) block_stmt(c, rmask);
    return;
  }
  if (s.kind() == StmtKind::Let) {
    const auto* l = s.as<Let>();
    block_vars_.insert(l->var.as<Var>()->name);
    line(var_name(l->var.as<Var>()->name) + " = " + expr(l->value));
    block_stmt(l->body, rmask);
    return;
  }
  stmt(s);
}

Expr product(const std::vector<const For*>& loops) {
  Expr p = IntImm::make(kIndexType, 1);
  for (const For* f : loops) p = make_binary(ExprKind::Mul, p, f->extent);
  return p;
}

TritonKernel Emitter::run() {
  TritonKernel out;
  out.name = "ember_" + k_.name;
  if (int32_indices(k_)) index_cast_.clear();
  std::vector<const For*> nest;
  Stmt inner = k_.body;
  while (const For* f = inner.as<For>()) {
    nest.push_back(f);
    inner = f->body;
  }
  const bool flat = !nest.empty() && straight(inner, false);
  std::vector<const For*> rows = nest;
  Stmt rest = inner;
  if (!flat && !nest.empty() && straight(inner, true)) {
    // The innermost loop of the nest reduces: it runs as the block loop of each program.
    rows.pop_back();
    rest = k_.body;
    for (size_t i = 0; i < rows.size(); ++i) rest = rest.as<For>()->body;
  }
  auto decompose = [&](const std::vector<const For*>& loops, const std::string& linear) {
    // Outermost slowest: peel the innermost loop first.
    line("rem = " + linear);
    for (size_t i = loops.size(); i-- > 0;) {
      const For& f = *loops[i];
      std::string v = var_name(f.var.as<Var>()->name);
      std::string ext = expr(f.extent);
      std::string mn = expr(f.min);
      if (i == 0) {
        line(v + " = " + mn + " + rem");
      } else {
        line(v + " = " + mn + " + rem % (" + ext + ")");
        line("rem = rem // (" + ext + ")");
      }
    }
  };
  if (flat) {
    out.form = TritonKernel::Form::Flat;
    out.block_param = "XBLOCK";
    Expr total = product(nest);
    if (index_cast_.empty() && eval_expr(total, EvalEnv{}).i >= (int64_t{1} << 30)) {
      index_cast_ = ".to(tl.int64)";  // the flattened nest itself is too long for i32
    }
    line("lin = tl.program_id(0)" + index_cast_ + " * XBLOCK + tl.arange(0, XBLOCK)" + index_cast_);
    line("xmask = lin < (" + expr(total) + ")");
    for (const For* f : nest) block_vars_.insert(f->var.as<Var>()->name);
    decompose(nest, "lin");
    block_mask_ = "xmask";
    stmt(inner);
    block_mask_.clear();
    out.grid_extent = total;
    out.block_extent = total;
  } else {
    out.form = TritonKernel::Form::Rows;
    out.block_param = "RBLOCK";
    persistent_ = persistent_form(rest);
    if (persistent_) out.max_block = static_cast<int>(kMaxPersistent);
    if (!rows.empty()) decompose(rows, "tl.program_id(0)" + index_cast_);
    stmt(rest);
    out.grid_extent = product(rows);
    Expr extent = block_extent_.defined() ? block_extent_ : IntImm::make(kIndexType, 1);
    if (array_extent_.defined()) extent = make_binary(ExprKind::Max, extent, array_extent_);
    out.block_extent = extent;
  }
  out.int32_indices = index_cast_.empty();
  std::ostringstream src;
  src << kTritonPrelude << "\n\n@triton.jit\ndef " << out.name << "(";
  bool first = true;
  for (const BufferParam& b : k_.buffers) {
    src << (first ? "" : ", ") << buf_name(b.name);
    first = false;
  }
  for (const std::string& s : k_.size_vars) {
    src << (first ? "" : ", ") << "s_" << s;
    first = false;
  }
  src << (first ? "" : ", ") << out.block_param << ": tl.constexpr):\n";
  std::string body;
  for (const std::string& l : lines_) {
    if (!l.empty()) body += l + "\n";
  }
  src << (body.empty() ? "    pass\n" : body);
  out.source = src.str();
  return out;
}

}  // namespace

std::optional<TritonKernel> emit_triton(const Kernel& k, std::string* why) {
  try {
    Emitter e(k);
    return e.run();
  } catch (const NoTritonForm& n) {
    if (why != nullptr) *why = n.why;
    return std::nullopt;
  }
}

int triton_block_size(int64_t extent, int max_block) {
  int b = 16;
  while (b < extent && b < max_block) b *= 2;
  return b;
}

TritonLaunch triton_launch(const TritonKernel& k, const Bindings& sizes) {
  EvalEnv env;
  env.sizes = sizes;
  const int64_t extent = eval_expr(k.block_extent, env).i;
  const int64_t grid = eval_expr(k.grid_extent, env).i;
  TritonLaunch l;
  l.block = triton_block_size(extent, k.max_block);
  l.programs = k.form == TritonKernel::Form::Flat ? (grid + l.block - 1) / l.block : grid;
  return l;
}

}  // namespace ember::codegen
