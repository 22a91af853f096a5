#include "codegen/triton/triton_emitter.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "codegen/triton/triton_emitter_internal.h"
#include "codegen/triton/triton_prelude.h"
#include "loop/collapse.h"

namespace ember::codegen {

namespace triton_detail {

namespace {

/// Whether `s` is a Python name (a variable or True/False), not an expression.
bool is_name(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') return false;
  }
  return true;
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

}  // namespace

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
      // The condition masks every read under either arm, so its text would be repeated in
      // each of them, and a nested Select's condition holds such reads in turn: text growing
      // exponentially with the nesting (a float floor_divide, lowered as nested Selects around
      // reads of a scalar, gave 73 MB of source). Named once, it is a name in each mask.
      if (!is_name(c)) {
        std::string g = fresh("sel");
        line(g + " = " + c);
        c = g;
      }
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
        case CallFn::CheckIndex:  // tl.device_assert: the kernel compiles with debug on
          return "_ember_check_index(" + args[0] + ", " + args[1] + ", " + args[2] + ")";
        default: {
          const char* f = call_text(c->fn);
          if (f == nullptr) refuse(std::string("the call ") + call_fn_name(c->fn));
          if (c->fn == CallFn::Abs && !is_float(e.dtype())) return "tl.abs(" + args[0] + ")";
          // libdevice takes tensors: a literal operand (pow.Scalar's base) as a typed scalar.
          for (size_t i = 0; i < args.size(); ++i) {
            if ((c->args[i].as<FloatImm>() || c->args[i].as<IntImm>()) &&
                args[i].rfind("tl.", 0) != 0) {
              args[i] = "tl.full([], " + args[i] + ", " + tl_dtype(c->args[i].dtype()) + ")";
            }
          }
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
  if (!product_.empty() && l.buffer == product_) {
    if (!is_nest_element(l.index)) refuse("a read of the product at another element");
    return "acc_c";
  }
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
  if (rows_ > 1 && !block_var_.empty() && guards_.empty()) {
    // In a row tile's block loop, an element per row (a row's mean that the program stored) is
    // a [rows, 1] load at the program's level, as a one-row program reads a scalar: the stored
    // value itself when the program wrote it (forwarded below, no barrier).
    std::set<std::string> loop_vars;
    for (const std::string& v : block_vars_) {
      if (row_level_vars_.count(v) == 0) loop_vars.insert(v);
    }
    if (!uses_any(l.index, loop_vars)) {
      m = row_mask_;
    } else if (auto it = lane_masks_.find(block_mask_);
               it != lane_masks_.end() && !uses_any(l.index, row_level_vars_)) {
      m = it->second;  // the same for every row: one [1, RBLOCK] load
    }
  }
  std::string addr = buf_name(l.buffer) + " + (" + index + ")";
  std::string text =
      m.empty() ? "tl.load(" + addr + ")" : "tl.load(" + addr + ", mask=" + m + ", other=0)";
  if ((!persistent_ && !reuse_block_loads_) || m.empty()) {
    pending_stores_.erase(l.buffer);
    sync_before_read(l.buffer);
    return text;
  }
  // A persistent program loads each block once: the same load again (a later loop over the
  // row) reads the variable, until a store to that buffer. So does a flat or tiled program.
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
        if (!one_element_) refuse("a store of one element inside a block");
        // A flat kernel of one element (a 0-dim result: a loss scaled, an optimizer's step
        // count): one lane is active, so the store broadcast over the block writes once.
        addr += " + 0 * lin";
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
        line(v + " = tl.full(" + block_shape() + ", 0, " + tl_dtype(a->dtype) + ")");
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
      refuse_in_row_tile("a loop around block loops");
      if (column_tiles(f)) return;
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
        refuse_in_row_tile("an argmax");
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
      refuse_in_row_tile("an accumulator in memory");
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

Expr product(const std::vector<const For*>& loops) {
  Expr p = IntImm::make(kIndexType, 1);
  for (const For* f : loops) p = make_binary(ExprKind::Mul, p, f->extent);
  return p;
}

TritonKernel Emitter::run() {
  TritonKernel out;
  out.name = "ember_" + k_.name;
  out.size_vars = k_.size_vars;
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
  std::optional<size_t> tiled_with;
  if (!product_.empty()) {
    // An epilogue: the template's tile is the nest's elements, in row-major order.
    if (!flat) refuse("an epilogue that is not a pointwise nest");
    int64_t weight = 1;
    for (size_t i = nest.size(); i-- > 0;) {
      const auto* mn = nest[i]->min.as<IntImm>();
      const auto* ext = nest[i]->extent.as<IntImm>();
      if (mn == nullptr || ext == nullptr || mn->value != 0)
        refuse("an epilogue of symbolic loops");
      nest_weights_.emplace_back(nest[i]->var.as<Var>()->name, weight);
      weight *= ext->value;
    }
  }
  if (flat && product_.empty() && !part_ && index_cast_.empty() && nest.size() >= 2) {
    std::vector<std::string> vars;
    bool constant = true;
    for (const For* f : nest) {
      vars.push_back(f->var.as<Var>()->name);
      constant = constant && f->extent.as<IntImm>() != nullptr && f->min.as<IntImm>() != nullptr;
    }
    tiled_with = constant ? transposed_read_loop(vars, inner) : std::nullopt;
    if (tiled_with && (nest.back()->extent.as<IntImm>()->value < kMinTile ||
                       nest[*tiled_with]->extent.as<IntImm>()->value < kMinTile)) {
      tiled_with.reset();
    }
  }
  if (tiled_with) {
    // 2D tiles: the innermost loop along axis 1 (the stores' contiguous dim), the transposing
    // read's contiguous loop along axis 0, the other loops one scalar each per program.
    out.form = TritonKernel::Form::Tiled;
    out.block_param = "XBLOCK";
    out.max_block = kTile;
    const For& cols = *nest.back();
    const For& rows_loop = *nest[*tiled_with];
    std::vector<const For*> others;
    for (size_t i = 0; i + 1 < nest.size(); ++i) {
      if (i != *tiled_with) others.push_back(nest[i]);
    }
    const std::string nc = "((" + expr(cols.extent) + " + XBLOCK - 1) // XBLOCK)";
    const std::string nr = "((" + expr(rows_loop.extent) + " + XBLOCK - 1) // XBLOCK)";
    line("pid = tl.program_id(0)");
    line("tcol = pid % " + nc);
    line("trow = (pid // " + nc + ") % " + nr);
    if (!others.empty()) decompose(others, "pid // (" + nc + " * " + nr + ")");
    const std::string vc = var_name(cols.var.as<Var>()->name);
    const std::string vr = var_name(rows_loop.var.as<Var>()->name);
    line(vc + " = " + expr(cols.min) + " + tcol * XBLOCK + tl.arange(0, XBLOCK)[None, :]");
    line(vr + " = " + expr(rows_loop.min) + " + trow * XBLOCK + tl.arange(0, XBLOCK)[:, None]");
    line("xmask = (" + vc + " < " + expr(cols.min) + " + " + expr(cols.extent) + ") & (" + vr +
         " < " + expr(rows_loop.min) + " + " + expr(rows_loop.extent) + ")");
    block_vars_.insert(cols.var.as<Var>()->name);
    block_vars_.insert(rows_loop.var.as<Var>()->name);
    block_mask_ = "xmask";
    reuse_block_loads_ = true;
    stmt(inner);
    block_mask_.clear();
    out.grid_extent = product(others);
    out.tile_cols = cols.extent;
    out.tile_rows = rows_loop.extent;
    out.block_extent = make_binary(ExprKind::Max, cols.extent, rows_loop.extent);
  } else if (flat) {
    out.form = TritonKernel::Form::Flat;
    out.block_param = "XBLOCK";
    Expr total = product(nest);
    if (index_cast_.empty() && eval_expr(total, EvalEnv{}).i >= (int64_t{1} << 30)) {
      index_cast_ = ".to(tl.int64)";  // the flattened nest itself is too long for i32
    }
    if (product_.empty()) {  // an epilogue's lin and xmask are the template's
      line("lin = " + pid_ + index_cast_ + " * XBLOCK + tl.arange(0, XBLOCK)" + index_cast_);
      line("xmask = lin < (" + expr(total) + ")");
    }
    for (const For* f : nest) block_vars_.insert(f->var.as<Var>()->name);
    decompose(nest, "lin");
    block_mask_ = "xmask";
    reuse_block_loads_ = true;
    // (i32 indices: the sizes are constant, so the nest's length evaluates.)
    one_element_ = index_cast_.empty() && product_.empty() && eval_expr(total, EvalEnv{}).i == 1;
    stmt(inner);
    one_element_ = false;
    block_mask_.clear();
    out.grid_extent = total;
    out.block_extent = total;
  } else {
    out.form = TritonKernel::Form::Rows;
    out.block_param = "RBLOCK";
    persistent_ = persistent_allowed_ && persistent_form(rest);
    if (persistent_) out.max_block = static_cast<int>(kMaxPersistent);
    if (persistent_ && row_tiles_ && !rows.empty()) rows_ = rows_per_program(product(rows), rest);
    if (rows_ > 1) {
      // A row tile: rows [p * XBLOCK, (p + 1) * XBLOCK) as an [XBLOCK, 1] block, the rows past
      // the end masked; XBLOCK is a constexpr the launcher tunes (rows_per_program its default).
      line("prow = " + pid_ + index_cast_ + " * XBLOCK + tl.arange(0, XBLOCK)" + index_cast_ +
           "[:, None]");
      line("pmask = prow < (" + expr(product(rows)) + ")");
      row_mask_ = "pmask";
      for (const For* f : rows) block_vars_.insert(f->var.as<Var>()->name);
      decompose(rows, "prow");
    } else if (!rows.empty()) {
      decompose(rows, pid_ + index_cast_);
    }
    stmt(rest);
    out.grid_extent = product(rows);  // rows; a row tile's programs: triton_programs
    out.rows_per_program = rows_;
    if (rows_ > 1) out.rows_param = "XBLOCK";
    Expr extent = block_extent_.defined() ? block_extent_ : IntImm::make(kIndexType, 1);
    if (array_extent_.defined()) extent = make_binary(ExprKind::Max, extent, array_extent_);
    out.block_extent = extent;
  }
  out.int32_indices = index_cast_.empty();
  drop_private_stores(out);
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
  src << (first ? "" : ", ") << out.block_param << ": tl.constexpr";
  if (!out.rows_param.empty()) src << ", " << out.rows_param << ": tl.constexpr";
  src << "):\n";
  std::string body;
  std::vector<const std::string*> kept;
  for (const std::string& l : lines_) {
    if (!l.empty()) kept.push_back(&l);
  }
  auto indent_of = [](const std::string& l) { return l.find_first_not_of(' '); };
  for (size_t i = 0; i < kept.size(); ++i) {
    body += *kept[i] + "\n";
    // A block whose every line was a dropped store still needs a statement.
    const std::string& l = *kept[i];
    if (l.back() == ':' && (i + 1 == kept.size() || indent_of(*kept[i + 1]) <= indent_of(l))) {
      body += std::string(indent_of(l) + 4, ' ') + "pass\n";
    }
  }
  src << (body.empty() ? "    pass\n" : body);
  out.source = src.str();
  body_ = body;
  return out;
}

bool Emitter::is_nest_element(const Expr& index) const {
  // Affine (sums and products of loop variables and constants), then equal to the row-major
  // element at zero and at each unit vector.
  std::function<bool(const Expr&)> affine = [&](const Expr& e) {
    switch (e.kind()) {
      case ExprKind::IntImm:
        return true;
      case ExprKind::Var:
        return std::any_of(nest_weights_.begin(), nest_weights_.end(),
                           [&](const auto& w) { return w.first == e.as<Var>()->name; });
      case ExprKind::Add:
        return affine(e.as<Add>()->a) && affine(e.as<Add>()->b);
      case ExprKind::Sub:
        return affine(e.as<Sub>()->a) && affine(e.as<Sub>()->b);
      case ExprKind::Mul: {  // one side constant: no product of two variables
        const Expr& a = e.as<Mul>()->a;
        const Expr& b = e.as<Mul>()->b;
        return affine(a) && affine(b) && (!uses_any(a, {}, true) || !uses_any(b, {}, true));
      }
      default:
        return false;
    }
  };
  if (!affine(index)) return false;
  auto at = [&](const std::string& one) {
    EvalEnv env;
    for (const auto& [v, w] : nest_weights_)
      env.vars[v] = Scalar::of_int(DType::Int64, v == one ? 1 : 0);
    return eval_expr(index, env).i;
  };
  if (at("") != 0) return false;
  for (const auto& [v, w] : nest_weights_) {
    if (at(v) != w) return false;
  }
  return true;
}

void Emitter::drop_private_stores(TritonKernel& out) {
  for (const std::string& b : private_buffers_) {
    // Every access names the buffer's pointer as `b_<name> + (`: loads, stores and the
    // read-modify-write of an accumulator in memory.
    const std::string ptr = buf_name(b) + " + (";
    const std::string store = "tl.store(" + ptr;
    std::vector<size_t> stores;
    bool other_use = false;
    for (size_t i = 0; i < lines_.size() && !other_use; ++i) {
      const std::string& l = lines_[i];
      size_t at = l.find(ptr);
      if (at == std::string::npos) continue;
      const size_t start = l.find_first_not_of(' ');
      // A store line names the pointer once, as its address; anything else is a read.
      if (l.compare(start, store.size(), store) == 0 && at == start + 9 &&
          l.find(ptr, at + 1) == std::string::npos) {
        stores.push_back(i);
      } else {
        other_use = true;
      }
    }
    if (other_use) continue;
    for (size_t i : stores) lines_[i].clear();
    out.unused_buffers.push_back(b);
  }
}

// The Triton kernel of combo kernel `k` (triton_emitter.h): a jit function per part, then the
// kernel, which calls the part whose range of programs holds its program id. A part's buffers are
// its function's arguments a0, a1, ... in the kernel's order, so parts that compute the same
// thing on other buffers (an optimizer's update of parameters of one shape, its scalars) have
// the same function, emitted and compiled once.
TritonKernel emit_combo(const Kernel& k, const std::vector<std::string>& private_buffers) {
  TritonKernel out;
  out.name = "ember_" + k.name;
  out.size_vars = k.size_vars;
  out.form = TritonKernel::Form::Combo;
  out.block_param = "XBLOCK";
  out.int32_indices = true;
  // The argument list of buffers `buffers` and the kernel's sizes, then `tail`.
  auto arguments = [&](const std::vector<BufferParam>& buffers, const std::string& tail) {
    std::string a;
    for (const BufferParam& b : buffers) a += "b_" + b.name + ", ";
    for (const std::string& s : k.size_vars) a += "s_" + s + ", ";
    return a + tail;
  };
  std::ostringstream functions, kernel;
  kernel << "\n\n@triton.jit\ndef " << out.name << "("
         << arguments(k.buffers, "XBLOCK: tl.constexpr") << "):\n"
         << "    pid = tl.program_id(0)\n";
  std::map<std::string, std::string> function_of;  // a part's function body -> its name
  Expr total = IntImm::make(kIndexType, 0);
  Expr widest = IntImm::make(kIndexType, 1);
  std::string start;  // the first program of the next part: after the previous one's range
  const std::vector<Stmt> stmts = k.parts();
  for (size_t i = 0; i < stmts.size(); ++i) {
    // The part as a kernel of its own over the buffers it touches, renamed a0, a1, ...
    std::set<std::string> reads, writes;
    buffer_accesses(stmts[i], reads, writes);
    Kernel part;
    part.name = "part";
    part.size_vars = k.size_vars;
    std::map<std::string, std::string> names;
    std::vector<std::string> private_here;
    std::vector<BufferParam> used;  // k's buffers, as the part's arguments
    for (const BufferParam& b : k.buffers) {
      if (!reads.count(b.name) && !writes.count(b.name)) continue;
      BufferParam p = b;
      p.name = "a" + std::to_string(part.buffers.size());
      names[b.name] = p.name;
      if (std::find(private_buffers.begin(), private_buffers.end(), b.name) !=
          private_buffers.end()) {
        private_here.push_back(p.name);
      }
      used.push_back(b);
      part.buffers.push_back(std::move(p));
    }
    part.body = collapse_loops(rename_buffers(stmts[i], names));
    Emitter e(part, /*row_tiles=*/false, private_here);
    e.set_part();
    const TritonKernel t = e.run();
    Expr extent;
    std::string programs;
    if (t.form == TritonKernel::Form::Flat) {
      extent = simplify(t.grid_extent);
      programs = "((" + e.index_text(extent) + " + XBLOCK - 1) // XBLOCK)";
      widest = make_binary(ExprKind::Max, widest, extent);
    } else if (t.form == TritonKernel::Form::Rows && !has_loop(part.body)) {
      extent = IntImm::make(kIndexType, 1);  // scalar code: one program
      programs = "1";
    } else {
      refuse("a combo part that is not a pointwise nest or scalar code");
    }
    out.part_extents.push_back(extent);
    total = make_binary(ExprKind::Add, total, extent);
    out.int32_indices = out.int32_indices && t.int32_indices;
    for (const std::string& u : t.unused_buffers) {
      for (const auto& [name, renamed] : names) {
        if (renamed == u) out.unused_buffers.push_back(name);
      }
    }
    const std::string body = "(" + arguments(part.buffers, "pid, XBLOCK: tl.constexpr") + "):\n" +
                             (e.body().empty() ? "    pass\n" : e.body());
    auto [it, fresh] = function_of.try_emplace(body, out.name + "_p" + std::to_string(i));
    if (fresh) functions << "\n\n@triton.jit\ndef " << it->second << body;
    const std::string end = "end" + std::to_string(i);
    kernel << "    " << end << " = " << (start.empty() ? "" : start + " + ") << programs << "\n";
    kernel << "    if " << (start.empty() ? "" : "(pid >= " + start + ") & ") << "(pid < " << end
           << "):\n";
    kernel << "        " << it->second << "("
           << arguments(used, (start.empty() ? "pid" : "pid - " + start) + ", XBLOCK") << ")\n";
    start = end;
  }
  out.grid_extent = simplify(total);
  out.block_extent = simplify(widest);
  out.source = std::string(kTritonPrelude) + functions.str() + kernel.str();
  return out;
}

}  // namespace triton_detail

using namespace loop;
using triton_detail::Emitter;
using triton_detail::NoTritonForm;

namespace {

std::optional<TritonKernel> emit_form(const Kernel& k, std::string* why,
                                      const std::vector<std::string>& private_buffers,
                                      const CompileOptions::Triton& options) {
  try {
    if (k.combo) return triton_detail::emit_combo(k, private_buffers);
    // A pointwise nest that indices walk as one run is one loop: the flat form then recovers
    // fewer loop variables by division and modulo per element. A reduction's vector loop of a
    // few elements inside a serial loop becomes one vector loop (loop/collapse.h): a block of a
    // few lanes per serial step would leave most of each block's lanes idle.
    constexpr int64_t kShortVectorLoop = 128;
    Kernel collapsed = k;
    collapsed.body = collapse_reduction_nests(collapse_loops(k.body), kShortVectorLoop);
    try {
      return Emitter(collapsed, /*row_tiles=*/true, private_buffers, options.persistent).run();
    } catch (const NoTritonForm& n) {
      if (n.why.find("in a row tile") == std::string::npos) throw;
    }
    return Emitter(collapsed, /*row_tiles=*/false, private_buffers, options.persistent).run();
  } catch (const NoTritonForm& n) {
    if (why != nullptr) *why = n.why;
    return std::nullopt;
  }
}

}  // namespace

std::optional<TritonKernel> emit_triton(const Kernel& k, std::string* why,
                                        const std::vector<std::string>& private_buffers,
                                        const CompileOptions::Triton& options) {
  std::optional<TritonKernel> t = emit_form(k, why, private_buffers, options);
  if (t) {
    for (const BufferParam& b : k.buffers) t->written.push_back(b.role != BufferRole::Input);
    t->aligned = options.aligned_pointers;
  }
  return t;
}

std::optional<std::string> emit_triton_epilogue(const Kernel& k, const std::string& product,
                                                std::string* why) {
  try {
    if (k.combo) triton_detail::refuse("an epilogue of a combo kernel");
    Kernel collapsed = k;
    collapsed.body = collapse_loops(k.body);
    Emitter e(collapsed, /*row_tiles=*/false, {});
    e.set_epilogue(product);
    e.run();
    return e.body();
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

int64_t triton_programs(const TritonKernel& k, const Bindings& sizes, int block, int rows) {
  EvalEnv env;
  env.sizes = sizes;
  const int64_t grid = eval_expr(k.grid_extent, env).i;
  if (!k.rows_param.empty()) {  // a row tile: the rows over the rows per program
    const int64_t r = rows > 0 ? rows : k.rows_per_program;
    return (grid + r - 1) / r;
  }
  switch (k.form) {
    case TritonKernel::Form::Flat:
      return (grid + block - 1) / block;
    case TritonKernel::Form::Tiled: {
      const int64_t cols = eval_expr(k.tile_cols, env).i, rows = eval_expr(k.tile_rows, env).i;
      return grid * ((cols + block - 1) / block) * ((rows + block - 1) / block);
    }
    case TritonKernel::Form::Rows:
      return grid;
    case TritonKernel::Form::Combo: {
      int64_t programs = 0;
      for (const Expr& e : k.part_extents) programs += (eval_expr(e, env).i + block - 1) / block;
      return programs;
    }
  }
  return grid;
}

TritonLaunch triton_launch(const TritonKernel& k, const Bindings& sizes) {
  EvalEnv env;
  env.sizes = sizes;
  const int64_t extent = eval_expr(k.block_extent, env).i;
  TritonLaunch l;
  l.block = triton_block_size(extent, k.max_block);
  l.programs = triton_programs(k, sizes, l.block);
  return l;
}

}  // namespace ember::codegen
