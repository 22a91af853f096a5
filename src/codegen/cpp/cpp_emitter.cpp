#include "codegen/cpp/cpp_emitter.h"

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "codegen/cpp/cpp_prelude.h"
#include "loop/equality.h"
#include "loop/traverse.h"
#include "support/error.h"

namespace ember::codegen {

using namespace loop;

namespace {

// Names in generated code get a prefix per namespace, so IR names never collide with C++
// keywords or with each other: v_ variables, s_ sizes, b_ buffers.
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

class Emitter {
 public:
  explicit Emitter(const Kernel& k) : k_(k) {}

  /// The kernel's function, without the prelude.
  std::string function() {
    out_ << "extern \"C\" void " << cpp_kernel_symbol(k_.name)
         << "(void* const* buffers, const int64_t* sizes) {\n";
    for (size_t i = 0; i < k_.buffers.size(); ++i) {
      const BufferParam& b = k_.buffers[i];
      out_ << "  " << cpp_type(b.dtype) << "* __restrict__ " << buf_name(b.name)
           << " = static_cast<" << cpp_type(b.dtype) << "*>(buffers[" << i << "]);\n";
    }
    for (size_t i = 0; i < k_.size_vars.size(); ++i) {
      out_ << "  const int64_t " << size_name(k_.size_vars[i]) << " = sizes[" << i << "];\n";
    }
    // Silence unused-variable warnings for parameters a kernel does not touch.
    for (const BufferParam& b : k_.buffers) out_ << "  (void)" << buf_name(b.name) << ";\n";
    for (const std::string& s : k_.size_vars) out_ << "  (void)" << size_name(s) << ";\n";
    stmt(k_.body, 1);
    out_ << "}\n";
    return out_.str();
  }

 private:
  void line(int indent, const std::string& s) { out_ << std::string(2 * indent, ' ') << s << "\n"; }

  // An operand in its compute type.
  std::string val(const Expr& e) {
    std::string s = expr(e);
    return is_low_float(e.dtype()) ? "static_cast<float>(" + s + ")" : s;
  }
  // A computed value (in compute type) rounded to `t`.
  std::string round_to(DType t, const std::string& computed) {
    return is_low_float(t) ? std::string(cpp_type(t)) + "(" + computed + ")" : computed;
  }

  std::string expr(const Expr& e) {
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
      case ExprKind::Not:
        return "(!" + expr(e.as<Not>()->a) + ")";
      case ExprKind::Select: {
        const Select* s = e.as<Select>();
        return "(" + expr(s->cond) + " ? " + expr(s->t) + " : " + expr(s->f) + ")";
      }
      case ExprKind::Cast:
        return cast(e.dtype(), e.as<Cast>()->value);
      case ExprKind::Load: {
        const Load* l = e.as<Load>();
        return buf_name(l->buffer) + "[" + expr(l->index) + "]";
      }
      case ExprKind::Call:
        return call(e);
    }
    EMBER_INTERNAL_ASSERT(false) << "unknown expression kind";
    return "";
  }

  template <ExprKind K>
  static const BinaryNode<K>* bin(const Expr& e) {
    return e.as<BinaryNode<K>>();
  }
  std::pair<Expr, Expr> operands(const Expr& e) {
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
  std::string binary(const Expr& e, const char* op) {
    auto [a, b] = operands(e);
    std::string computed = "(" + val(a) + " " + op + " " + val(b) + ")";
    // Narrow integers: C++ promotes to int; the IR wraps in the type.
    if (!is_float(e.dtype()) && e.dtype() != DType::Int64) {
      return std::string("static_cast<") + cpp_type(e.dtype()) + ">" + computed;
    }
    return round_to(e.dtype(), computed);
  }
  std::string helper2(const Expr& e, const char* fn) {
    auto [a, b] = operands(e);
    std::string ct = compute_type(e.dtype());
    return round_to(e.dtype(), std::string(fn) + "<" + ct + ">(" + val(a) + ", " + val(b) + ")");
  }
  std::string compare(const Expr& e, const char* op) {
    auto [a, b] = operands(e);
    return "(" + val(a) + " " + op + " " + val(b) + ")";
  }
  std::string cast(DType to, const Expr& v) {
    if (to == DType::Bool) return "(" + val(v) + " != 0)";
    if (is_low_float(to)) {
      return std::string(cpp_type(to)) + "(static_cast<float>(" + val(v) + "))";
    }
    return std::string("static_cast<") + cpp_type(to) + ">(" + val(v) + ")";
  }
  std::string call(const Expr& e) {
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
        r = (ct == std::string("float") || ct == std::string("double") ? "ember_tanh(" : "std::tanh(") +
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
    }
    if (!is_float(e.dtype()) && e.dtype() != DType::Bool) {
      return std::string("static_cast<") + cpp_type(e.dtype()) + ">(" + r + ")";
    }
    return round_to(e.dtype(), "static_cast<" + ct + ">(" + r + ")");
  }

  // A Parallel loop runs its iterations on several threads. Plain stores never collide (the IR
  // forbids it); an Accumulate may, unless this iteration also initialises that accumulator
  // (stores to it at the same index), which makes the reduction private to the iteration.
  bool parallel_safe(const Stmt& body) {
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

  void stmt(const Stmt& s, int ind) {
    if (!s.defined()) return;
    switch (s.kind()) {
      case StmtKind::For: {
        const For* f = s.as<For>();
        std::string v = expr(f->var);
        std::string lo = expr(f->min);
        std::string hi = "(" + lo + " + " + expr(f->extent) + ")";
        switch (f->for_kind) {
          case ForKind::Parallel:
            if (parallel_depth_ == 0 && parallel_safe(f->body)) {
              line(ind, "#pragma omp parallel for schedule(static)");
              ++parallel_depth_;
              emit_for(v, lo, hi, f->body, ind);
              --parallel_depth_;
              return;
            }
            line(ind,
                 "// parallel loop run serially: nested, or accumulators shared across iterations");
            break;
          case ForKind::Vectorized: {
            LaneReduction lr = analyze_lane_reduction(*f);
            if (lr.kind == LaneReduction::Kind::Lanes) {
              emit_lane_reduction(*f, lr, ind);
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
        line(ind, "{");
        line(ind + 1, std::string("const ") + cpp_type(l->var.dtype()) + " " + expr(l->var) +
                          " = " + expr(l->value) + ";");
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
          elems = c && *c >= 0 && *c <= max_elems && elems <= max_elems ? elems * *c
                                                                         : max_elems + 1;
        }
        if (elems >= 1 && elems <= max_elems) {
          line(ind, "{");
          line(ind + 1, std::string(cpp_type(a->dtype)) + " " + buf_name(a->buffer) + "[" +
                            std::to_string(elems) + "];");
          stmt(a->body, ind + 1);
          line(ind, "}");
          return;
        }
        std::string n = "1";
        for (const Expr& d : a->sizes) n = "(" + n + " * " + expr(d) + ")";
        line(ind, "{");
        line(ind + 1, std::string("std::vector<") + cpp_type(a->dtype) + "> " +
                          buf_name(a->buffer) + "_storage(static_cast<size_t>(" + n + "));");
        line(ind + 1, std::string(cpp_type(a->dtype)) + "* __restrict__ " + buf_name(a->buffer) +
                          " = " + buf_name(a->buffer) + "_storage.data();");
        stmt(a->body, ind + 1);
        line(ind, "}");
        return;
      }
    }
  }

  // ---- Reductions over a vectorized loop (see docs/design/cpp_codegen.md) -----------------

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
  };

  static constexpr int64_t kCascadeBlocks = 32;  // C

  static std::string acc_key(const Accumulate& a, const std::string& index) {
    return a.buffers[0] + "[" + index + "]";
  }

  static bool lane_op(ReduceOp op) {
    return op != ReduceOp::WelfordReduce && op != ReduceOp::WelfordCombine;
  }

  // Bytes of one lane of `a`'s accumulators in registers.
  static int64_t lane_bytes(const Accumulate& a) {
    int64_t bytes = std::max(1, dtype_bits(a.values[0].dtype()) / 8);
    if (is_low_float(a.values[0].dtype())) bytes = 4;
    if (a.op == ReduceOp::ArgMax || a.op == ReduceOp::ArgMin) bytes = 8;
    return bytes;
  }

  LaneReduction analyze_lane_reduction(const For& f) {
    LaneReduction lr;
    std::set<std::string> inner_vars = {f.var.as<Var>()->name};
    std::vector<const Accumulate*> accs;
    std::set<std::string> loaded, stored;
    bool simple = true;  // no nested loops, allocations or conditionals
    std::function<void(const Expr&)> walk_expr = [&](const Expr& e) {
      if (auto* l = e.as<Load>()) loaded.insert(l->buffer);
      for_each_child(e, walk_expr);
    };
    std::function<void(const Stmt&)> walk = [&](const Stmt& s) {
      if (!s.defined()) return;
      switch (s.kind()) {
        case StmtKind::For:
        case StmtKind::Allocate:
        case StmtKind::IfThenElse:
          simple = false;
          break;
        case StmtKind::Let:
          inner_vars.insert(s.as<Let>()->var.as<Var>()->name);
          break;
        case StmtKind::Accumulate:
          accs.push_back(s.as<Accumulate>());
          break;
        case StmtKind::Store:
          stored.insert(s.as<Store>()->buffer);
          break;
        case StmtKind::Block:
          break;
      }
      for_each_stmt_child(s, walk_expr, walk);
    };
    walk(f.body);
    std::set<std::string> seen;
    bool uses_inner = false;
    for (const Accumulate* a : accs) {
      bool invariant = true;
      std::function<void(const Expr&)> check = [&](const Expr& e) {
        if (auto* v = e.as<Var>()) invariant &= !inner_vars.count(v->name);
        for_each_child(e, check);
      };
      check(a->index);
      if (!invariant) {
        uses_inner = true;
        continue;
      }
      if (seen.insert(acc_key(*a, expr(a->index))).second) lr.accs.push_back(a);
    }
    if (lr.accs.empty()) return lr;  // elementwise accumulates vectorize as they are
    lr.kind = LaneReduction::Kind::Serial;
    if (!simple || uses_inner) return lr;
    int64_t bytes = 1;
    for (const Accumulate* a : lr.accs) {
      if (!lane_op(a->op)) return lr;
      for (const std::string& b : a->buffers) {
        if (loaded.count(b) || stored.count(b)) return lr;  // the loop reads its own result
      }
      for (const Accumulate* o : accs) {
        if (o->buffers[0] == a->buffers[0] && o->op != a->op) return lr;
      }
      bytes = std::max(bytes, lane_bytes(*a));
    }
    // K lanes of 256 bytes (eight AVX2 registers, four AVX-512 ones) hide the latency of the
    // combining op. A short loop takes fewer, down to one 64-byte vector, so that it runs about
    // four blocks and its final tree is short (measured on softmax rows of 32, 64, 128 f32:
    // 16, 16, 32 lanes beat 32, 64, 64 by 4-7%).
    int64_t k = std::clamp<int64_t>(256 / bytes, 8, 64);
    const int64_t min_k = std::max<int64_t>(4, 64 / bytes);
    if (std::optional<int64_t> n = as_const_int(f.extent)) {
      while (k > min_k && 4 * k > *n) k /= 2;
      while (k > 1 && k > *n) k /= 2;
    }
    if (k < 4) return lr;  // a handful of elements: the plain loop is best
    lr.kind = LaneReduction::Kind::Lanes;
    lr.lanes = k;
    return lr;
  }

  // The lane arrays of accumulator `i`: one per buffer of its op.
  struct LaneAcc {
    const Accumulate* acc = nullptr;
    std::string index;               // the accumulator element, as C++
    std::vector<std::string> lanes;  // per buffer: the lane array
    std::vector<std::string> ctype;  // per buffer: the lane type
  };

  // `dst op= src` for lanes or accumulators given as C++ lvalues/values, per buffer.
  void combine(int ind, ReduceOp op, const std::string& ct, const std::vector<std::string>& dst,
               const std::vector<std::string>& src) {
    switch (op) {
      case ReduceOp::Sum:
        line(ind, dst[0] + " = " + dst[0] + " + " + src[0] + ";");
        return;
      case ReduceOp::Prod:
        line(ind, dst[0] + " = " + dst[0] + " * " + src[0] + ";");
        return;
      case ReduceOp::Max:
        line(ind, dst[0] + " = ember_max_acc<" + ct + ">(" + dst[0] + ", " + src[0] + ");");
        return;
      case ReduceOp::Min:
        line(ind, dst[0] + " = ember_min_acc<" + ct + ">(" + dst[0] + ", " + src[0] + ");");
        return;
      case ReduceOp::Any:
        line(ind, dst[0] + " = " + dst[0] + " | " + src[0] + ";");
        return;
      case ReduceOp::All:
        line(ind, dst[0] + " = " + dst[0] + " & " + src[0] + ";");
        return;
      case ReduceOp::ArgMax:
      case ReduceOp::ArgMin: {
        std::string w = "w" + std::to_string(lane_counter_) + "_";
        line(ind, "{");
        line(ind + 1, "const bool " + w + " = ember_arg_better<" + ct + ">(" + src[0] + ", " +
                          src[1] + ", " + dst[0] + ", " + dst[1] + ", " +
                          (op == ReduceOp::ArgMax ? "true" : "false") + ");");
        line(ind + 1, dst[0] + " = " + w + " ? " + src[0] + " : " + dst[0] + ";");
        line(ind + 1, dst[1] + " = " + w + " ? " + src[1] + " : " + dst[1] + ";");
        line(ind, "}");
        return;
      }
      case ReduceOp::WelfordReduce:
      case ReduceOp::WelfordCombine:
        break;
    }
    EMBER_INTERNAL_ASSERT(false) << "no lane combine for " << reduce_op_name(op);
  }

  void emit_lane_reduction(const For& f, const LaneReduction& lr, int ind) {
    const int id = lane_counter_++;
    const std::string sfx = std::to_string(id);
    const std::string l = "l" + sfx, k = std::to_string(lr.lanes);
    const std::string n = "n" + sfx, m = "m" + sfx, b = "b" + sfx;
    std::vector<LaneAcc> accs;
    bool cascade = false;
    for (size_t i = 0; i < lr.accs.size(); ++i) {
      const Accumulate* a = lr.accs[i];
      LaneAcc la{a, expr(a->index), {}, {}};
      for (size_t j = 0; j < a->buffers.size(); ++j) {
        la.lanes.push_back("ln" + sfx + "_" + std::to_string(i) + "_" + std::to_string(j));
        la.ctype.push_back(j == 0 ? compute_type(a->values[0].dtype()) : "int64_t");
      }
      cascade |= a->op == ReduceOp::Sum && is_float(a->values[0].dtype());
      accs.push_back(std::move(la));
    }
    std::optional<int64_t> extent = as_const_int(f.extent);
    // Levels of the cascade beyond the lanes themselves (0, 1 or 2).
    const int64_t block = lr.lanes * kCascadeBlocks;
    int levels = 0;
    if (cascade) levels = !extent ? 2 : *extent > block * kCascadeBlocks ? 2 : *extent > block ? 1 : 0;
    auto level_name = [](const LaneAcc& la, int lev) { return la.lanes[0] + "_c" + std::to_string(lev); };
    auto cascaded = [&](const LaneAcc& la) {
      return la.acc->op == ReduceOp::Sum && is_float(la.acc->values[0].dtype());
    };
    auto lane_loop = [&](int i, const std::string& bound) {
      line(i, "#pragma omp simd");
      line(i, "for (int64_t " + l + " = 0; " + l + " < " + bound + "; ++" + l + ") {");
    };

    line(ind, "{");
    line(ind + 1, "// reduction over " + expr(f.var) + " in " + k + " lanes");
    for (const LaneAcc& la : accs) {
      for (size_t j = 0; j < la.lanes.size(); ++j) {
        line(ind + 1, la.ctype[j] + " " + la.lanes[j] + "[" + k + "];");
      }
      for (int lev = 1; lev <= levels && cascaded(la); ++lev) {
        line(ind + 1, la.ctype[0] + " " + level_name(la, lev) + "[" + k + "];");
      }
    }
    lane_loop(ind + 1, k);
    for (const LaneAcc& la : accs) {
      for (size_t j = 0; j < la.lanes.size(); ++j) {
        Expr init = reduction_identity(la.acc->op, static_cast<int>(j),
                                       j == 0 ? la.acc->values[0].dtype() : kIndexType);
        line(ind + 2, la.lanes[j] + "[" + l + "] = " + val(init) + ";");
      }
      for (int lev = 1; lev <= levels && cascaded(la); ++lev) {
        line(ind + 2, level_name(la, lev) + "[" + l + "] = 0;");
      }
    }
    line(ind + 1, "}");
    line(ind + 1, "const int64_t " + n + " = " + expr(f.extent) + ";");
    line(ind + 1, "const int64_t " + m + " = " + n + " - " + n + " % " + k + ";");

    // The body, once per element, with the reduced accumulators redirected to lane l.
    auto body = [&](int i, const std::string& first) {
      line(i, "const int64_t " + expr(f.var) + " = " + expr(f.min) + " + " + first + " + " + l +
                  ";");
      for (const LaneAcc& la : accs) {
        std::vector<std::string> refs;
        for (const std::string& lane : la.lanes) refs.push_back(lane + "[" + l + "]");
        lane_refs_[acc_key(*la.acc, la.index)] = refs;
      }
      stmt(f.body, i);
      lane_refs_.clear();
    };
    // Flushes level `lev - 1` (the lanes when lev == 1) into level `lev`.
    auto flush = [&](int i, int lev) {
      lane_loop(i, k);
      for (const LaneAcc& la : accs) {
        if (!cascaded(la)) continue;
        std::string from = lev == 1 ? la.lanes[0] : level_name(la, lev - 1);
        std::string to = level_name(la, lev);
        line(i + 1, to + "[" + l + "] = " + to + "[" + l + "] + " + from + "[" + l + "];");
        line(i + 1, from + "[" + l + "] = 0;");
      }
      line(i, "}");
    };

    // Main blocks of K, nested in chunks of C blocks per cascade level.
    int i = ind + 1;
    std::vector<std::string> starts = {"0"};
    for (int lev = levels; lev >= 1; --lev) {
      std::string c = "c" + sfx + "_" + std::to_string(lev);
      int64_t span = lr.lanes * (lev == 2 ? kCascadeBlocks * kCascadeBlocks : kCascadeBlocks);
      std::string lo = starts.back(), sp = std::to_string(span);
      std::string hi = lev == levels ? m : "std::min<int64_t>(" + lo + " + " + std::to_string(span * kCascadeBlocks) + ", " + m + ")";
      line(i, "for (int64_t " + c + " = " + lo + "; " + c + " < " + hi + "; " + c + " += " + sp +
                  ") {");
      starts.push_back(c);
      ++i;
    }
    {
      std::string lo = starts.back();
      std::string hi = levels == 0 ? m
                                   : "std::min<int64_t>(" + lo + " + " +
                                         std::to_string(lr.lanes * kCascadeBlocks) + ", " + m + ")";
      line(i, "for (int64_t " + b + " = " + lo + "; " + b + " < " + hi + "; " + b + " += " + k +
                  ") {");
      lane_loop(i + 1, k);
      body(i + 2, b);
      line(i + 1, "}");
      line(i, "}");
    }
    for (int lev = 1; lev <= levels; ++lev) {
      flush(i, lev);
      --i;
      line(i, "}");
    }
    // The tail: fewer than K elements.
    if (!extent || *extent % lr.lanes != 0) {
      lane_loop(ind + 1, n + " - " + m);
      body(ind + 2, m);
      line(ind + 1, "}");
    }
    // Levels back into the lanes, then the lanes into one by a fixed tree, into the accumulator.
    if (levels > 0) {
      lane_loop(ind + 1, k);
      for (const LaneAcc& la : accs) {
        if (!cascaded(la)) continue;
        std::string sum = level_name(la, levels) + "[" + l + "]";
        for (int lev = levels - 1; lev >= 1; --lev) {
          sum = "(" + sum + " + " + level_name(la, lev) + "[" + l + "])";
        }
        line(ind + 2, la.lanes[0] + "[" + l + "] = " + sum + " + " + la.lanes[0] + "[" + l + "];");
      }
      line(ind + 1, "}");
    }
    for (int64_t w = lr.lanes / 2; w >= 1; w /= 2) {
      // The last two halvings (2 and 1 lanes) as plain code: GCC's vector code for them goes
      // through the stack.
      if (w <= 2) {
        line(ind + 1, "for (int64_t " + l + " = 0; " + l + " < " + std::to_string(w) + "; ++" + l +
                          ") {");
      } else {
        lane_loop(ind + 1, std::to_string(w));
      }
      for (const LaneAcc& la : accs) {
        std::vector<std::string> dst, src;
        for (const std::string& lane : la.lanes) {
          dst.push_back(lane + "[" + l + "]");
          src.push_back(lane + "[" + l + " + " + std::to_string(w) + "]");
        }
        combine(ind + 2, la.acc->op, la.ctype[0], dst, src);
      }
      line(ind + 1, "}");
    }
    for (const LaneAcc& la : accs) {
      const Accumulate& a = *la.acc;
      DType t = a.values[0].dtype();
      std::vector<std::string> cur, src;
      for (size_t j = 0; j < a.buffers.size(); ++j) {
        std::string ref = buf_name(a.buffers[j]) + "[" + la.index + "]";
        cur.push_back(j == 0 && is_low_float(t) ? "static_cast<float>(" + ref + ")" : ref);
        src.push_back(la.lanes[j] + "[0]");
      }
      // Combine in the compute type, then store (rounding a bf16/f16 accumulator once).
      std::string tmp = "t" + sfx + "_" + a.buffers[0];
      std::vector<std::string> tmps;
      for (size_t j = 0; j < a.buffers.size(); ++j) {
        tmps.push_back(tmp + "_" + std::to_string(j));
        line(ind + 1, la.ctype[j] + " " + tmps.back() + " = " + cur[j] + ";");
      }
      combine(ind + 1, a.op, la.ctype[0], tmps, src);
      for (size_t j = 0; j < a.buffers.size(); ++j) {
        line(ind + 1, buf_name(a.buffers[j]) + "[" + la.index + "] = " +
                          (j == 0 ? round_to(t, tmps[j]) : tmps[j]) + ";");
      }
    }
    line(ind, "}");
  }

  void emit_for(const std::string& v, const std::string& lo, const std::string& hi,
                const Stmt& body, int ind) {
    line(ind, "for (int64_t " + v + " = " + lo + "; " + v + " < " + hi + "; ++" + v + ") {");
    stmt(body, ind + 1);
    line(ind, "}");
  }

  void accumulate(const Accumulate& a, int ind) {
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

  // Largest scratch buffer kept on the stack (per-row accumulators, tiles of them, scratch rows).
  static constexpr int64_t kMaxStackBytes = 64 * 1024;

  const Kernel& k_;
  std::ostringstream out_;
  int parallel_depth_ = 0;
  int lane_counter_ = 0;  // numbers the lane reductions of the kernel, for unique C++ names
  // While emitting a lane reduction's body: accumulator element -> its lane lvalues.
  std::map<std::string, std::vector<std::string>> lane_refs_;
};

}  // namespace

std::string cpp_kernel_symbol(const std::string& name) {
  return "ember_kernel_" + name;
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
