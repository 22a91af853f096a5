#include "sched/scatter.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loop/simplify.h"
#include "sched/fusion.h"
#include "sched/index_ops_internal.h"
#include "sched/kernel_params.h"
#include "sched/pointwise.h"
#include "sched/pointwise_internal.h"
#include "support/error.h"

namespace ember::sched {

namespace {

using namespace index_detail;  // NOLINT(build/namespaces)
using loop::Stmt;

/// How a source element meets the output element it lands on.
enum class Combine : uint8_t { Replace, Add, Mul, Max, Min };

/// An index tensor whose every element must lie in [0, size), or [-size, size) when negative
/// indices wrap, before the kernel writes anything.
struct IndexCheck {
  ValueId v = -1;
  int64_t size = 0;
  bool wraps = false;
};

/// Reads the kernel's realized inputs at their traced strides.
class Reads {
 public:
  Reads(const graph::Graph& g, const std::map<ValueId, std::string>& buffer_of)
      : g_(g), buffer_of_(buffer_of) {}
  /// The element of `v` at `index`.
  Expr element(ValueId v, const Index& index) const {
    return loop::Load::make(ldt(g_.type(v)), buffer_of_.at(v), offset(v, index));
  }
  /// Element `index` of index tensor `v` as an i64 index into a dim of `size`.
  Expr index(ValueId v, const Index& index, int64_t size, bool wraps) const {
    Expr x = element(v, index);
    if (x.dtype() != loop::DType::Int64) x = loop::Cast::make(loop::DType::Int64, x);
    if (wraps) x = loop::Select::make(loop::LT::make(x, loop::idx(0)), x + loop::idx(size), x);
    return x;
  }
  /// The flat offset of `index` in `v` (dims of size 1 contribute nothing).
  Expr offset(ValueId v, const Index& index) const {
    const graph::TensorType& t = g_.type(v);
    Expr off = loop::idx(0);
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      if (t.sizes[d].constant() == 1) continue;
      off = off + index[d] * loop::idx(t.strides[d].constant());
    }
    return loop::simplify(off);
  }

 private:
  const graph::Graph& g_;
  const std::map<ValueId, std::string>& buffer_of_;
};

/// One scatter: a serial loop over `space`; at point p, value(p) is combined into the output at
/// dest(p), an index into self.
struct Scatter {
  std::vector<int64_t> space;
  std::vector<IndexCheck> checks;
  Combine combine = Combine::Replace;
  /// Eager accumulates bf16/f16 in f32 and rounds once at the end (scatter_add, scatter_reduce,
  /// scatter.reduce, index_add); index_put rounds after every addition, as its `+=` does.
  bool round_once = true;
  /// scatter_reduce with include_self=False: an output element that receives a source element
  /// starts from the reduction's identity instead of self's element (eager fills those first).
  bool exclude_self = false;
  std::function<Index(const Reads&, const Index&)> dest;
  std::function<Expr(const Reads&, const Index&)> value;
};

bool on_cpu_static(const graph::TensorType& t) {
  return kernel_device(t.device) && t.is_static() && loop_dtype(t);
}

std::optional<Combine> reduce_of(const Ctx& c, bool two) {
  const graph::Arg* a = c.arg("reduce");
  const auto* s = a ? std::get_if<std::string>(a) : nullptr;
  if (s == nullptr) return std::nullopt;
  if (!two) {
    if (*s == "add") return Combine::Add;
    if (*s == "multiply") return Combine::Mul;
    return std::nullopt;
  }
  if (*s == "sum") return Combine::Add;
  if (*s == "prod") return Combine::Mul;
  if (*s == "amax") return Combine::Max;
  if (*s == "amin") return Combine::Min;
  return std::nullopt;  // mean needs counts
}

/// The element value of a Scalar argument in self's dtype, or nullopt.
std::optional<Expr> scalar_value(const Ctx& c, std::string_view name) {
  return scalar_constant(ldt(c.type(c.self())), c.arg(name));
}

/// scatter.src / scatter.value / scatter_add / scatter.reduce / scatter_reduce.two: index has
/// self's rank; the element at p goes to p with p[dim] replaced by index[p]. No wrapping.
std::optional<Scatter> scatter_family(const Ctx& c, Combine combine) {
  const ValueId self = c.self();
  std::optional<ValueId> index = c.tensor_arg("index");
  std::optional<int64_t> dim_arg = c.int_arg("dim");
  const std::vector<int64_t> in = c.sizes(self);
  const int64_t rank = static_cast<int64_t>(in.size());
  if (!index || !dim_arg || rank == 0) return std::nullopt;
  if (!index_dtype(c.type(*index))) return std::nullopt;
  std::optional<int64_t> w = wrap_dim(*dim_arg, rank);
  const std::vector<int64_t> is = c.sizes(*index);
  if (!w || static_cast<int64_t>(is.size()) != rank) return std::nullopt;
  const size_t dim = static_cast<size_t>(*w);
  std::optional<ValueId> src = c.tensor_arg("src");
  std::optional<Expr> constant;
  if (src) {
    if (c.type(*src).dtype != c.type(self).dtype || c.type(*src).dim() != rank) {
      return std::nullopt;
    }
    const std::vector<int64_t> ss = c.sizes(*src);
    for (size_t d = 0; d < is.size(); ++d) {
      if (is[d] > ss[d]) return std::nullopt;
    }
  } else {
    constant = scalar_value(c, "value");
    if (!constant) return std::nullopt;
  }
  for (size_t d = 0; d < is.size(); ++d) {
    if (d != dim && is[d] > in[d]) return std::nullopt;
  }
  Scatter s;
  s.space = is;
  s.combine = combine;
  s.checks.push_back({*index, in[dim], false});
  const ValueId ix = *index;
  const int64_t size = in[dim];
  s.dest = [ix, dim, size](const Reads& r, const Index& p) {
    Index d = p;
    d[dim] = r.index(ix, p, size, false);
    return d;
  };
  if (src) {
    const ValueId sv = *src;
    s.value = [sv](const Reads& r, const Index& p) { return r.element(sv, p); };
  } else {
    const Expr k = *constant;
    s.value = [k](const Reads&, const Index&) { return k; };
  }
  return s;
}

/// index_add / index_copy / index_fill: a 0-d or 1-d index selects positions along dim; the
/// slice at p[dim] goes to index[p[dim]].
std::optional<Scatter> index_family(const Ctx& c, Combine combine, bool int32_ok, bool wraps,
                                    std::string_view source_arg) {
  const ValueId self = c.self();
  std::optional<ValueId> index = c.tensor_arg("index");
  std::optional<int64_t> dim_arg = c.int_arg("dim");
  const std::vector<int64_t> in = c.sizes(self);
  const int64_t rank = static_cast<int64_t>(in.size());
  if (!index || !dim_arg || rank == 0) return std::nullopt;
  const graph::TensorType& it = c.type(*index);
  if (!(it.dtype == graph::DType::Int64 || (int32_ok && it.dtype == graph::DType::Int32)) ||
      it.dim() > 1) {
    return std::nullopt;
  }
  std::optional<int64_t> w = wrap_dim(*dim_arg, rank);
  if (!w) return std::nullopt;
  const size_t dim = static_cast<size_t>(*w);
  const int64_t len = numel(c.sizes(*index));
  Scatter s;
  s.space = in;
  s.space[dim] = len;
  std::optional<ValueId> source = source_arg.empty() ? std::nullopt : c.tensor_arg(source_arg);
  if (source) {
    const graph::TensorType& st = c.type(*source);
    if (st.dtype != c.type(self).dtype || c.sizes(*source) != s.space) return std::nullopt;
    const ValueId sv = *source;
    s.value = [sv](const Reads& r, const Index& p) { return r.element(sv, p); };
  } else {
    std::optional<Expr> constant = scalar_value(c, "value");
    if (!constant) return std::nullopt;
    const Expr k = *constant;
    s.value = [k](const Reads&, const Index&) { return k; };
  }
  s.combine = combine;
  s.checks.push_back({*index, in[dim], wraps});
  const ValueId ix = *index;
  const int64_t size = in[dim];
  const bool zero_dim = it.dim() == 0;
  s.dest = [ix, dim, size, wraps, zero_dim](const Reads& r, const Index& p) {
    Index d = p;
    d[dim] = r.index(ix, zero_dim ? Index{} : Index{p[dim]}, size, wraps);
    return d;
  };
  return s;
}

/// index_put: integer index tensors on adjacent dims [first, last), broadcast together; the
/// space is self's dims before them, the broadcast shape, then self's dims after them. Negative
/// indices wrap. Values broadcast to the space.
std::optional<Scatter> index_put(const Ctx& c) {
  const ValueId self = c.self();
  std::optional<AdvancedIndex> ai = advanced_index(c);
  std::optional<ValueId> values = c.tensor_arg("values");
  const graph::Arg* acc = c.arg("accumulate");
  const auto* accumulate = acc ? std::get_if<bool>(acc) : nullptr;
  if (!ai || !values || accumulate == nullptr) return std::nullopt;
  if (c.type(*values).dtype != c.type(self).dtype) return std::nullopt;
  const std::vector<int64_t> in = c.sizes(self);
  Scatter s;
  s.space.assign(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(ai->first));
  s.space.insert(s.space.end(), ai->bshape.begin(), ai->bshape.end());
  s.space.insert(s.space.end(), in.begin() + static_cast<std::ptrdiff_t>(ai->last), in.end());
  if (!broadcasts_to(c.sizes(*values), s.space)) return std::nullopt;
  s.combine = *accumulate ? Combine::Add : Combine::Replace;
  s.round_once = false;
  for (size_t d = ai->first; d < ai->last; ++d) s.checks.push_back({*ai->indices[d], in[d], true});
  const AdvancedIndex a = *ai;
  const graph::Graph& g = c.g;
  s.dest = [a, in, &g](const Reads& r, const Index& p) {
    const size_t b = a.bshape.size();
    Index bpos(p.begin() + static_cast<std::ptrdiff_t>(a.first),
               p.begin() + static_cast<std::ptrdiff_t>(a.first + b));
    Index d(in.size());
    for (size_t k = 0; k < in.size(); ++k) {
      if (k < a.first) {
        d[k] = p[k];
      } else if (k < a.last) {
        ValueId ix = *a.indices[k];
        d[k] = r.index(ix, broadcast_index(bpos, sizes_of(g.type(ix))), in[k], true);
      } else {
        d[k] = p[a.first + b + (k - a.last)];
      }
    }
    return d;
  };
  const ValueId vv = *values;
  const std::vector<int64_t> vs = c.sizes(vv);
  s.value = [vv, vs](const Reads& r, const Index& p) {
    return r.element(vv, broadcast_index(p, vs));
  };
  return s;
}

std::optional<Scatter> analyze(const graph::Graph& g, const graph::Node& n) {
  if (n.op < 0 || n.op >= static_cast<int32_t>(g.ops.size())) return std::nullopt;
  const graph::OpInfo& op = g.op_of(n);
  if (n.outputs.size() != 1 || op.returns_list || n.args.size() != op.arg_names.size()) {
    return std::nullopt;
  }
  Ctx c{g, n, op};
  std::optional<ValueId> self = c.tensor_arg("self");
  if (!self) return std::nullopt;
  const graph::TensorType& st = c.type(*self);
  const graph::TensorType& ot = c.type(c.out());
  if (!on_cpu_static(st) || !on_cpu_static(ot) || st.dtype != ot.dtype ||
      c.sizes(*self) != c.sizes(c.out())) {
    return std::nullopt;
  }
  for (const graph::Arg& a : n.args) {
    if (const auto* r = std::get_if<graph::ValueRef>(&a)) {
      if (!on_cpu_static(c.type(r->id))) return std::nullopt;
    } else if (const auto* l = std::get_if<graph::ValueList>(&a)) {
      for (const auto& item : l->items) {
        if (item && !on_cpu_static(c.type(*item))) return std::nullopt;
      }
    }
  }
  using graph::OpKind;
  std::optional<Scatter> s;
  if (op.is(OpKind::scatter, "src") || op.is(OpKind::scatter, "value")) {
    s = scatter_family(c, Combine::Replace);
  } else if (op.is(OpKind::scatter_add)) {
    s = scatter_family(c, Combine::Add);
  } else if (op.is(OpKind::scatter, "reduce") || op.is(OpKind::scatter, "value_reduce")) {
    if (std::optional<Combine> r = reduce_of(c, false)) s = scatter_family(c, *r);
  } else if (op.is(OpKind::scatter_reduce, "two")) {
    const graph::Arg* inc = c.arg("include_self");
    const auto* include_self = inc ? std::get_if<bool>(inc) : nullptr;
    std::optional<Combine> r = reduce_of(c, true);
    if (r && include_self) s = scatter_family(c, *r);
    if (s) s->exclude_self = !*include_self;
  } else if (op.is(OpKind::index_add)) {
    // alpha 1, or an integer alpha of integer tensors (exact: a + alpha * b wraps alike). Eager
    // computes a float alpha * b + a with a fused multiply-add on some paths: ATen call.
    const graph::Arg* alpha = c.arg("alpha");
    const auto* int_alpha = alpha ? std::get_if<int64_t>(alpha) : nullptr;
    const DType t = ldt(st);
    if (sched::detail::number(alpha) == 1.0) {
      s = index_family(c, Combine::Add, /*int32_ok=*/true, /*wraps=*/false, "source");
    } else if (int_alpha && loop::is_int(t) && loop::int_fits(t, *int_alpha)) {
      s = index_family(c, Combine::Add, /*int32_ok=*/true, /*wraps=*/false, "source");
      if (s) {
        const Expr a = loop::IntImm::make(t, *int_alpha);
        s->value = [a, v = s->value](const Reads& r, const Index& p) { return v(r, p) * a; };
      }
    }
  } else if (op.is(OpKind::index_copy)) {
    s = index_family(c, Combine::Replace, /*int32_ok=*/false, /*wraps=*/false, "source");
  } else if (op.is(OpKind::index_fill, "int_Scalar")) {
    s = index_family(c, Combine::Replace, /*int32_ok=*/false, /*wraps=*/true, "");
  } else if (op.is(OpKind::index_put)) {
    s = index_put(c);
  }
  if (!s) return std::nullopt;
  const DType t = ldt(st);
  if (s->combine != Combine::Replace && !loop::is_numeric(t)) return std::nullopt;
  return s;
}

Expr combine(Combine op, const Expr& old, const Expr& v) {
  switch (op) {
    case Combine::Replace:
      return v;
    case Combine::Add:
      return old + v;
    case Combine::Mul:
      return old * v;
    case Combine::Max:
      return loop::max(old, v);
    case Combine::Min:
      return loop::min(old, v);
  }
  return v;
}

/// The value an output element starts from when the reduction excludes self.
Expr identity_of(Combine op, DType t) {
  switch (op) {
    case Combine::Add:
      return loop::reduction_identity(loop::ReduceOp::Sum, 0, t);
    case Combine::Mul:
      return loop::reduction_identity(loop::ReduceOp::Prod, 0, t);
    case Combine::Max:
      return loop::reduction_identity(loop::ReduceOp::Max, 0, t);
    case Combine::Min:
      return loop::reduction_identity(loop::ReduceOp::Min, 0, t);
    case Combine::Replace:
      break;
  }
  EMBER_INTERNAL_ASSERT(false) << "no identity for a store";
  return {};
}

/// Loops `body` over `sizes` with variables `prefix`<d>, the last dim innermost.
Stmt loops(const std::vector<int64_t>& sizes, const std::string& prefix, loop::ForKind inner,
           Stmt body) {
  for (size_t d = sizes.size(); d-- > 0;) {
    loop::ForKind kind = d + 1 == sizes.size() ? inner : loop::ForKind::Serial;
    body = loop::For::make(loop::var(prefix + std::to_string(d)), loop::idx(0), loop::idx(sizes[d]),
                           kind, body);
  }
  return body;
}

Index loop_index(size_t rank, const std::string& prefix) {
  Index i;
  for (size_t d = 0; d < rank; ++d) i.push_back(loop::var(prefix + std::to_string(d)));
  return i;
}

}  // namespace

bool is_scatter_kernel_node(const graph::Graph& g, const graph::Node& n) {
  return analyze(g, n).has_value();
}

void build_scatter_kernel(const graph::Graph& g, const graph::Node& n, KernelGroup& group,
                          const std::string& name, const ScheduleOptions& options) {
  std::optional<Scatter> s = analyze(g, n);
  EMBER_INTERNAL_ASSERT(s.has_value()) << "build_scatter_kernel: unsupported node";
  EMBER_INTERNAL_ASSERT(group.outputs.size() == 1 && group.outputs[0] == n.outputs[0])
      << "build_scatter_kernel: the output must be the group's one output";
  Ctx c{g, n, g.op_of(n)};
  loop::Kernel& k = group.kernel;
  k = loop::Kernel{};
  k.name = name;
  const std::map<ValueId, std::string> buffer_of = add_group_buffers(g, group, k);
  add_index_status(group, k);
  const Reads reads(g, buffer_of);
  const ValueId self = c.self(), out = c.out();
  const std::string& out_buf = buffer_of.at(out);
  const DType t = ldt(g.type(out));

  // 1. Every index, serially, before anything is written.
  std::vector<Stmt> stmts{loop::Store::make("bad", loop::idx(0), loop::bool_imm(false))};
  for (size_t ci = 0; ci < s->checks.size(); ++ci) {
    const IndexCheck& check = s->checks[ci];
    stmts.push_back(index_range_check(
        g.type(check.v), [&](const Index& j) { return reads.element(check.v, j); },
        loop::idx(check.size), check.wraps, "j" + std::to_string(ci) + "_"));
  }

  // 2. out = self, in parallel where large. 3. The source elements in order: serial, so
  // duplicates resolve as in eager. A reduced float type accumulated in f32 goes through an f32
  // copy of the output (dense, row-major), rounded into the output at the end.
  const std::vector<int64_t> in = sizes_of(g.type(self));
  const bool f32_acc = s->combine != Combine::Replace && s->round_once &&
                       (t == DType::BFloat16 || t == DType::Float16);
  const DType acc_t = f32_acc ? DType::Float32 : t;
  const std::string acc_buf = f32_acc ? "acc" : out_buf;
  auto acc_offset = [&](const Index& i) {
    return f32_acc ? loop::simplify(linearize(i, in)) : reads.offset(out, i);
  };
  auto elementwise = [&](const std::string& prefix, auto body_of) {
    Stmt st = loops(in, prefix, loop::ForKind::Vectorized, body_of(loop_index(in.size(), prefix)));
    if (numel(in) >= options.parallel_threshold && in.size() > 1) {
      const auto* f = st.as<loop::For>();
      st = loop::For::make(f->var, f->min, f->extent, loop::ForKind::Parallel, f->body);
    }
    return st;
  };
  Stmt copy = elementwise("c", [&](const Index& i) {
    return loop::Store::make(acc_buf, acc_offset(i), detail::cast(acc_t, reads.element(self, i)));
  });

  const Index p = loop_index(s->space.size(), "s");
  const Index dest = s->dest(reads, p);
  Expr at = loop::Var::make("dst", loop::kIndexType);
  Expr value = detail::cast(acc_t, s->value(reads, p));
  Expr old = loop::Load::make(acc_t, acc_buf, at);
  Stmt update;
  if (s->exclude_self) {
    // seen[k]: element k (dense, row-major) has received a source element.
    Expr lin = loop::Var::make("lin", loop::kIndexType);
    Expr first = loop::Not::make(loop::Load::make(DType::Bool, "seen", lin));
    old = loop::Select::make(first, identity_of(s->combine, acc_t), old);
    update = loop::Let::make(
        lin, loop::simplify(linearize(dest, in)),
        loop::Block::make({loop::Store::make(acc_buf, at, combine(s->combine, old, value)),
                           loop::Store::make("seen", lin, loop::bool_imm(true))}));
  } else {
    update = loop::Store::make(acc_buf, at, combine(s->combine, old, value));
  }
  update = loop::Let::make(at, acc_offset(dest), update);
  update = loops(s->space, "s", loop::ForKind::Serial, update);
  if (s->exclude_self) {
    const Index z = loop_index(in.size(), "z");
    Stmt clear =
        loops(in, "z", loop::ForKind::Vectorized,
              loop::Store::make("seen", loop::simplify(linearize(z, in)), loop::bool_imm(false)));
    std::vector<Expr> sizes;
    for (int64_t d : in) sizes.push_back(loop::idx(d));
    update = loop::Allocate::make("seen", DType::Bool, sizes, loop::Block::make({clear, update}));
  }
  Stmt scatter = loop::Block::make({copy, update});
  if (f32_acc) {
    Stmt round = elementwise("r", [&](const Index& i) {
      return loop::Store::make(
          out_buf, reads.offset(out, i),
          loop::Cast::make(t, loop::Load::make(acc_t, acc_buf, acc_offset(i))));
    });
    std::vector<Expr> sizes;
    for (int64_t d : in) sizes.push_back(loop::idx(d));
    scatter = loop::Allocate::make(acc_buf, acc_t, sizes, loop::Block::make({scatter, round}));
  }

  Stmt run = loop::Block::make(
      {loop::Store::make("status", loop::idx(0), loop::bool_imm(false)), scatter});
  stmts.push_back(
      loop::IfThenElse::make(loop::Load::make(loop::DType::Bool, "bad", loop::idx(0)),
                             loop::Store::make("status", loop::idx(0), loop::bool_imm(true)), run));
  k.body = loop::Allocate::make("bad", loop::DType::Bool, {loop::idx(1)},
                                loop::Block::make(std::move(stmts)));
}

}  // namespace ember::sched
