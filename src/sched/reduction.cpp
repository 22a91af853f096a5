#include "sched/reduction.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

#include "loop/simplify.h"
#include "sched/kernel_params.h"
#include "sched/pointwise.h"
#include "support/error.h"

namespace ember::sched {

namespace {

using graph::ValueId;
using loop::DType;
using loop::Expr;
using loop::ReduceOp;
using loop::Stmt;

enum class Kind : uint8_t { Softmax, LogSoftmax, LayerNorm, Sum, Mean, Amax, Amin };

// What a supported node computes: the input, which of its dims are reduced, and the operands of
// layer_norm.
struct Spec {
  Kind kind = Kind::Sum;
  ValueId x = -1;
  std::vector<bool> reduced;  // per dim of x
  std::optional<ValueId> weight, bias;
  double eps = 0;
};

const graph::Arg* arg_named(const graph::Graph& g, const graph::Node& n, std::string_view name) {
  const graph::OpInfo& op = g.op_of(n);
  for (size_t i = 0; i < op.arg_names.size() && i < n.args.size(); ++i) {
    if (op.arg_names[i] == name) return &n.args[i];
  }
  return nullptr;
}

std::optional<ValueId> value_arg(const graph::Arg* a) {
  const auto* r = a ? std::get_if<graph::ValueRef>(a) : nullptr;
  if (r == nullptr) return std::nullopt;
  return r->id;
}

bool is_none(const graph::Arg* a) {
  return a != nullptr && std::holds_alternative<graph::NoneArg>(*a);
}

std::optional<Kind> kind_of(const std::string& qualified) {
  static const std::map<std::string, Kind> kinds = {
      {"aten::_softmax", Kind::Softmax},
      {"aten::_log_softmax", Kind::LogSoftmax},
      {"aten::native_layer_norm", Kind::LayerNorm},
      {"aten::sum.dim_IntList", Kind::Sum},
      {"aten::sum", Kind::Sum},
      {"aten::mean", Kind::Mean},
      {"aten::mean.dim", Kind::Mean},
      {"aten::amax", Kind::Amax},
      {"aten::amin", Kind::Amin},
  };
  auto it = kinds.find(qualified);
  if (it == kinds.end()) return std::nullopt;
  return it->second;
}

bool cpu_float(const graph::TensorType& t, bool allow_bf16) {
  if (t.device.kind != graph::DeviceKind::CPU) return false;
  for (const graph::DimExpr& d : t.sizes) {
    if (!d.is_constant()) return false;
  }
  for (const graph::DimExpr& d : t.strides) {
    if (!d.is_constant()) return false;
  }
  if (t.dtype == graph::DType::Float32 || t.dtype == graph::DType::Float64) return true;
  return allow_bf16 && t.dtype == graph::DType::BFloat16;
}

// `sizes` with the reduced dims set to 1 (keepdim) or dropped.
std::vector<int64_t> reduced_sizes(const std::vector<int64_t>& sizes,
                                   const std::vector<bool>& reduced, bool keepdim) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(sizes[d]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

bool trailing(const std::vector<bool>& reduced) {
  bool seen = false;
  for (bool r : reduced) {
    if (seen && !r) return false;
    seen |= r;
  }
  return seen;
}

std::optional<Spec> analyze(const graph::Graph& g, const graph::Node& n) {
  if (n.op < 0 || n.op >= static_cast<int32_t>(g.ops.size())) return std::nullopt;
  std::optional<Kind> kind = kind_of(g.op_of(n).qualified_name());
  if (!kind) return std::nullopt;
  Spec s;
  s.kind = *kind;
  const bool softmax = s.kind == Kind::Softmax || s.kind == Kind::LogSoftmax;
  std::optional<ValueId> x =
      value_arg(arg_named(g, n, s.kind == Kind::LayerNorm ? "input" : "self"));
  if (!x) return std::nullopt;
  s.x = *x;
  const graph::TensorType& xt = g.type(s.x);
  const int64_t rank = xt.dim();
  if (rank == 0 || !cpu_float(xt, softmax) || graph::numel(xt.sizes) <= 0) return std::nullopt;
  const std::vector<int64_t> sizes = sizes_of(xt);

  const size_t num_outputs = s.kind == Kind::LayerNorm ? 3 : 1;
  if (n.outputs.size() != num_outputs) return std::nullopt;
  for (size_t i = 0; i < n.result_slots.size(); ++i) {
    if (n.result_slots[i] != static_cast<int32_t>(i)) return std::nullopt;
  }
  for (ValueId o : n.outputs) {
    const graph::TensorType& ot = g.type(o);
    if (!cpu_float(ot, softmax) || ot.dtype != xt.dtype) return std::nullopt;
  }
  s.reduced.assign(static_cast<size_t>(rank), false);

  switch (s.kind) {
    case Kind::Softmax:
    case Kind::LogSoftmax: {
      const graph::Arg* dim = arg_named(g, n, "dim");
      const auto* d = dim ? std::get_if<int64_t>(dim) : nullptr;
      const graph::Arg* h = arg_named(g, n, "half_to_float");
      const auto* half = h ? std::get_if<bool>(h) : nullptr;
      if (d == nullptr || half == nullptr || *half) return std::nullopt;
      if (*d < -rank || *d >= rank) return std::nullopt;
      s.reduced[static_cast<size_t>(*d < 0 ? *d + rank : *d)] = true;
      if (sizes_of(g.type(n.outputs[0])) != sizes) return std::nullopt;
      return s;
    }
    case Kind::LayerNorm: {
      const graph::Arg* ns = arg_named(g, n, "normalized_shape");
      const auto* shape = ns ? std::get_if<std::vector<int64_t>>(ns) : nullptr;
      if (shape == nullptr || shape->empty() || static_cast<int64_t>(shape->size()) > rank) {
        return std::nullopt;
      }
      const size_t k = shape->size();
      if (!std::equal(shape->begin(), shape->end(), sizes.end() - static_cast<ptrdiff_t>(k))) {
        return std::nullopt;
      }
      for (size_t d = sizes.size() - k; d < sizes.size(); ++d) s.reduced[d] = true;
      for (const char* name : {"weight", "bias"}) {
        const graph::Arg* a = arg_named(g, n, name);
        if (is_none(a)) continue;
        std::optional<ValueId> v = value_arg(a);
        if (!v) return std::nullopt;
        const graph::TensorType& t = g.type(*v);
        if (!cpu_float(t, false) || t.dtype != xt.dtype || sizes_of(t) != *shape) {
          return std::nullopt;
        }
        (name[0] == 'w' ? s.weight : s.bias) = *v;
      }
      const graph::Arg* eps = arg_named(g, n, "eps");
      const auto* e = eps ? std::get_if<double>(eps) : nullptr;
      if (e == nullptr) return std::nullopt;
      s.eps = *e;
      if (sizes_of(g.type(n.outputs[0])) != sizes) return std::nullopt;
      for (size_t i = 1; i < 3; ++i) {
        if (sizes_of(g.type(n.outputs[i])) != reduced_sizes(sizes, s.reduced, true)) {
          return std::nullopt;
        }
      }
      return s;
    }
    case Kind::Sum:
    case Kind::Mean:
    case Kind::Amax:
    case Kind::Amin: {
      const graph::Arg* dim = arg_named(g, n, "dim");
      std::vector<int64_t> dims;
      if (const auto* l = dim ? std::get_if<std::vector<int64_t>>(dim) : nullptr) {
        dims = *l;
      } else if (dim != nullptr && !is_none(dim)) {
        return std::nullopt;
      }
      // aten::sum and aten::mean (default overloads) have neither dim nor keepdim: all dims.
      const bool whole =
          g.op_of(n).overload.empty() && (s.kind == Kind::Sum || s.kind == Kind::Mean);
      if (whole != (dim == nullptr)) return std::nullopt;
      for (int64_t d : dims) {
        if (d < -rank || d >= rank) return std::nullopt;
        s.reduced[static_cast<size_t>(d < 0 ? d + rank : d)] = true;
      }
      if (dims.empty()) s.reduced.assign(static_cast<size_t>(rank), true);
      if (!trailing(s.reduced)) return std::nullopt;
      const graph::Arg* kd = arg_named(g, n, "keepdim");
      const bool no_keepdim = false;
      const auto* keepdim = kd ? std::get_if<bool>(kd) : whole ? &no_keepdim : nullptr;
      if (keepdim == nullptr) return std::nullopt;
      if (s.kind == Kind::Sum || s.kind == Kind::Mean) {
        const graph::Arg* dt = arg_named(g, n, "dtype");
        const auto* t = dt ? std::get_if<graph::DType>(dt) : nullptr;
        if (!is_none(dt) && (t == nullptr || *t != g.type(n.outputs[0]).dtype)) {
          return std::nullopt;
        }
      }
      if (sizes_of(g.type(n.outputs[0])) != reduced_sizes(sizes, s.reduced, *keepdim)) {
        return std::nullopt;
      }
      return s;
    }
  }
  return std::nullopt;
}

Expr cast(DType t, Expr e) {
  return e.dtype() == t ? e : loop::Cast::make(t, std::move(e));
}

Expr fconst(DType t, double v) {
  return loop::FloatImm::make(t, v);
}

Expr call(loop::CallFn fn, Expr a) {
  return loop::Call::make(fn, {std::move(a)});
}

Expr bin(loop::ExprKind k, Expr a, Expr b) {
  return loop::make_binary(k, std::move(a), std::move(b));
}

}  // namespace

bool is_reduction_kernel_node(const graph::Graph& g, const graph::Node& n) {
  return analyze(g, n).has_value();
}

loop::Kernel build_reduction_kernel(const graph::Graph& g, const graph::Node& n,
                                    const KernelGroup& group, const std::string& name,
                                    const ScheduleOptions& options) {
  std::optional<Spec> spec = analyze(g, n);
  EMBER_INTERNAL_ASSERT(spec.has_value()) << "build_reduction_kernel: unsupported node";
  EMBER_INTERNAL_ASSERT(!group.outputs.empty()) << "build_reduction_kernel: no outputs";
  const Spec& s = *spec;
  const graph::TensorType& xt = g.type(s.x);
  const std::vector<int64_t> sizes = sizes_of(xt);
  const size_t rank = sizes.size();

  loop::Kernel k;
  k.name = name;
  const std::map<ValueId, std::string> buffer_of = add_group_buffers(g, group, k);

  // One variable per dim of x: i<d> for kept dims (outer loops), r<d> for reduced dims (the
  // passes over a row; each pass binds them again, one after the other).
  std::vector<Expr> iv;
  std::vector<Expr> kept;
  int64_t row = 1;  // elements per reduction
  for (size_t d = 0; d < rank; ++d) {
    iv.push_back(loop::var((s.reduced[d] ? "r" : "i") + std::to_string(d)));
    if (!s.reduced[d]) kept.push_back(iv.back());
    if (s.reduced[d]) row *= sizes[d];
  }

  // The flat offset of the element at `vars` (one per dim of t) in a tensor of type t; size-1
  // dims read element 0.
  auto offset = [&](const graph::TensorType& t, const std::vector<Expr>& vars) {
    EMBER_INTERNAL_ASSERT(vars.size() == t.sizes.size()) << "rank mismatch";
    Expr off = loop::idx(0);
    for (size_t d = 0; d < vars.size(); ++d) {
      if (t.sizes[d].constant() == 1) continue;
      off = bin(loop::ExprKind::Add, off,
                bin(loop::ExprKind::Mul, vars[d], loop::idx(t.strides[d].constant())));
    }
    return loop::simplify(off);
  };
  auto load = [&](ValueId v, const std::vector<Expr>& vars) {
    const graph::TensorType& t = g.type(v);
    return loop::Load::make(*to_loop_dtype(t.dtype), buffer_of.at(v), offset(t, vars));
  };
  // Output i of the node, written with `value` (converted to its dtype) when it is needed. An
  // output of x's rank is indexed like x; a smaller one (keepdim false) by the kept dims.
  auto store_out = [&](size_t i, Expr value) -> Stmt {
    ValueId o = n.outputs[i];
    auto it = buffer_of.find(o);
    if (it == buffer_of.end()) return loop::Block::make({});
    const graph::TensorType& t = g.type(o);
    const std::vector<Expr>& vars = t.sizes.size() == rank ? iv : kept;
    return loop::Store::make(it->second, offset(t, vars),
                             cast(*to_loop_dtype(t.dtype), std::move(value)));
  };
  // `body` inside loops over the reduced dims; the innermost is vectorized when asked.
  auto over_row = [&](Stmt body, bool vectorize) {
    bool innermost = true;
    for (size_t d = rank; d-- > 0;) {
      if (!s.reduced[d]) continue;
      loop::ForKind kind =
          vectorize && innermost ? loop::ForKind::Vectorized : loop::ForKind::Serial;
      innermost = false;
      body = loop::For::make(iv[d], loop::idx(0), loop::idx(sizes[d]), kind, body);
    }
    return body;
  };
  // A one-element accumulator `buf`, initialised to `init`, alive for `body`.
  auto with_acc = [&](const std::string& buf, Expr init, std::vector<Stmt> body) {
    DType t = init.dtype();
    body.insert(body.begin(), loop::Store::make(buf, loop::idx(0), init));
    return loop::Allocate::make(buf, t, {loop::idx(1)}, loop::Block::make(std::move(body)));
  };
  auto accumulate = [&](ReduceOp op, const std::string& buf, Expr value) {
    return loop::Accumulate::make(op, {buf}, loop::idx(0), {std::move(value)});
  };
  auto acc_value = [&](const std::string& buf, DType t) {
    return loop::Load::make(t, buf, loop::idx(0));
  };

  const DType xd = *to_loop_dtype(xt.dtype);
  const DType comp = xd == DType::BFloat16 ? DType::Float32 : xd;  // eager's opmath type
  const DType acc = DType::Float64;                                // float sums accumulate here
  const Expr x = cast(comp, load(s.x, iv));

  Stmt body;
  switch (s.kind) {
    case Kind::Softmax:
    case Kind::LogSoftmax: {
      // Eager: max, then sum of exp(x - max), then exp(x - max) * (1 / sum), or
      // (x - max) - log(sum).
      Expr mx = loop::Var::make("mx", comp);
      Expr shifted = bin(loop::ExprKind::Sub, x, mx);
      Expr sum = cast(comp, acc_value("acc_sum", acc));
      Stmt write;
      if (s.kind == Kind::Softmax) {
        Expr inv = loop::Var::make("inv", comp);
        write = loop::Let::make(
            inv, bin(loop::ExprKind::Div, fconst(comp, 1), sum),
            over_row(store_out(0, bin(loop::ExprKind::Mul, call(loop::CallFn::Exp, shifted), inv)),
                     true));
      } else {
        // Eager's last-dim kernel keeps the sum and its log in the input's dtype: for bf16 both
        // are rounded to bf16 (its other-dim kernel keeps them in f32).
        Expr log_sum = call(loop::CallFn::Log, sum);
        if (xd != comp && s.reduced[rank - 1]) {
          log_sum = cast(comp, cast(xd, call(loop::CallFn::Log, cast(comp, cast(xd, sum)))));
        }
        Expr lse = loop::Var::make("lse", comp);
        write = loop::Let::make(
            lse, log_sum, over_row(store_out(0, bin(loop::ExprKind::Sub, shifted, lse)), true));
      }
      body =
          with_acc("acc_max", loop::reduction_identity(ReduceOp::Max, 0, comp),
                   {over_row(accumulate(ReduceOp::Max, "acc_max", x), false),
                    loop::Let::make(
                        mx, acc_value("acc_max", comp),
                        with_acc("acc_sum", fconst(acc, 0),
                                 {over_row(accumulate(ReduceOp::Sum, "acc_sum",
                                                      cast(acc, call(loop::CallFn::Exp, shifted))),
                                           false),
                                  write}))});
      break;
    }
    case Kind::LayerNorm: {
      // Two passes with f64 sums: the mean, then the mean of squared deviations from it. rstd
      // and the output follow eager's formulas in the input's dtype.
      Expr xa = cast(acc, x);
      Expr n_row = fconst(acc, static_cast<double>(row));
      Expr mu = loop::Var::make("mu", acc);
      Expr dev = loop::Var::make("dev", acc);
      Expr mean = loop::Var::make("mean", comp);
      Expr rstd = loop::Var::make("rstd", comp);
      auto weight_of = [&](std::optional<ValueId> v) {
        std::vector<Expr> vars(iv.end() - static_cast<ptrdiff_t>(g.type(*v).sizes.size()),
                               iv.end());
        return cast(comp, load(*v, vars));
      };
      Stmt write;
      if (s.weight && s.bias) {
        // (x * rstd + (-rstd * mean)) * weight + bias
        Expr shift = loop::Var::make("shift", comp);
        Expr y = bin(loop::ExprKind::Add,
                     bin(loop::ExprKind::Mul,
                         bin(loop::ExprKind::Add, bin(loop::ExprKind::Mul, x, rstd), shift),
                         weight_of(s.weight)),
                     weight_of(s.bias));
        write =
            loop::Let::make(shift, bin(loop::ExprKind::Mul, call(loop::CallFn::Neg, rstd), mean),
                            over_row(store_out(0, y), true));
      } else {
        // (x - mean) * rstd [* weight] [+ bias]
        Expr y = bin(loop::ExprKind::Mul, bin(loop::ExprKind::Sub, x, mean), rstd);
        if (s.weight) y = bin(loop::ExprKind::Mul, y, weight_of(s.weight));
        if (s.bias) y = bin(loop::ExprKind::Add, y, weight_of(s.bias));
        write = over_row(store_out(0, y), true);
      }
      if (!buffer_of.count(n.outputs[0])) write = loop::Block::make({});
      Expr var = cast(comp, bin(loop::ExprKind::Div, acc_value("acc_m2", acc), n_row));
      body = with_acc(
          "acc_sum", fconst(acc, 0),
          {over_row(accumulate(ReduceOp::Sum, "acc_sum", xa), false),
           loop::Let::make(
               mu, bin(loop::ExprKind::Div, acc_value("acc_sum", acc), n_row),
               with_acc("acc_m2", fconst(acc, 0),
                        {over_row(loop::Let::make(dev, bin(loop::ExprKind::Sub, xa, mu),
                                                  accumulate(ReduceOp::Sum, "acc_m2",
                                                             bin(loop::ExprKind::Mul, dev, dev))),
                                  false),
                         loop::Let::make(
                             mean, cast(comp, mu),
                             loop::Let::make(rstd,
                                             call(loop::CallFn::Rsqrt, bin(loop::ExprKind::Add, var,
                                                                           fconst(comp, s.eps))),
                                             loop::Block::make({store_out(1, mean),
                                                                store_out(2, rstd), write})))}))});
      break;
    }
    case Kind::Sum:
    case Kind::Mean: {
      Expr total = cast(comp, acc_value("acc_sum", acc));
      if (s.kind == Kind::Mean) {
        // Eager: sum in the output dtype, then divide by the number of elements.
        total = bin(loop::ExprKind::Div, total, fconst(comp, static_cast<double>(row)));
      }
      body = with_acc("acc_sum", fconst(acc, 0),
                      {over_row(accumulate(ReduceOp::Sum, "acc_sum", cast(acc, x)), false),
                       store_out(0, total)});
      break;
    }
    case Kind::Amax:
    case Kind::Amin: {
      ReduceOp op = s.kind == Kind::Amax ? ReduceOp::Max : ReduceOp::Min;
      body = with_acc(
          "acc_r", loop::reduction_identity(op, 0, comp),
          {over_row(accumulate(op, "acc_r", x), false), store_out(0, acc_value("acc_r", comp))});
      break;
    }
  }

  // Outer loops over the kept dims; the first one with more than one iteration is parallel for
  // large inputs (each iteration initialises its own accumulators).
  bool parallel = graph::numel(xt.sizes) >= options.parallel_threshold;
  size_t parallel_dim = rank;
  for (size_t d = 0; d < rank && parallel; ++d) {
    if (!s.reduced[d] && sizes[d] > 1) {
      parallel_dim = d;
      break;
    }
  }
  for (size_t d = rank; d-- > 0;) {
    if (s.reduced[d]) continue;
    loop::ForKind kind = d == parallel_dim ? loop::ForKind::Parallel : loop::ForKind::Serial;
    body = loop::For::make(iv[d], loop::idx(0), loop::idx(sizes[d]), kind, body);
  }
  k.body = body;
  return k;
}

}  // namespace ember::sched
