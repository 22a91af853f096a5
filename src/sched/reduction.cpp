#include "sched/reduction.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "loop/simplify.h"
#include "loop/traverse.h"
#include "sched/kernel_params.h"
#include "sched/pointwise.h"
#include "sched/reduction_loops.h"
#include "sched/reduction_spec.h"
#include "sched/size_expr.h"
#include "support/error.h"

namespace ember::sched {

namespace {

using graph::ValueId;
using loop::collect_vars;
using loop::DType;
using loop::Expr;
using loop::ExprKind;
using loop::ReduceOp;
using loop::Stmt;
using Kind = ReductionKind;

Expr cast(DType t, Expr e) {
  return e.dtype() == t ? e : loop::Cast::make(t, std::move(e));
}
Expr fconst(DType t, double v) {
  return loop::FloatImm::make(t, v);
}
Expr call(loop::CallFn fn, Expr a) {
  return loop::Call::make(fn, {std::move(a)});
}
Expr bin(ExprKind k, Expr a, Expr b) {
  return loop::make_binary(k, std::move(a), std::move(b));
}
Expr add(Expr a, Expr b) {
  return bin(ExprKind::Add, std::move(a), std::move(b));
}
Expr sub(Expr a, Expr b) {
  return bin(ExprKind::Sub, std::move(a), std::move(b));
}
Expr mul(Expr a, Expr b) {
  return bin(ExprKind::Mul, std::move(a), std::move(b));
}
Expr div(Expr a, Expr b) {
  return bin(ExprKind::Div, std::move(a), std::move(b));
}

// The type eager computes a `t` result in: f32 for bf16/f16, else `t` itself.
DType opmath(DType t) {
  return t == DType::BFloat16 || t == DType::Float16 ? DType::Float32 : t;
}

// Builds the RowProgram of one reduction node: the per-kind kernels of docs/design/scheduler.md.
class ProgramBuilder {
 public:
  // `siblings`: the specs of fusion.siblings' nodes, in order.
  // `order`: the strides the loops follow (the input's, or what its prologue reads).
  ProgramBuilder(const graph::Graph& g, const ReductionSpec& s, const graph::Dims& order,
                 const std::map<ValueId, std::string>& buffer_of, const ReductionFusion& fusion,
                 const std::vector<ReductionSpec>& siblings, bool keep_prologue_rows)
      : g_(g),
        s_(s),
        buffer_of_(buffer_of),
        fusion_(fusion),
        siblings_(siblings),
        space_{s.sizes, s.reduced, order, &g.symbols} {
    if (keep_prologue_rows && fusion_.x.defined() && passes_over_row_again(s_.kind) &&
        uses_inner_layout(space_) && n().is_constant() && n().constant() <= kMaxScratchRow) {
      x_kept_ = loop::Var::make("t_x", opmath(dtype(s_.x.value)));
    }
  }

  RowProgram build() {
    kind_program();
    if (x_kept_.defined()) keep_input_row();
    if (!fusion_.x_lets.empty()) bind_input_lets();
    if (fusion_.epilogue.defined()) epilogue();
    return std::move(p_);
  }

 private:
  // The epilogue pass. Its lets that do not vary along the row (rsqrt(var + eps) of a norm, a
  // per-row scale) become per-row values computed once per row by a Row step: computed once,
  // and read from a scratch buffer the compiler knows no store aliases, so the element loop
  // vectorizes (a load of an output buffer inside an OpenMP region is reloaded every iteration).
  void epilogue() {
    Stmt s = fusion_.epilogue;
    std::vector<std::pair<Expr, Expr>> lets;
    while (const auto* let = s.as<loop::Let>()) {
      lets.emplace_back(let->var, let->value);
      s = let->body;
    }
    std::set<std::string> varying;  // the reduced dims' variables and the lets that read them
    for (size_t d = 0; d < s_.sizes.size(); ++d) {
      if (s_.reduced[d]) varying.insert(element_var(d).as<loop::Var>()->name);
    }
    std::map<std::string, Expr> per_row;
    std::vector<std::pair<Expr, Expr>> per_element;
    for (const auto& [var, value] : lets) {
      const std::string& name = var.as<loop::Var>()->name;
      Expr v = loop::substitute(value, per_row);
      std::set<std::string> used;
      collect_vars(v, used);
      bool varies = false;
      for (const std::string& u : used) varies |= varying.count(u) > 0;
      if (varies) {
        varying.insert(name);
        per_element.emplace_back(var, v);
      } else {
        per_row[name] = define("row_" + name, v);
      }
    }
    Stmt body = loop::substitute(s, per_row);
    for (size_t i = per_element.size(); i-- > 0;) {
      body = loop::Let::make(per_element[i].first, per_element[i].second, body);
    }
    elements({body});
  }

  // Note [A prologue kept in a scratch row]
  // A layer norm, softmax, variance or logsumexp passes over its row two or three times, and a
  // fused prologue was computed again in each pass. A prologue that gathers (Swin's window
  // reverse and cyclic shift before its norm: div and mod per index, loads that do not
  // vectorize) then cost three times what it does once: the norm kernels of
  // swin_large_patch4_window7_224 on the CPU took as long as eager's unfused ops. With
  // ScheduleOptions::keep_prologue_rows the input element, in the compute type, is a variable
  // `t_x` (x() below) bound in the first pass that reads it to the prologue, stored in the
  // scratch row `x_row` (f32: at most kMaxScratchRow elements, a constant row of the inner
  // layout) and bound in the later passes to a load of it: a contiguous row in L1 instead of the
  // gathers. The values are the prologue's own (the compute type holds the input's dtype
  // exactly), so results do not change.
  static bool passes_over_row_again(Kind k) {
    switch (k) {
      case Kind::Var:
      case Kind::Std:
      case Kind::VarMean:
      case Kind::StdMean:
      case Kind::LogSumExp:
      case Kind::Softmax:
      case Kind::LogSoftmax:
      case Kind::SafeSoftmax:
      case Kind::LayerNorm:
        return true;
      default:
        return false;
    }
  }

  void keep_input_row() {
    const std::string& name = x_kept_.as<loop::Var>()->name;
    std::vector<RowStep*> readers;
    for (RowStep& step : p_.steps) {
      if (step.kind != RowStep::Kind::Elements) continue;
      std::set<std::string> used;
      collect_vars(step.body, used);
      if (used.count(name)) readers.push_back(&step);
    }
    const Expr computed = cast(x_kept_.dtype(), fusion_.x);
    if (readers.size() < 2) {  // one pass reads it: nothing to keep
      for (RowStep* step : readers) step->body = loop::Let::make(x_kept_, computed, step->body);
      return;
    }
    p_.values.push_back({"x_row", x_kept_.dtype(), /*per_element=*/true});
    const Expr at = reduced_flat_index();
    Stmt& first = readers[0]->body;
    first = loop::Let::make(x_kept_, computed,
                            loop::Block::make({loop::Store::make("x_row", at, x_kept_), first}));
    for (size_t i = 1; i < readers.size(); ++i) {
      readers[i]->body = loop::Let::make(x_kept_, loop::Load::make(x_kept_.dtype(), "x_row", at),
                                         readers[i]->body);
    }
  }

  // Every Elements step that reads the inline input gets the lets it uses.
  void bind_input_lets() {
    for (RowStep& step : p_.steps) {
      if (step.kind != RowStep::Kind::Elements) continue;
      std::set<std::string> used;
      collect_vars(step.body, used);
      Stmt body = step.body;
      for (size_t i = fusion_.x_lets.size(); i-- > 0;) {
        const auto& [var, value] = fusion_.x_lets[i];
        if (!used.count(var.as<loop::Var>()->name)) continue;
        collect_vars(value, used);
        body = loop::Let::make(var, value, body);
      }
      step.body = body;
    }
  }

  void kind_program() {
    const DType xd = dtype(s_.x.value);
    switch (s_.kind) {
      case Kind::Sum:
      case Kind::Mean:
      case Kind::Prod:
      case Kind::Amax:
      case Kind::Amin:
        single_accumulators();
        break;
      case Kind::ArgMax:
      case Kind::ArgMin:
      case Kind::MaxDim:
      case Kind::MinDim: {
        const DType a = opmath(xd);
        const bool max = s_.kind == Kind::ArgMax || s_.kind == Kind::MaxDim;
        ReduceOp op = max ? ReduceOp::ArgMax : ReduceOp::ArgMin;
        add_value("acc_v", a);
        add_value("acc_i", loop::kIndexType);
        row({set("acc_v", loop::reduction_identity(op, 0, a)),
             set("acc_i", loop::reduction_identity(op, 1, a))});
        elements({loop::Accumulate::make(op, {"acc_v", "acc_i"}, row_index(),
                                         {x(a), reduced_flat_index()})});
        if (s_.kind == Kind::ArgMax || s_.kind == Kind::ArgMin) {
          row({store(0, value("acc_i", loop::kIndexType))});
        } else {
          row({store(0, value("acc_v", a)), store(1, value("acc_i", loop::kIndexType))});
        }
        break;
      }
      case Kind::Any:
      case Kind::All: {
        ReduceOp op = s_.kind == Kind::Any ? ReduceOp::Any : ReduceOp::All;
        init("acc", op, DType::Bool);
        elements({accumulate(op, "acc", cast(DType::Bool, x_raw()))});
        row({store(0, value("acc", DType::Bool))});
        break;
      }
      case Kind::Var:
      case Kind::Std:
      case Kind::VarMean:
      case Kind::StdMean:
        variance();
        break;
      case Kind::LogSumExp:
        logsumexp();
        break;
      case Kind::Softmax:
      case Kind::LogSoftmax:
      case Kind::SafeSoftmax:
        softmax();
        break;
      case Kind::LayerNorm:
      case Kind::GroupNorm:
        normalize();
        break;
      case Kind::BatchNorm:
        batch_norm();
        break;
    }
  }

  DType dtype(ValueId v) const { return *to_loop_dtype(g_.type(v).dtype); }
  graph::DimExpr n() const { return s_.reduced_numel(); }
  // The elements per row as a `t` value: a constant, or the symbolic count converted per call.
  Expr count(DType t) const {
    if (std::optional<int64_t> c = n().as_constant()) return fconst(t, static_cast<double>(*c));
    return cast(t, dim_expr(n()));
  }

  // ---- operands -------------------------------------------------------------------------

  Expr offset(const ReductionOperand& o) const {
    Expr off = loop::idx(0);
    for (size_t d = 0; d < o.strides.size(); ++d) {
      if (!is_constant(o.strides[d], 0)) {
        off = add(off, mul(element_var(d), dim_expr(o.strides[d])));
      }
    }
    return loop::simplify(off);
  }
  Expr load(const ReductionOperand& o) const {
    return loop::Load::make(dtype(o.value), buffer_of_.at(o.value), offset(o));
  }
  // The input element (computed inline with a prologue), converted to `t`.
  Expr x(DType t) const { return cast(t, x_kept_.defined() ? x_kept_ : x_raw()); }
  Expr x_raw() const { return fusion_.x.defined() ? fusion_.x : load(s_.x); }
  // Sibling `i`'s input element, computed inline or loaded.
  Expr sibling_x(size_t i) const {
    const Expr& inline_x = fusion_.siblings[i].x;
    return inline_x.defined() ? inline_x : load(siblings_[i].x);
  }
  // Output `i` of the node gets `v` (converted to its dtype), when something needs it.
  Stmt store(size_t i, Expr v) const { return store_to(s_.outputs[i], std::move(v)); }
  Stmt store_to(const ReductionOperand& o, Expr v) const {
    auto it = buffer_of_.find(o.value);
    if (it == buffer_of_.end()) return loop::Block::make({});
    return loop::Store::make(it->second, offset(o), cast(dtype(o.value), std::move(v)));
  }
  bool needed(size_t i) const { return buffer_of_.count(s_.outputs[i].value) > 0; }
  // The flat index of the element within its row: reduced dims in row-major order (argmax).
  Expr reduced_flat_index() const {
    Expr index = loop::idx(0);
    graph::DimExpr stride = 1;
    for (size_t d = s_.sizes.size(); d-- > 0;) {
      if (!s_.reduced[d]) continue;
      if (!is_constant(s_.sizes[d], 1)) {
        index = add(index, mul(element_var(d), dim_expr(stride)));
      }
      stride = stride * s_.sizes[d];
    }
    return loop::simplify(index);
  }

  // ---- per-row values and steps -----------------------------------------------------------

  void add_value(const std::string& name, DType t) { p_.values.push_back({name, t}); }
  Expr value(const std::string& name, DType t) const {
    return loop::Load::make(t, name, row_index());
  }
  Stmt set(const std::string& name, Expr v) const {
    return loop::Store::make(name, row_index(), std::move(v));
  }
  // A per-row accumulator `name` of `t`, initialised to the identity of `op` (a Row step).
  void init(const std::string& name, ReduceOp op, DType t) {
    add_value(name, t);
    row({set(name, loop::reduction_identity(op, 0, t))});
  }
  // A per-row value `name` computed by `v` (a Row step).
  Expr define(const std::string& name, Expr v) {
    DType t = v.dtype();
    add_value(name, t);
    row({set(name, std::move(v))});
    return value(name, t);
  }
  Stmt accumulate(ReduceOp op, const std::string& name, Expr v) const {
    return loop::Accumulate::make(op, {name}, row_index(), {std::move(v)});
  }
  void row(std::vector<Stmt> body) {
    if (!p_.steps.empty() && p_.steps.back().kind == RowStep::Kind::Row) {
      body.insert(body.begin(), p_.steps.back().body);
      p_.steps.back().body = loop::Block::make(std::move(body));
      return;
    }
    p_.steps.push_back({RowStep::Kind::Row, loop::Block::make(std::move(body))});
  }
  void elements(std::vector<Stmt> body) {
    p_.steps.push_back({RowStep::Kind::Elements, loop::Block::make(std::move(body))});
  }

  // ---- kernels ----------------------------------------------------------------------------

  // Sum, mean, prod, amax, amin: one accumulator each, for the node and every sibling, folded in
  // one pass (Note [Sibling reductions]). Sums accumulate in the output's compute type, extrema
  // in the input's.
  void single_accumulators() {
    std::vector<Stmt> inits, folds, stores;
    for (size_t i = 0; i <= siblings_.size(); ++i) {
      const ReductionSpec& m = i == 0 ? s_ : siblings_[i - 1];
      const Expr xm = i == 0 ? x_raw() : sibling_x(i - 1);
      const bool extremum = m.kind == Kind::Amax || m.kind == Kind::Amin;
      const DType a = opmath(dtype(extremum ? m.x.value : m.outputs[0].value));
      const ReduceOp op = m.kind == Kind::Prod   ? ReduceOp::Prod
                          : m.kind == Kind::Amax ? ReduceOp::Max
                          : m.kind == Kind::Amin ? ReduceOp::Min
                                                 : ReduceOp::Sum;
      const std::string name = i == 0 ? "acc" : "acc" + std::to_string(i);
      add_value(name, a);
      inits.push_back(set(name, loop::reduction_identity(op, 0, a)));
      folds.push_back(accumulate(op, name, cast(a, xm)));
      Expr total = value(name, a);
      if (m.kind == Kind::Mean) total = div(total, count(a));
      stores.push_back(store_to(m.outputs[0], total));
    }
    row(std::move(inits));
    elements(std::move(folds));
    row(std::move(stores));
  }

  // Two passes: the mean, then the sum of squared deviations from it; in f64 as eager's
  // (Welford) kernel accumulates. var = m2 / max(N - correction, 0).
  void variance() {
    const DType a = DType::Float64;
    init("acc_sum", ReduceOp::Sum, a);
    elements({accumulate(ReduceOp::Sum, "acc_sum", x(a))});
    Expr mu = define("mu", div(value("acc_sum", a), count(a)));
    init("acc_m2", ReduceOp::Sum, a);
    Expr dev = loop::Var::make("t_dev", a);
    elements(
        {loop::Let::make(dev, sub(x(a), mu), accumulate(ReduceOp::Sum, "acc_m2", mul(dev, dev)))});
    Expr divisor;  // max(0, N - correction)
    if (std::optional<int64_t> c = n().as_constant()) {
      divisor = fconst(a, std::max(0.0, static_cast<double>(*c) - s_.correction));
    } else {
      Expr d = sub(count(a), fconst(a, s_.correction));
      divisor = loop::Select::make(bin(ExprKind::LT, fconst(a, 0), d), d, fconst(a, 0));
    }
    Expr var = div(value("acc_m2", a), divisor);
    const bool std = s_.kind == Kind::Std || s_.kind == Kind::StdMean;
    std::vector<Stmt> out = {store(0, std ? call(loop::CallFn::Sqrt, var) : var)};
    if (s_.kind == Kind::VarMean || s_.kind == Kind::StdMean) out.push_back(store(1, mu));
    row(std::move(out));
  }

  // Eager: m = amax (0 where infinite), log(sum(exp(x - m))) + m.
  void logsumexp() {
    const DType a = opmath(dtype(s_.outputs[0].value));
    init("acc_max", ReduceOp::Max, a);
    elements({accumulate(ReduceOp::Max, "acc_max", x(a))});
    Expr mx = value("acc_max", a);
    Expr inf = fconst(a, std::numeric_limits<double>::infinity());
    Expr shift = define(
        "shift",
        loop::Select::make(bin(ExprKind::EQ, call(loop::CallFn::Abs, mx), inf), fconst(a, 0), mx));
    init("acc_sum", ReduceOp::Sum, a);
    elements({accumulate(ReduceOp::Sum, "acc_sum", call(loop::CallFn::Exp, sub(x(a), shift)))});
    row({store(0, add(call(loop::CallFn::Log, value("acc_sum", a)), shift))});
  }

  // Eager: exp(x - max) * (1 / sum), or (x - max) - log(sum). Softmax computes exp(x - max)
  // once per element, as eager's kernel: it keeps it between the sum and the scaling in its
  // output when that has the compute type, else (bf16) in an f32 scratch row where rows are
  // short and contiguous enough, else computes it twice.
  void softmax() {
    const DType xd = dtype(s_.x.value);
    const DType a = opmath(xd);
    init("acc_max", ReduceOp::Max, a);
    elements({accumulate(ReduceOp::Max, "acc_max", x(a))});
    Expr mx = value("acc_max", a);
    init("acc_sum", ReduceOp::Sum, a);
    Expr sum = value("acc_sum", a);
    if (s_.kind == Kind::Softmax || s_.kind == Kind::SafeSoftmax) {
      const bool in_output = dtype(s_.outputs[0].value) == a;
      const bool in_scratch = !in_output && uses_inner_layout(space_) && n().is_constant() &&
                              n().constant() <= kMaxScratchRow;
      Expr e = loop::Var::make("t_exp", a);
      std::vector<Stmt> pass = {accumulate(ReduceOp::Sum, "acc_sum", e)};
      Expr kept;  // where exp(x - max) is kept, if anywhere
      if (in_output) {
        pass.insert(pass.begin(), store(0, e));
        kept = load(s_.outputs[0]);
      } else if (in_scratch) {
        p_.values.push_back({"exp_row", a, /*per_element=*/true});
        pass.insert(pass.begin(), loop::Store::make("exp_row", reduced_flat_index(), e));
        kept = loop::Load::make(a, "exp_row", reduced_flat_index());
      }
      elements(
          {loop::Let::make(e, call(loop::CallFn::Exp, sub(x(a), mx)), loop::Block::make(pass))});
      Expr inv = define("inv", div(fconst(a, 1), sum));
      Expr y = mul(kept.defined() ? kept : call(loop::CallFn::Exp, sub(x(a), mx)), inv);
      if (s_.kind == Kind::SafeSoftmax) {
        // A row of -inf only (its max is -inf) is 0, as eager's where(all(x == -inf), 0, softmax).
        const Expr neg_inf = fconst(a, -std::numeric_limits<double>::infinity());
        y = loop::Select::make(bin(ExprKind::EQ, mx, neg_inf), fconst(a, 0), y);
      }
      elements({store(0, y)});
      return;
    }
    elements({accumulate(ReduceOp::Sum, "acc_sum", call(loop::CallFn::Exp, sub(x(a), mx)))});
    Expr log_sum = call(loop::CallFn::Log, sum);
    // Eager's last-dim kernel keeps the sum and its log in the input's dtype: for bf16 both are
    // rounded (its other-dim kernel keeps them in f32).
    if (xd != a && s_.last_dim) {
      log_sum = cast(a, cast(xd, call(loop::CallFn::Log, cast(a, cast(xd, sum)))));
    }
    Expr lse = define("lse", log_sum);
    elements({store(0, sub(sub(x(a), mx), lse))});
  }

  // layer_norm and group_norm: mean, then the mean of squared deviations (two passes), then
  // eager's formulas in the compute type.
  void normalize() {
    const DType a = opmath(dtype(s_.x.value));
    const Expr count = this->count(a);
    init("acc_sum", ReduceOp::Sum, a);
    elements({accumulate(ReduceOp::Sum, "acc_sum", x(a))});
    Expr mu = define("mu", div(value("acc_sum", a), count));
    init("acc_m2", ReduceOp::Sum, a);
    Expr dev = loop::Var::make("t_dev", a);
    elements(
        {loop::Let::make(dev, sub(x(a), mu), accumulate(ReduceOp::Sum, "acc_m2", mul(dev, dev)))});
    Expr rstd = define(
        "rstd", call(loop::CallFn::Rsqrt, add(div(value("acc_m2", a), count), fconst(a, s_.eps))));
    std::vector<Stmt> stats = {store(1, mu), store(2, rstd)};
    auto param = [&](const std::optional<ReductionOperand>& o) { return cast(a, load(*o)); };
    if (!needed(0)) {
      row(std::move(stats));
      return;
    }
    Expr y;
    if (s_.kind == Kind::GroupNorm) {
      // scale = rstd [* weight], bias = -scale * mean [+ bias]; y = x * scale + bias.
      Expr scale = s_.weight ? mul(rstd, param(s_.weight)) : rstd;
      Expr shift = mul(call(loop::CallFn::Neg, scale), mu);
      if (s_.bias) shift = add(shift, param(s_.bias));
      y = add(mul(x(a), scale), shift);
    } else if (s_.weight && s_.bias) {
      // (x * rstd + (-rstd * mean)) * weight + bias
      row(std::move(stats));
      stats.clear();
      Expr shift = define("shift", mul(call(loop::CallFn::Neg, rstd), mu));
      y = add(mul(add(mul(x(a), rstd), shift), param(s_.weight)), param(s_.bias));
    } else {
      // (x - mean) * rstd [* weight] [+ bias]
      y = mul(sub(x(a), mu), rstd);
      if (s_.weight) y = mul(y, param(s_.weight));
      if (s_.bias) y = add(y, param(s_.bias));
    }
    if (!stats.empty()) row(std::move(stats));
    elements({store(0, y)});
  }

  // Training-mode batch norm, as eager's CPU kernel on its contiguous path (batch_norm.cpp's
  // batch_norm_cpu_update_stats_template, cpu/batch_norm_kernel.cpp): the sum in eager's
  // accumulation type (f64 for f32 and f64 inputs, f32 for bf16; f32 for f32 channels-last),
  // mean = sum / n rounded to the compute type; the sum of squared deviations from it (squares
  // in the compute type, summed as the sum); both rounded to the [C] tensors' dtype p; then per
  // channel, with
  // p's arithmetic (c10::BFloat16 rounds after every operation):
  //   save_invstd = 1 / sqrt(var_sum / n + eps) in f64 (0 when both are 0),
  //   running_mean = momentum * mean + (1 - momentum) * running_mean,
  //   running_var = momentum * (var_sum / (n - 1)) + (1 - momentum) * running_var (the first
  //   product and the sum in the accumulation type; n = 1 gives NaN, as eager),
  //   y = x * alpha + beta, alpha = invstd * w, beta = b - mean * alpha (in the compute type).
  void batch_norm() {
    const DType xd = dtype(s_.x.value);
    const DType op = opmath(xd);
    const DType acc = xd == DType::BFloat16 ? DType::Float32 : DType::Float64;
    // Eager's channels-last kernel sums f32 inputs in f32 (per-thread partials, combined in f64):
    // so does the outer layout, where f32 lanes run twice as fast as f64.
    const DType sum_t = uses_inner_layout(space_) ? acc : op;
    const DType p = param_dtype();
    const DType pm = opmath(p);
    auto in_p = [&](ExprKind k, const Expr& a, const Expr& b) {
      return cast(p, bin(k, cast(pm, a), cast(pm, b)));
    };
    auto p_const = [&](double v) { return cast(p, fconst(pm, v)); };
    const double count = static_cast<double>(n().constant());  // batch norm: static only

    init("acc_sum", ReduceOp::Sum, sum_t);
    elements({accumulate(ReduceOp::Sum, "acc_sum", x(sum_t))});
    Expr mu = define("mu", cast(op, div(cast(acc, value("acc_sum", sum_t)), fconst(acc, count))));
    init("acc_m2", ReduceOp::Sum, sum_t);
    Expr dev = loop::Var::make("t_dev", op);
    elements({loop::Let::make(dev, sub(x(op), mu),
                              accumulate(ReduceOp::Sum, "acc_m2", cast(sum_t, mul(dev, dev))))});
    Expr mean = define("mean", cast(pm, cast(p, mu)));
    Expr var_sum = define("var_sum", cast(pm, cast(p, value("acc_m2", sum_t))));
    const Expr var = cast(DType::Float64, in_p(ExprKind::Div, var_sum, p_const(count)));
    Expr inv = div(fconst(DType::Float64, 1),
                   call(loop::CallFn::Sqrt, add(var, fconst(DType::Float64, s_.eps))));
    if (s_.eps == 0) {
      inv = loop::Select::make(bin(ExprKind::NE, var, fconst(DType::Float64, 0)), inv,
                               fconst(DType::Float64, 0));
    }
    Expr invstd = define("invstd", cast(pm, cast(p, cast(acc, inv))));
    std::vector<Stmt> stats = {store(1, mean), store(2, invstd)};
    if (s_.running_mean && s_.running_var) {
      const Expr m = p_const(s_.momentum);
      const Expr keep = in_p(ExprKind::Sub, p_const(1), m);
      stats.push_back(store(3, in_p(ExprKind::Add, in_p(ExprKind::Mul, m, mean),
                                    in_p(ExprKind::Mul, keep, load(*s_.running_mean)))));
      const Expr unbiased = cast(acc, in_p(ExprKind::Div, var_sum, p_const(count - 1)));
      stats.push_back(store(4, add(mul(cast(acc, m), unbiased),
                                   cast(acc, in_p(ExprKind::Mul, keep, load(*s_.running_var))))));
    }
    row(std::move(stats));
    if (!needed(0)) return;
    auto param = [&](const std::optional<ReductionOperand>& o, double absent) {
      return o ? cast(op, load(*o)) : fconst(op, absent);
    };
    Expr alpha = define("alpha", mul(cast(op, invstd), param(s_.weight, 1)));
    Expr beta = define("beta", sub(param(s_.bias, 0), mul(cast(op, mean), alpha)));
    elements({store(0, add(mul(x(op), alpha), beta))});
  }

  // The dtype of batch norm's [C] tensors in eager: that of weight, bias and the running
  // statistics, or the input's when there are none (reduction_spec.cpp checks they agree).
  DType param_dtype() const {
    for (const auto* o : {&s_.weight, &s_.bias, &s_.running_mean, &s_.running_var}) {
      if (*o) return dtype((*o)->value);
    }
    return dtype(s_.x.value);
  }

  // Longest row kept in a scratch row (f32: 32 KiB of stack per thread).
  static constexpr int64_t kMaxScratchRow = 8192;

  const graph::Graph& g_;
  const ReductionSpec& s_;
  const std::map<ValueId, std::string>& buffer_of_;
  const ReductionFusion& fusion_;
  const std::vector<ReductionSpec>& siblings_;
  const ReductionSpace space_;
  /// The input element in the compute type, when a prologue is kept in a scratch row.
  Expr x_kept_;
  RowProgram p_;
};

// Note [Reduction loops in the order of what the prologue reads]
// The loops of a reduction kernel follow its input's strides (reduction_loops.h): the layout
// (rows inside, or columns in tiles) and the order of the reduced loops. A prologue computes the
// input inline, and its traced strides are those the input would have had in memory, not those
// of what the kernel reads. ATen's CUDA group_norm copies its input to contiguous first: over a
// channels-last activation (PoolFormer's GroupNorm(1) after channels-last convolutions) the
// copy is the prologue of the split group norm's sums, whose traced input is NCHW, so each
// program summed a channel over H x W at a stride of C elements in memory (one element per
// sector). When the prologue reads a buffer of the input's size at an index affine in the
// element variables (a permute, a clone, a view, a cast), the loops take that read's strides
// instead: the channel sums become column tiles over the contiguous channels, as Inductor orders
// loops by the strides of the buffers a kernel reads. Constant sizes only, not batch norm (whose
// accumulation type follows its input's layout, as eager's kernels); with several such reads,
// the first in the prologue's order; nothing else changes (the values are the same).
std::optional<graph::Dims> read_strides(const loop::Kernel& k, const ReductionSpec& spec,
                                        const ReductionFusion& fusion) {
  // Batch norm's accumulation type follows its input's own layout (eager's kernels).
  if (!fusion.x.defined() || spec.kind == Kind::BatchNorm || !graph::all_constant(spec.sizes)) {
    return std::nullopt;
  }
  int64_t numel = 1;
  for (const graph::DimExpr& d : spec.sizes) numel *= d.constant();
  std::vector<std::string> vars;
  for (size_t d = 0; d < spec.sizes.size(); ++d) {
    vars.push_back(element_var(d).as<loop::Var>()->name);
  }
  std::vector<const loop::Load*> loads;
  std::function<void(const Expr&)> walk = [&](const Expr& e) {
    if (const auto* l = e.as<loop::Load>()) loads.push_back(l);
    loop::for_each_child(e, walk);
  };
  for (const auto& [var, value] : fusion.x_lets) walk(value);
  walk(fusion.x);
  for (const loop::Load* l : loads) {
    auto buffer = std::find_if(k.buffers.begin(), k.buffers.end(),
                               [&](const loop::BufferParam& b) { return b.name == l->buffer; });
    if (buffer == k.buffers.end()) continue;
    int64_t elements = 1;
    for (const Expr& d : buffer->sizes) {
      const auto* c = d.as<loop::IntImm>();
      elements = c == nullptr || elements < 0 ? -1 : elements * c->value;
    }
    if (elements != numel) continue;
    std::optional<std::vector<int64_t>> c = loop::affine_coefficients(l->index, vars);
    if (!c || std::any_of(c->begin(), c->end(), [](int64_t s) { return s < 0; })) continue;
    graph::Dims strides;
    for (size_t d = 0; d < vars.size(); ++d) {
      strides.push_back(graph::DimExpr(spec.sizes[d].constant() == 1 ? 0 : (*c)[d]));
    }
    return strides;
  }
  return std::nullopt;
}

}  // namespace

bool is_reduction_kernel_node(const graph::Graph& g, const graph::Node& n) {
  return analyze_reduction(g, n).has_value();
}

bool takes_siblings(const ReductionSpec& spec) {
  switch (spec.kind) {
    case Kind::Sum:
    case Kind::Mean:
    case Kind::Prod:
    case Kind::Amax:
    case Kind::Amin:
      return spec.outputs.size() == 1;
    default:
      return false;
  }
}

bool takes_siblings(const graph::Graph& g, const graph::Node& n) {
  std::optional<ReductionSpec> spec = analyze_reduction(g, n, /*coalesce=*/false);
  return spec && takes_siblings(*spec);
}

bool supports_reduction_fusion(const graph::Graph& g, const graph::Node& n) {
  std::optional<ReductionSpec> spec = analyze_reduction(g, n, /*coalesce=*/false);
  return spec.has_value() && spec->kind != Kind::GroupNorm;
}

loop::Kernel build_reduction_kernel(const graph::Graph& g, const graph::Node& n,
                                    const KernelGroup& group, const std::string& name,
                                    const ScheduleOptions& options, const ReductionFusion& fusion) {
  const bool fused = fusion.x.defined() || fusion.epilogue.defined() || !fusion.siblings.empty();
  std::optional<ReductionSpec> spec = analyze_reduction(g, n, /*coalesce=*/!fused);
  EMBER_INTERNAL_ASSERT(spec.has_value()) << "build_reduction_kernel: unsupported node";
  EMBER_INTERNAL_ASSERT(!group.outputs.empty()) << "build_reduction_kernel: no outputs";
  EMBER_INTERNAL_ASSERT(!fused || spec->kind != Kind::GroupNorm)
      << "build_reduction_kernel: group_norm takes no fusion";
  loop::Kernel k;
  k.name = name;
  const std::map<ValueId, std::string> buffer_of = add_group_buffers(g, group, k);
  std::vector<ReductionSpec> siblings;
  for (const ReductionSibling& sib : fusion.siblings) {
    std::optional<ReductionSpec> s = analyze_reduction(g, *sib.node, /*coalesce=*/false);
    EMBER_INTERNAL_ASSERT(s && takes_siblings(*spec) && takes_siblings(*s) &&
                          s->sizes == spec->sizes && s->reduced == spec->reduced)
        << "build_reduction_kernel: a sibling reduction over another space";
    siblings.push_back(std::move(*s));
  }
  // The loops follow what the prologue reads (Note [Reduction loops in the order of what the
  // prologue reads]); the spec keeps the input's own strides.
  const graph::Dims order = read_strides(k, *spec, fusion).value_or(spec->x.strides);
  RowProgram program =
      ProgramBuilder(g, *spec, order, buffer_of, fusion, siblings, options.keep_prologue_rows)
          .build();
  const ReductionSpace space{spec->sizes, spec->reduced, order, &g.symbols};
  ReductionLoopOptions loops;
  loops.parallel_threshold = options.parallel_threshold;
  loops.chunk_single_rows = options.chunk_single_rows;
  loops.min_parallel_rows = options.min_parallel_rows;
  loops.min_outer_tile = options.min_outer_tile;
  k.body = build_reduction_loops(space, program, loops);
  k.size_vars = kernel_size_vars(k, g.symbols);
  return k;
}

}  // namespace ember::sched
