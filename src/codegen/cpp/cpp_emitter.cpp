#include "codegen/cpp/cpp_emitter.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <set>

#include "codegen/cpp/cpp_emitter_internal.h"
#include "codegen/cpp/cpp_prelude.h"
#include "loop/equality.h"
#include "loop/split_loops.h"
#include "loop/traverse.h"
#include "support/error.h"

namespace ember::codegen {
namespace detail {

using namespace loop;

namespace {

// Whether `e` reads a buffer.
bool has_load(const Expr& e) {
  if (e.kind() == ExprKind::Load) return true;
  bool found = false;
  for_each_child(e, [&](const Expr& c) { found = found || has_load(c); });
  return found;
}

// Sets a variable's interval for the emission of a scope, and restores what was there before.
class BoundScope {
 public:
  BoundScope(VarBounds& bounds, std::string name, const Interval& i)
      : bounds_(bounds), name_(std::move(name)) {
    auto it = bounds_.find(name_);
    if (it != bounds_.end()) before_ = it->second;
    bounds_[name_] = i;
  }
  ~BoundScope() {
    if (before_) {
      bounds_[name_] = *before_;
    } else {
      bounds_.erase(name_);
    }
  }
  BoundScope(const BoundScope&) = delete;
  BoundScope& operator=(const BoundScope&) = delete;

 private:
  VarBounds& bounds_;
  std::string name_;
  std::optional<Interval> before_;
};

}  // namespace

std::string var_name(const std::string& n) {
  return "v_" + n;
}
std::string size_name(const std::string& n) {
  return "s_" + n;
}
std::string buf_name(const std::string& n) {
  return "b_" + n;
}

const char* cpp_type(DType t) {
  switch (t) {
    case DType::UInt8:
      return "uint8_t";
    case DType::Int8:
      return "int8_t";
    case DType::Int16:
      return "int16_t";
    case DType::Int32:
      return "int32_t";
    case DType::Int64:
      return "int64_t";
    case DType::Float16:
      return "_Float16";
    case DType::Float32:
      return "float";
    case DType::Float64:
      return "double";
    case DType::Bool:
      return "bool";
    case DType::BFloat16:
      return "ember_bf16";
  }
  EMBER_INTERNAL_ASSERT(false) << "unknown dtype";
  return "";
}

// The element type of a buffer of `t` in memory: a bool buffer is uint8_t (torch's bools are the
// bytes 0 and 1), read back as bool (Emitter::expr, Load). GCC's vectorizer has no vector type for
// a load of `bool`: a loop reading a bool mask (masked_fill's, a causal mask's) ran scalar,
// exp() and all, where a uint8_t load and a compare vectorize.
const char* storage_type(DType t) {
  return t == DType::Bool ? "uint8_t" : cpp_type(t);
}

// Low-precision floats compute in f32 and round at every node.
bool is_low_float(DType t) {
  return t == DType::BFloat16 || t == DType::Float16;
}
// The type a value of `t` is computed in.
const char* compute_type(DType t) {
  return is_low_float(t) ? "float" : cpp_type(t);
}

std::string int_literal(DType t, int64_t v) {
  if (t == DType::Bool) return v ? "true" : "false";
  std::string lit = v == INT64_MIN ? "(-9223372036854775807LL - 1)" : std::to_string(v) + "LL";
  if (t == DType::Int64) return lit;
  return std::string("static_cast<") + cpp_type(t) + ">(" + lit + ")";
}

std::string float_literal(DType t, double v) {
  std::string ct = compute_type(t);
  std::string body;
  if (std::isnan(v)) {
    body = "std::numeric_limits<" + ct + ">::quiet_NaN()";
  } else if (std::isinf(v)) {
    body = std::string(v < 0 ? "-" : "") + "std::numeric_limits<" + ct + ">::infinity()";
  } else {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", v);  // exact, deterministic
    body = "static_cast<" + ct + ">(" + buf + ")";
  }
  return is_low_float(t) ? std::string(cpp_type(t)) + "(" + body + ")" : body;
}

std::string Emitter::function() {
  out_ << "extern \"C\" void " << cpp_kernel_symbol(k_.name)
       << "(void* const* buffers, const int64_t* sizes) {\n";
  for (size_t i = 0; i < k_.buffers.size(); ++i) {
    const BufferParam& b = k_.buffers[i];
    out_ << "  " << storage_type(b.dtype) << "* const p_" << b.name << " = static_cast<"
         << storage_type(b.dtype) << "*>(buffers[" << i << "]);\n";
  }
  restrict_pointers(1);
  for (size_t i = 0; i < k_.size_vars.size(); ++i) {
    out_ << "  const int64_t " << size_name(k_.size_vars[i]) << " = sizes[" << i << "];\n";
  }
  // Silence unused-variable warnings for parameters a kernel does not touch.
  for (const std::string& s : k_.size_vars) out_ << "  (void)" << size_name(s) << ";\n";
  // A concatenation's selects along a loop fold to one arm per piece (loop/split_loops.h).
  stmt(split_loops_at_selects(k_.body), 1);
  out_ << "}\n";
  return out_.str();
}

void Emitter::restrict_pointers(int ind) {
  for (const BufferParam& b : k_.buffers) {
    line(ind, std::string(storage_type(b.dtype)) + "* __restrict__ " + buf_name(b.name) + " = p_" +
                  b.name + ";");
  }
  for (const BufferParam& b : k_.buffers) line(ind, "(void)" + buf_name(b.name) + ";");
}

std::string Emitter::val(const Expr& e) {
  std::string s = expr(e);
  return is_low_float(e.dtype()) ? "static_cast<float>(" + s + ")" : s;
}

std::string Emitter::round_to(DType t, const std::string& computed) {
  return is_low_float(t) ? std::string(cpp_type(t)) + "(" + computed + ")" : computed;
}

std::string Emitter::expr(const Expr& e) {
  switch (e.kind()) {
    case ExprKind::IntImm:
      return int_literal(e.dtype(), e.as<IntImm>()->value);
    case ExprKind::FloatImm:
      return float_literal(e.dtype(), e.as<FloatImm>()->value);
    case ExprKind::Var:
      return var_name(e.as<Var>()->name);
    case ExprKind::SizeVar:
      return size_name(e.as<SizeVar>()->name);
    case ExprKind::Add:
      return binary(e, "+");
    case ExprKind::Sub:
      return binary(e, "-");
    case ExprKind::Mul:
      return binary(e, "*");
    case ExprKind::Div:
      return binary(e, "/");
    case ExprKind::FloorDiv:
      return helper2(e, "ember_floordiv");
    case ExprKind::Mod:
      return helper2(e, "ember_mod");
    case ExprKind::Min:
      return helper2(e, "ember_min");
    case ExprKind::Max:
      return helper2(e, "ember_max");
    case ExprKind::LT:
      return compare(e, "<");
    case ExprKind::LE:
      return compare(e, "<=");
    case ExprKind::EQ:
      return compare(e, "==");
    case ExprKind::NE:
      return compare(e, "!=");
    case ExprKind::And:
      return compare(e, "&&");
    case ExprKind::Or:
      return compare(e, "||");
    case ExprKind::BitAnd:
      return binary(e, "&");
    case ExprKind::BitOr:
      return binary(e, "|");
    case ExprKind::BitXor:
      return binary(e, "^");
    case ExprKind::Shl:
      return helper2(e, "ember_shl");
    case ExprKind::Shr:
      return helper2(e, "ember_shr");
    case ExprKind::Not:
      return "(!" + expr(e.as<Not>()->a) + ")";
    case ExprKind::Select: {
      const Select* s = e.as<Select>();
      const std::string cond = expr(s->cond);
      ++select_depth_;
      const std::string t = expr(s->t);
      const std::string f = expr(s->f);
      --select_depth_;
      // Note [Selects of loads].
      if ((has_load(s->t) || has_load(s->f)) && speculatable(s->t) && speculatable(s->f)) {
        return "ember_select(" + cond + ", " + t + ", " + f + ")";
      }
      return "(" + cond + " ? " + t + " : " + f + ")";
    }
    case ExprKind::Cast:
      return cast(e.dtype(), e.as<Cast>()->value);
    case ExprKind::Load: {
      const Load* l = e.as<Load>();
      std::string index = expr(l->index);
      if (select_depth_ > 0 && l->index.kind() != ExprKind::IntImm) {
        // A vectorized loop evaluates both arms of a select (a blend): a guarded read (padding,
        // im2col, cat) is clamped into its buffer, whose value the select then discards. A read
        // that the loops keep inside its buffer needs no clamp (which would make a contiguous
        // load a gather).
        std::optional<int64_t> last = last_element(l->buffer);
        if (last && !in_range(l->index, *last)) {
          index = "ember_min<int64_t>(ember_max<int64_t>(" + index + ", 0LL), " +
                  std::to_string(*last) + "LL)";
        }
      }
      std::string element = buf_name(l->buffer) + "[" + index + "]";
      return e.dtype() == DType::Bool ? "static_cast<bool>(" + element + ")" : element;
    }
    case ExprKind::Call:
      return call(e);
  }
  EMBER_INTERNAL_ASSERT(false) << "unknown expression kind";
  return "";
}

std::optional<int64_t> Emitter::last_element(const std::string& buffer) const {
  for (const loop::BufferParam& b : k_.buffers) {
    if (b.name != buffer) continue;
    int64_t last = 0;
    for (size_t d = 0; d < b.sizes.size(); ++d) {
      const loop::IntImm* size = b.sizes[d].as<loop::IntImm>();
      const loop::IntImm* stride = d < b.strides.size() ? b.strides[d].as<loop::IntImm>() : nullptr;
      if (size == nullptr || stride == nullptr || size->value < 1 || stride->value < 0) {
        return std::nullopt;
      }
      last += (size->value - 1) * stride->value;
    }
    return last;
  }
  return std::nullopt;
}

bool Emitter::in_range(const Expr& index, int64_t last) const {
  const Interval b = bounds_of(index, bounds_);
  return b.lo && b.hi && *b.lo >= 0 && *b.hi <= last;
}

// Note [Selects of loads]
// C++'s `c ? a : b` evaluates one arm, so an arm that loads is a conditional load, and GCC's
// vectorizer does not speculate loads it cannot prove safe: a loop with a select of a load ran
// scalar. ReLU's backward, `where(x <= 0, 0, grad)`, was 2.1 ms over 800K floats on 2 cores
// against 80 us vectorized (convolution nets trained slower than eager on the CPU). Where every
// load of both arms reads inside its buffer (a clamped index, or one the loop bounds keep in
// range) and nothing in them can trap (an integer division by a divisor that may be 0), the
// select is emitted as a call, `ember_select(c, a, b)`, which evaluates both arms, and the loop
// vectorizes with plain loads and a blend. Otherwise it stays a conditional.
bool Emitter::speculatable(const Expr& e) const {
  switch (e.kind()) {
    case ExprKind::Load: {
      // Inside the buffer: a constant index checked here, any other one clamped (or in range).
      const Load* l = e.as<Load>();
      const std::optional<int64_t> last = last_element(l->buffer);
      if (!last) return false;
      if (const IntImm* i = l->index.as<IntImm>(); i && (i->value < 0 || i->value > *last)) {
        return false;
      }
      return speculatable(l->index);
    }
    case ExprKind::Div:
    case ExprKind::FloorDiv:
    case ExprKind::Mod: {
      if (!is_float(e.dtype())) {
        const Interval d = bounds_of(operands(e).second, bounds_);
        if (!(d.lo && *d.lo > 0)) return false;  // 0 or -1 (INT_MIN / -1) may trap
      }
      break;
    }
    default:
      break;
  }
  bool ok = true;
  for_each_child(e, [&](const Expr& c) { ok = ok && speculatable(c); });
  return ok;
}

std::pair<Expr, Expr> Emitter::operands(const Expr& e) {
  std::pair<Expr, Expr> ab;
  for_each_child(e, [&](const Expr& c) {
    if (!ab.first.defined()) {
      ab.first = c;
    } else {
      ab.second = c;
    }
  });
  return ab;
}

std::string Emitter::binary(const Expr& e, const char* op) {
  auto [a, b] = operands(e);
  std::string computed = "(" + val(a) + " " + op + " " + val(b) + ")";
  // Narrow integers: C++ promotes to int; the IR wraps in the type.
  if (!is_float(e.dtype()) && e.dtype() != DType::Int64) {
    return std::string("static_cast<") + cpp_type(e.dtype()) + ">" + computed;
  }
  return round_to(e.dtype(), computed);
}

std::string Emitter::helper2(const Expr& e, const char* fn) {
  auto [a, b] = operands(e);
  std::string ct = compute_type(e.dtype());
  return round_to(e.dtype(), std::string(fn) + "<" + ct + ">(" + val(a) + ", " + val(b) + ")");
}

std::string Emitter::compare(const Expr& e, const char* op) {
  auto [a, b] = operands(e);
  return "(" + val(a) + " " + op + " " + val(b) + ")";
}

std::string Emitter::cast(DType to, const Expr& v) {
  if (to == DType::Bool) return "(" + val(v) + " != 0)";
  if (is_low_float(to)) {
    return std::string(cpp_type(to)) + "(static_cast<float>(" + val(v) + "))";
  }
  return std::string("static_cast<") + cpp_type(to) + ">(" + val(v) + ")";
}

std::string Emitter::call(const Expr& e) {
  const Call* c = e.as<Call>();
  std::vector<std::string> a;
  for (const Expr& x : c->args) a.push_back(val(x));
  DType t = c->args.empty() ? e.dtype() : c->args[0].dtype();
  std::string ct = compute_type(t);
  std::string r;
  switch (c->fn) {
    case CallFn::Abs:
      r = is_float(t) ? "std::fabs(" + a[0] + ")"
                      : "(" + a[0] + " < 0 ? -" + a[0] + " : " + a[0] + ")";
      break;
    case CallFn::Neg:
      r = "(-" + a[0] + ")";
      break;
    case CallFn::Exp:
      r = (ct == std::string("float") || ct == std::string("double") ? "ember_exp(" : "std::exp(") +
          a[0] + ")";
      break;
    case CallFn::Exp2:
      r = "std::exp2(" + a[0] + ")";
      break;
    case CallFn::Expm1:
      r = "std::expm1(" + a[0] + ")";
      break;
    case CallFn::Log:
      r = (ct == std::string("float") || ct == std::string("double") ? "ember_log(" : "std::log(") +
          a[0] + ")";
      break;
    case CallFn::Log2:
      r = "std::log2(" + a[0] + ")";
      break;
    case CallFn::Log10:
      r = "std::log10(" + a[0] + ")";
      break;
    case CallFn::Log1p:
      r = "std::log1p(" + a[0] + ")";
      break;
    case CallFn::Sqrt:
      r = "std::sqrt(" + a[0] + ")";
      break;
    case CallFn::Rsqrt:
      r = "ember_rsqrt<" + ct + ">(" + a[0] + ")";
      break;
    case CallFn::Reciprocal:
      r = "(" + ct + "(1) / " + a[0] + ")";
      break;
    case CallFn::Sin:
      r = "std::sin(" + a[0] + ")";
      break;
    case CallFn::Cos:
      r = "std::cos(" + a[0] + ")";
      break;
    case CallFn::Tan:
      r = "std::tan(" + a[0] + ")";
      break;
    case CallFn::Asin:
      r = "std::asin(" + a[0] + ")";
      break;
    case CallFn::Acos:
      r = "std::acos(" + a[0] + ")";
      break;
    case CallFn::Atan:
      r = "std::atan(" + a[0] + ")";
      break;
    case CallFn::Sinh:
      r = "std::sinh(" + a[0] + ")";
      break;
    case CallFn::Cosh:
      r = "std::cosh(" + a[0] + ")";
      break;
    case CallFn::Tanh:
      r = (ct == std::string("float") || ct == std::string("double") ? "ember_tanh("
                                                                     : "std::tanh(") +
          a[0] + ")";
      break;
    case CallFn::Asinh:
      r = "std::asinh(" + a[0] + ")";
      break;
    case CallFn::Acosh:
      r = "std::acosh(" + a[0] + ")";
      break;
    case CallFn::Atanh:
      r = "std::atanh(" + a[0] + ")";
      break;
    case CallFn::Erf:
      r = (ct == std::string("float") || ct == std::string("double") ? "ember_erf(" : "std::erf(") +
          a[0] + ")";
      break;
    case CallFn::Erfc:
      r = "std::erfc(" + a[0] + ")";
      break;
    case CallFn::Sigmoid:
      r = "ember_sigmoid<" + ct + ">(" + a[0] + ")";
      break;
    case CallFn::Floor:
      r = "std::floor(" + a[0] + ")";
      break;
    case CallFn::Ceil:
      r = "std::ceil(" + a[0] + ")";
      break;
    case CallFn::Round:
      r = "std::nearbyint(" + a[0] + ")";
      break;
    case CallFn::Trunc:
      r = "std::trunc(" + a[0] + ")";
      break;
    case CallFn::IsNan:
      return is_float(t) ? "std::isnan(" + a[0] + ")" : "false";
    case CallFn::IsInf:
      return is_float(t) ? "std::isinf(" + a[0] + ")" : "false";
    case CallFn::Pow:
      r = "std::pow(" + a[0] + ", " + a[1] + ")";
      break;
    case CallFn::Atan2:
      r = "std::atan2(" + a[0] + ", " + a[1] + ")";
      break;
    case CallFn::Fmod:
      r = "std::fmod(" + a[0] + ", " + a[1] + ")";
      break;
    case CallFn::CheckIndex:  // see calls.def: the CPU schedule checks indices before the loops
      EMBER_INTERNAL_ASSERT(false) << "check_index has no C++ form";
      break;
  }
  if (!is_float(e.dtype()) && e.dtype() != DType::Bool) {
    return std::string("static_cast<") + cpp_type(e.dtype()) + ">(" + r + ")";
  }
  return round_to(e.dtype(), "static_cast<" + ct + ">(" + r + ")");
}

bool Emitter::parallel_safe(const Stmt& body) {
  std::vector<const Accumulate*> accs;
  std::vector<const Store*> stores;
  std::set<std::string> private_buffers;  // allocated inside the body: one per iteration
  std::function<void(const Stmt&)> walk = [&](const Stmt& s) {
    if (!s.defined()) return;
    if (auto* a = s.as<Accumulate>()) accs.push_back(a);
    if (auto* st = s.as<Store>()) stores.push_back(st);
    if (auto* al = s.as<Allocate>()) private_buffers.insert(al->buffer);
    for_each_stmt_child(
        s, [](const Expr&) {}, walk);
  };
  walk(body);
  for (const Accumulate* a : accs) {
    if (private_buffers.count(a->buffers[0])) continue;
    bool owned = false;
    for (const Store* st : stores) {
      owned |= st->buffer == a->buffers[0] && structurally_equal(st->index, a->index);
    }
    if (!owned) return false;
  }
  return true;
}

void Emitter::stmt(const Stmt& s, int ind) {
  if (!s.defined()) return;
  switch (s.kind()) {
    case StmtKind::For: {
      const For* f = s.as<For>();
      const BoundScope scope(
          bounds_, f->var.as<Var>()->name,
          loop_var_bounds(bounds_of(f->min, bounds_), bounds_of(f->extent, bounds_)));
      std::string v = expr(f->var);
      std::string lo = expr(f->min);
      std::string hi = "(" + lo + " + " + expr(f->extent) + ")";
      switch (f->for_kind) {
        case ForKind::Parallel:
          if (parallel_depth_ == 0 && parallel_safe(f->body)) {
            // parallel_when: at a small size the loop runs on the calling thread, without the
            // fork and join of the team.
            line(ind, "#pragma omp parallel for schedule(static)" +
                          (f->parallel_when.defined() ? " if(" + expr(f->parallel_when) + ")"
                                                      : std::string()));
            ++parallel_depth_;
            line(ind,
                 "for (int64_t " + v + " = " + lo + "; " + v + " < " + hi + "; ++" + v + ") {");
            // GCC drops __restrict__ from pointers an OpenMP region captures: declared again
            // inside, its loops keep knowing that no store aliases a load (and vectorize).
            restrict_pointers(ind + 1);
            stmt(f->body, ind + 1);
            line(ind, "}");
            --parallel_depth_;
            return;
          }
          line(ind,
               "// parallel loop run serially: nested, or accumulators shared across iterations");
          break;
        case ForKind::Vectorized: {
          LaneReduction lr = analyze_lane_reduction(*f);
          if (lr.kind == LaneReduction::Kind::Lanes) {
            emit_vectorized_reduction(*f, lr, ind);
            return;
          }
          if (lr.kind == LaneReduction::Kind::Serial) {
            line(ind, "// vectorized loop run serially: its reduction cannot use vector lanes");
            break;
          }
          line(ind, "#pragma omp simd");
          break;
        }
        case ForKind::Unrolled:
          line(ind, "#pragma GCC unroll 8");
          break;
        case ForKind::Serial:
          break;
      }
      emit_for(v, lo, hi, f->body, ind);
      return;
    }
    case StmtKind::Block:
      for (const Stmt& c : s.as<Block>()->stmts) stmt(c, ind);
      return;
    case StmtKind::Store: {
      const Store* st = s.as<Store>();
      std::string ref = buf_name(st->buffer) + "[" + expr(st->index) + "]";
      if (st->value.dtype() == DType::BFloat16) {
        // Store the bits: GCC does not vectorize a loop that copies the struct.
        line(ind, ref + ".bits = " + expr(st->value) + ".bits;");
        return;
      }
      line(ind, ref + " = " + expr(st->value) + ";");
      return;
    }
    case StmtKind::Accumulate:
      accumulate(*s.as<Accumulate>(), ind);
      return;
    case StmtKind::Let: {
      const Let* l = s.as<Let>();
      const BoundScope scope(bounds_, l->var.as<Var>()->name, bounds_of(l->value, bounds_));
      line(ind, "{");
      line(ind + 1, std::string("const ") + cpp_type(l->var.dtype()) + " " + expr(l->var) + " = " +
                        expr(l->value) + ";");
      stmt(l->body, ind + 1);
      line(ind, "}");
      return;
    }
    case StmtKind::IfThenElse: {
      const IfThenElse* i = s.as<IfThenElse>();
      line(ind, "if (" + expr(i->cond) + ") {");
      stmt(i->then_case, ind + 1);
      if (i->else_case.defined()) {
        line(ind, "} else {");
        stmt(i->else_case, ind + 1);
      }
      line(ind, "}");
      return;
    }
    case StmtKind::Allocate: {
      const Allocate* a = s.as<Allocate>();
      // A small allocation of constant size lives on the stack (reduction accumulators, tiles of
      // them).
      const int64_t max_elems = kMaxStackBytes / std::max(1, dtype_bits(a->dtype) / 8);
      int64_t elems = 1;
      for (const Expr& d : a->sizes) {
        std::optional<int64_t> c = as_const_int(d);
        elems = c && *c >= 0 && *c <= max_elems && elems <= max_elems ? elems * *c : max_elems + 1;
      }
      if (elems >= 1 && elems <= max_elems) {
        line(ind, "{");
        line(ind + 1, std::string(storage_type(a->dtype)) + " " + buf_name(a->buffer) + "[" +
                          std::to_string(elems) + "];");
        stmt(a->body, ind + 1);
        line(ind, "}");
        return;
      }
      std::string n = "1";
      for (const Expr& d : a->sizes) n = "(" + n + " * " + expr(d) + ")";
      line(ind, "{");
      line(ind + 1, std::string("std::vector<") + storage_type(a->dtype) + "> " +
                        buf_name(a->buffer) + "_storage(static_cast<size_t>(" + n + "));");
      line(ind + 1, std::string(storage_type(a->dtype)) + "* __restrict__ " + buf_name(a->buffer) +
                        " = " + buf_name(a->buffer) + "_storage.data();");
      stmt(a->body, ind + 1);
      line(ind, "}");
      return;
    }
  }
}

void Emitter::emit_for(const std::string& v, const std::string& lo, const std::string& hi,
                       const Stmt& body, int ind) {
  line(ind, "for (int64_t " + v + " = " + lo + "; " + v + " < " + hi + "; ++" + v + ") {");
  stmt(body, ind + 1);
  line(ind, "}");
}

void Emitter::accumulate(const Accumulate& a, int ind) {
  std::string idx = expr(a.index);
  auto lanes = lane_refs_.find(acc_key(a, idx));
  if (lanes != lane_refs_.end()) {
    // Inside a lane reduction (emit_lane_reduction): fold the values into this lane.
    DType t = a.values[0].dtype();
    std::vector<std::string> vals;
    for (size_t j = 0; j < a.values.size(); ++j) vals.push_back(val(a.values[j]));
    if (a.values.size() > 1) {
      // ArgMax/ArgMin: name the candidate once.
      std::string x = "x" + std::to_string(lane_counter_) + "_";
      line(ind, "{");
      line(ind + 1, std::string("const ") + compute_type(t) + " " + x + "v = " + vals[0] + ";");
      line(ind + 1, "const int64_t " + x + "i = " + vals[1] + ";");
      combine(ind + 1, a.op, compute_type(t), lanes->second, {x + "v", x + "i"});
      line(ind, "}");
      return;
    }
    combine(ind, a.op, compute_type(t), lanes->second, vals);
    return;
  }
  auto ref = [&](size_t k) { return buf_name(a.buffers[k]) + "[" + idx + "]"; };
  DType t = a.values[0].dtype();
  std::string ct = compute_type(t);
  auto cur = [&](size_t k) {
    return is_low_float(t) ? "static_cast<float>(" + ref(k) + ")" : ref(k);
  };
  std::string x = val(a.values[0]);
  switch (a.op) {
    case ReduceOp::Sum:
      line(ind, ref(0) + " = " + round_to(t, "(" + cur(0) + " + " + x + ")") + ";");
      return;
    case ReduceOp::Prod:
      line(ind, ref(0) + " = " + round_to(t, "(" + cur(0) + " * " + x + ")") + ";");
      return;
    case ReduceOp::Max:
      line(ind, ref(0) + " = " +
                    round_to(t, "ember_max_acc<" + ct + ">(" + cur(0) + ", " + x + ")") + ";");
      return;
    case ReduceOp::Min:
      line(ind, ref(0) + " = " +
                    round_to(t, "ember_min_acc<" + ct + ">(" + cur(0) + ", " + x + ")") + ";");
      return;
    case ReduceOp::Any:
      line(ind, ref(0) + " = " + ref(0) + " || " + x + ";");
      return;
    case ReduceOp::All:
      line(ind, ref(0) + " = " + ref(0) + " && " + x + ";");
      return;
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin: {
      line(ind, "{");
      line(ind + 1, "const " + ct + " x_ = " + x + ";");
      line(ind + 1, "const int64_t i_ = " + expr(a.values[1]) + ";");
      line(ind + 1, std::string("if (ember_arg_better<") + ct + ">(x_, i_, " + cur(0) + ", " +
                        ref(1) + ", " + (a.op == ReduceOp::ArgMax ? "true" : "false") + ")) {");
      line(ind + 2, ref(0) + " = " + round_to(t, "x_") + ";");
      line(ind + 2, ref(1) + " = i_;");
      line(ind + 1, "}");
      line(ind, "}");
      return;
    }
    case ReduceOp::WelfordReduce: {
      line(ind, "{");
      line(ind + 1, "const " + ct + " x_ = " + x + ";");
      line(ind + 1, "const " + ct + " w_ = " + cur(2) + " + " + ct + "(1);");
      line(ind + 1, "const " + ct + " d_ = x_ - " + cur(0) + ";");
      line(ind + 1, "const " + ct + " m_ = " + cur(0) + " + d_ / w_;");
      line(ind + 1, ref(1) + " = " + round_to(t, cur(1) + " + d_ * (x_ - m_)") + ";");
      line(ind + 1, ref(0) + " = " + round_to(t, "m_") + ";");
      line(ind + 1, ref(2) + " = " + round_to(t, "w_") + ";");
      line(ind, "}");
      return;
    }
    case ReduceOp::WelfordCombine: {
      line(ind, "{");
      line(ind + 1, "const " + ct + " mb_ = " + x + ";");
      line(ind + 1, "const " + ct + " m2b_ = " + val(a.values[1]) + ";");
      line(ind + 1, "const " + ct + " wb_ = " + val(a.values[2]) + ";");
      line(ind + 1, "const " + ct + " wa_ = " + cur(2) + ";");
      line(ind + 1, "const " + ct + " w_ = wa_ + wb_;");
      line(ind + 1, "if (w_ != " + ct + "(0)) {");
      line(ind + 2, "const " + ct + " d_ = mb_ - " + cur(0) + ";");
      line(ind + 2, "const " + ct + " f_ = wb_ / w_;");
      line(ind + 2, ref(1) + " = " + round_to(t, cur(1) + " + m2b_ + d_ * d_ * wa_ * f_") + ";");
      line(ind + 2, ref(0) + " = " + round_to(t, cur(0) + " + d_ * f_") + ";");
      line(ind + 2, ref(2) + " = " + round_to(t, "w_") + ";");
      line(ind + 1, "}");
      line(ind, "}");
      return;
    }
  }
}

}  // namespace detail

using detail::Emitter;
using loop::Kernel;

std::string cpp_kernel_symbol(const std::string& name) {
  return "ember_kernel_" + name;
}

std::string cpp_prelude() {
  return kCppPrelude;
}

std::string emit_cpp(const Kernel& k) {
  return std::string(kCppPrelude) + "\n" + Emitter(k).function();
}

std::string emit_cpp_unit(const std::vector<Kernel>& kernels) {
  std::string out = std::string(kCppPrelude);
  for (const Kernel& k : kernels) out += "\n" + Emitter(k).function();
  return out;
}

}  // namespace ember::codegen
