#include "sched/symbolic_pointwise.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "loop/simplify.h"
#include "loop/traverse.h"
#include "sched/pointwise.h"
#include "support/error.h"
#include "sym/eval.h"

namespace ember::sched {

namespace {

loop::Expr atom_to_loop(const sym::AtomNode& a, std::set<sym::SymbolId>& used) {
  if (a.kind == sym::AtomKind::Symbol) {
    used.insert(a.id);
    return loop::SizeVar::make(a.name);
  }
  loop::Expr l = to_loop_expr(a.lhs, used);
  loop::Expr r = to_loop_expr(a.rhs, used);
  switch (a.kind) {
    case sym::AtomKind::FloorDiv:
      return loop::floordiv(l, r);
    case sym::AtomKind::Mod:
      return loop::mod(l, r);
    case sym::AtomKind::Min:
      return loop::min(l, r);
    case sym::AtomKind::Max:
      return loop::max(l, r);
    case sym::AtomKind::Symbol:
      break;
  }
  EMBER_INTERNAL_ASSERT(false) << "unknown atom kind";
  return {};
}

loop::Expr dim_to_loop(const graph::DimExpr& d, std::set<sym::SymbolId>& used) {
  if (std::optional<int64_t> c = d.as_constant()) return loop::idx(*c);
  return to_loop_expr(d.expr(), used);
}

class Builder {
 public:
  Builder(const graph::Graph& g, graph::Dims shape) : g_(g), shape_(std::move(shape)) {
    for (size_t d = 0; d < shape_.size(); ++d) {
      const std::optional<int64_t> c = shape_[d].as_constant();
      index_.push_back(c && *c == 1 ? loop::idx(0) : loop::var("i" + std::to_string(d)));
    }
  }

  /// The element of `v` at the kernel's index (broadcast to v's dims).
  loop::Expr element(graph::ValueId v) {
    auto memo = memo_.find(v);
    if (memo != memo_.end()) return memo->second;
    const graph::TensorType& t = g_.type(v);
    EMBER_UNSUPPORTED(t.dim() <= static_cast<int64_t>(shape_.size()))
        << "schedule: %" << v << " has more dims than the kernel's shape";
    const size_t lead = shape_.size() - t.sizes.size();
    std::vector<loop::Expr> index;
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      const std::optional<int64_t> c = t.sizes[d].as_constant();
      if (c && *c == 1) {
        index.push_back(loop::idx(0));
        continue;
      }
      EMBER_UNSUPPORTED(t.sizes[d] == shape_[lead + d])
          << "schedule: %" << v << " of sizes " << graph::type_str(t)
          << " is read broadcast over a symbolic size";
      index.push_back(index_[lead + d]);
    }
    const std::optional<loop::DType> dtype = to_loop_dtype(t.dtype);
    EMBER_UNSUPPORTED(dtype.has_value())
        << "schedule: dtype " << graph::dtype_name(t.dtype) << " has no loop type";
    loop::Expr e;
    const graph::Value& value = g_.values[v];
    if (value.node < 0) {
      add_input(v);
      loop::Expr off = loop::idx(0);
      for (size_t d = 0; d < index.size(); ++d) {
        if (loop::as_const_int(index[d]) == 0) continue;
        off = off + index[d] * dim_to_loop(t.strides[d], used_);
      }
      e = loop::Load::make(*dtype, "v" + std::to_string(v), loop::simplify(off));
    } else {
      const graph::Node& n = g_.nodes[value.node];
      std::vector<loop::Expr> args;
      for (const graph::Arg& a : n.args) {
        if (const auto* r = std::get_if<graph::ValueRef>(&a)) args.push_back(element(r->id));
      }
      nodes_.insert(value.node);
      loop::Expr x = lower_pointwise(g_, n, args);
      e = loop::Var::make("t" + std::to_string(v), x.dtype());
      lets_.emplace_back(e, x);
    }
    memo_.emplace(v, e);
    return e;
  }

  KernelGroup finish(const std::vector<graph::ValueId>& outputs, const ScheduleOptions& options) {
    KernelGroup group;
    std::vector<loop::Stmt> stores;
    for (graph::ValueId o : outputs) {
      loop::Expr x = element(o);
      loop::Expr off = loop::idx(0);
      const graph::TensorType& t = g_.type(o);
      for (size_t d = 0; d < index_.size(); ++d) {
        if (loop::as_const_int(index_[d]) == 0) continue;
        off = off + index_[d] * dim_to_loop(t.strides[d], used_);
      }
      stores.push_back(loop::Store::make("v" + std::to_string(o), loop::simplify(off), x));
    }
    loop::Stmt body = loop::Block::make(std::move(stores));
    for (size_t i = lets_.size(); i-- > 0;) {
      body = loop::Let::make(lets_[i].first, lets_[i].second, body);
    }
    // Loop kinds from the hints: they never change the result, only its speed.
    int64_t hint_numel = 1;
    for (const graph::DimExpr& d : shape_) hint_numel *= sym::hint(d.expr(), g_.symbols);
    bool parallel = hint_numel >= options.parallel_threshold;
    std::vector<size_t> loops;
    for (size_t d = 0; d < shape_.size(); ++d) {
      if (loop::as_const_int(index_[d]) != 0) loops.push_back(d);
    }
    for (size_t j = loops.size(); j-- > 0;) {
      const size_t d = loops[j];
      loop::ForKind kind =
          j + 1 == loops.size() ? loop::ForKind::Vectorized : loop::ForKind::Serial;
      if (j == 0 && parallel) kind = loop::ForKind::Parallel;
      body = loop::For::make(index_[d], loop::idx(0), dim_to_loop(shape_[d], used_), kind, body);
    }
    group.nodes.assign(nodes_.begin(), nodes_.end());
    group.inputs = inputs_;
    group.outputs = outputs;
    loop::Kernel& k = group.kernel;
    k.name = "kernel_symbolic_0";
    std::map<std::string, std::string> names;
    auto add = [&](graph::ValueId v, loop::BufferRole role) {
      const graph::TensorType& t = g_.type(v);
      loop::BufferParam p;
      p.name = "buf" + std::to_string(k.buffers.size());
      p.role = role;
      p.dtype = *to_loop_dtype(t.dtype);
      for (const graph::DimExpr& d : t.sizes) p.sizes.push_back(dim_to_loop(d, used_));
      for (const graph::DimExpr& d : t.strides) p.strides.push_back(dim_to_loop(d, used_));
      names["v" + std::to_string(v)] = p.name;
      k.buffers.push_back(std::move(p));
    };
    for (graph::ValueId v : group.inputs) add(v, loop::BufferRole::Input);
    for (graph::ValueId v : group.outputs) add(v, loop::BufferRole::Output);
    k.body = loop::rename_buffers(body, names);
    for (sym::SymbolId id : used_) k.size_vars.push_back(g_.symbols.info(id).name);
    return group;
  }

 private:
  void add_input(graph::ValueId v) {
    if (std::find(inputs_.begin(), inputs_.end(), v) == inputs_.end()) inputs_.push_back(v);
  }

  const graph::Graph& g_;
  graph::Dims shape_;
  std::vector<loop::Expr> index_;
  std::map<graph::ValueId, loop::Expr> memo_;
  std::vector<std::pair<loop::Expr, loop::Expr>> lets_;
  std::vector<graph::ValueId> inputs_;
  std::set<int32_t> nodes_;
  std::set<sym::SymbolId> used_;
};

}  // namespace

loop::Expr to_loop_expr(const sym::SymExpr& e, std::set<sym::SymbolId>& used) {
  const sym::ExprNode& n = e.node();
  std::optional<loop::Expr> sum;
  for (const sym::Term& t : n.terms) {
    std::optional<loop::Expr> term;
    for (const sym::Factor& f : t.factors) {
      loop::Expr a = atom_to_loop(*f.atom, used);
      for (int64_t p = 0; p < f.power; ++p) term = term ? *term * a : a;
    }
    loop::Expr x = t.coeff == 1 ? *term : *term * loop::idx(t.coeff);
    sum = sum ? *sum + x : x;
  }
  if (!sum) return loop::idx(n.constant);
  return n.constant == 0 ? *sum : *sum + loop::idx(n.constant);
}

KernelGroup schedule_symbolic_pointwise(const graph::Graph& g, const ScheduleOptions& options) {
  EMBER_UNSUPPORTED(options.fuse) << "schedule: no fusion (codegen off)";
  EMBER_UNSUPPORTED(g.mutations.empty()) << "schedule: the graph mutates its inputs";
  EMBER_UNSUPPORTED(!g.outputs.empty()) << "schedule: the graph has no outputs";
  for (const graph::Node& n : g.nodes) {
    EMBER_UNSUPPORTED(is_pointwise(g, n))
        << "schedule: " << g.op_of(n).qualified_name()
        << " is not pointwise (symbolic kernels are pointwise only so far)";
  }
  const graph::TensorType& first = g.type(g.outputs[0]);
  std::vector<graph::ValueId> outputs;
  for (graph::ValueId o : g.outputs) {
    const graph::TensorType& t = g.type(o);
    EMBER_UNSUPPORTED(g.values[o].node >= 0) << "schedule: output %" << o << " is an input";
    EMBER_UNSUPPORTED(t.sizes == first.sizes && t.is_contiguous() &&
                      t.storage_offset == graph::DimExpr(0))
        << "schedule: the outputs are not all contiguous of one shape";
    EMBER_UNSUPPORTED(t.device.kind == graph::DeviceKind::CPU) << "schedule: not a CPU graph";
    if (std::find(outputs.begin(), outputs.end(), o) == outputs.end()) outputs.push_back(o);
  }
  Builder b(g, first.sizes);
  return b.finish(outputs, options);
}

}  // namespace ember::sched
