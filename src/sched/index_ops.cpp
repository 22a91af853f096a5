#include "sched/index_ops.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "sched/batch_norm.h"
#include "sched/depthwise_conv.h"
#include "sched/index_ops_internal.h"
#include "sched/kernel_params.h"
#include "sched/pointwise.h"
#include "sched/pointwise_internal.h"
#include "sched/pooling.h"
#include "sched/size_expr.h"
#include "sched/upsample.h"
#include "support/error.h"

namespace ember::sched {
namespace index_detail {

namespace {

Expr size_expr(int64_t s) {
  return loop::idx(s);
}

}  // namespace

std::optional<int64_t> wrap_dim(int64_t d, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (d < -r || d >= r) return std::nullopt;
  return d < 0 ? d + r : d;
}

bool distinct_dims(const std::vector<int64_t>& dims, int64_t rank) {
  std::set<int64_t> seen;
  for (int64_t d : dims) {
    std::optional<int64_t> w = wrap_dim(d, rank);
    if (!w || !seen.insert(*w).second) return false;
  }
  return true;
}

bool loop_dtype(const graph::TensorType& t) {
  return to_loop_dtype(t.dtype).has_value();
}
DType ldt(const graph::TensorType& t) {
  return *to_loop_dtype(t.dtype);
}

Expr linearize(const Index& index, const std::vector<int64_t>& sizes) {
  Expr lin = loop::idx(0);
  for (size_t d = 0; d < sizes.size(); ++d) lin = lin * size_expr(sizes[d]) + index[d];
  return lin;
}
Index delinearize(const Expr& lin, const std::vector<int64_t>& sizes) {
  Index out(sizes.size());
  int64_t stride = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    Expr q = stride == 1 ? lin : loop::floordiv(lin, size_expr(stride));
    out[d] = d == 0 ? q : loop::mod(q, size_expr(sizes[d]));
    stride *= sizes[d];
  }
  return out;
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}

Expr convert(DType t, Expr e) {
  return detail::cast(t, std::move(e));
}

std::optional<Expr> scalar_constant(DType t, const graph::Arg* value) {
  if (value == nullptr) return std::nullopt;
  if (const auto* b = std::get_if<bool>(value)) return detail::cast(t, loop::bool_imm(*b));
  std::optional<double> d;
  if (const auto* dv = std::get_if<double>(value)) d = *dv;
  if (loop::is_float(t)) {
    if (!std::holds_alternative<int64_t>(*value) && !d) return std::nullopt;
    return detail::constant(t, *value);
  }
  if (t == DType::Bool) {
    if (const auto* i = std::get_if<int64_t>(value)) return loop::bool_imm(*i != 0);
    if (d) return loop::bool_imm(*d != 0);
    return std::nullopt;
  }
  int64_t v = 0;
  if (const auto* i = std::get_if<int64_t>(value)) {
    v = *i;
  } else if (d && std::isfinite(*d) && std::abs(*d) < 9.0e18) {
    v = static_cast<int64_t>(*d);  // truncates toward zero, as static_cast
  } else {
    return std::nullopt;
  }
  if (!loop::int_fits(t, v)) return std::nullopt;
  return loop::IntImm::make(t, v);
}

Expr zero_of(DType t) {
  return loop::is_float(t) ? detail::fconst(t, 0) : loop::IntImm::make(t, 0);
}

std::optional<std::pair<int64_t, int64_t>> slice_range(const Ctx& c, int64_t size) {
  std::optional<int64_t> step = c.int_arg("step");
  if (!step || *step < 1) return std::nullopt;
  int64_t start = 0, end = INT64_MAX;
  if (!c.is_none("start")) {
    std::optional<int64_t> s = c.int_arg("start");
    if (!s) return std::nullopt;
    start = *s;
  }
  if (!c.is_none("end")) {
    std::optional<int64_t> e = c.int_arg("end");
    if (!e) return std::nullopt;
    end = *e;
  }
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  return std::make_pair(start, (end - start + *step - 1) / *step);
}

bool index_dtype(const graph::TensorType& t) {
  return t.dtype == graph::DType::Int64 || t.dtype == graph::DType::Int32;
}

Index broadcast_index(const Index& index, const std::vector<int64_t>& in) {
  Index r(in.size());
  size_t off = index.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) r[d] = in[d] == 1 ? loop::idx(0) : index[d + off];
  return r;
}
bool broadcasts_to(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  if (in.size() > out.size()) return false;
  size_t off = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] != 1 && in[d] != out[d + off]) return false;
  }
  return true;
}

Index broadcast_index(const Index& index, const graph::Dims& in) {
  Index r(in.size());
  size_t off = index.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) {
    r[d] = is_constant(in[d], 1) ? loop::idx(0) : index[d + off];
  }
  return r;
}
bool broadcasts_to(const graph::Dims& in, const graph::Dims& out) {
  if (in.size() > out.size()) return false;
  size_t off = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) {
    if (!is_constant(in[d], 1) && !(in[d] == out[d + off])) return false;
  }
  return true;
}

Expr read_self(const Ctx& c, ElementReader& r, const Index& idx) {
  return r.element(c.self(), idx, false);
}

bool same_dtype_view(const Ctx& c) {
  std::optional<ValueId> self = c.tensor_arg("self");
  if (!self || !loop_dtype(c.type(*self))) return false;
  for (ValueId o : c.n.outputs) {
    if (c.type(o).dtype != c.type(*self).dtype) return false;
  }
  return true;
}

}  // namespace index_detail

namespace {

using namespace index_detail;  // NOLINT(build/namespaces)

const RuleTable& rules() {
  static const RuleTable table = [] {
    RuleTable t;
    add_view_rules(t);
    add_layout_rules(t);
    add_factory_rules(t);
    add_indexing_rules(t);
    return t;
  }();
  return table;
}

// Some tensor `n` reads or writes has shape symbols in its type.
bool over_symbols(const graph::Graph& g, const graph::Node& n) {
  for (ValueId o : n.outputs) {
    if (!g.type(o).is_static()) return true;
  }
  for (const graph::Arg& a : n.args) {
    if (const auto* r = std::get_if<graph::ValueRef>(&a); r && !g.type(r->id).is_static()) {
      return true;
    }
    if (const auto* l = std::get_if<graph::ValueList>(&a)) {
      for (const auto& item : l->items) {
        if (item && !g.type(*item).is_static()) return true;
      }
    }
  }
  return false;
}

const Rule* rule_of(const graph::Graph& g, const graph::Node& n) {
  if (n.op < 0 || n.op >= static_cast<int32_t>(g.ops.size())) return nullptr;
  const graph::OpInfo& op = g.op_of(n);
  auto it = rules().find(graph::OpOverload{op.kind, op.overload});
  return it == rules().end() ? nullptr : &it->second;
}

}  // namespace

std::optional<IndexOpKind> index_op_kind(const graph::Graph& g, const graph::Node& n) {
  if (is_batch_norm_inference(g, n) || is_pool(g, n) || is_upsample(g, n) ||
      is_depthwise_convolution(g, n)) {
    return IndexOpKind::Compute;
  }
  const Rule* rule = rule_of(g, n);
  const graph::OpInfo& op = g.op_of(n);
  if (rule == nullptr || n.outputs.empty() || n.args.size() != op.arg_names.size()) {
    return std::nullopt;
  }
  Ctx c{g, n, op};
  if (rule->kind == IndexOpKind::View && !c.tensor_arg("self")) return std::nullopt;
  if (!op.returns_list && n.outputs.size() != 1) return std::nullopt;
  if (over_symbols(g, n)) {
    // Note [Views over shape symbols]
    // Most index functions take constant sizes. A view over symbols is read at its traced
    // geometry instead (its type's sizes, strides and offset are expressions), so its root must
    // be realized, as as_strided's is (needs_realized_input). Views whose index function reads
    // no size as a number (Rule::symbolic: permutes, transposes, unsqueeze, an expand, a view to
    // the same sizes) are index functions as in a static graph, so a kernel can compute their
    // root and read it through them (a softmax and the copy of its expand that feeds a bmm: one
    // kernel, not two). as_strided itself stays an ATen call: its offset is absolute, and a
    // graph input's may differ per call. A computing op over symbols is a kernel node where its
    // Rule::symbolic holds (a cat, an embedding, a factory: their index functions take sizes as
    // expressions or read none); the others stay ATen calls.
    if (rule->kind == IndexOpKind::Compute) {
      return rule->symbolic && rule->symbolic(c) ? std::optional(IndexOpKind::Compute)
                                                 : std::nullopt;
    }
    if (rule->kind != IndexOpKind::View || op.is(OpKind::as_strided) || !same_dtype_view(c)) {
      return std::nullopt;
    }
    return IndexOpKind::View;
  }
  if (!rule->check(c)) return std::nullopt;
  return rule->kind;
}

std::vector<ValueId> index_tensor_args(const graph::Graph& g, const graph::Node& n) {
  const graph::OpInfo& op = g.op_of(n);
  Ctx c{g, n, op};
  std::vector<ValueId> out;
  auto add = [&](std::optional<ValueId> v) {
    if (v) out.push_back(*v);
  };
  if (op.is(OpKind::index_select) || op.is(OpKind::gather)) add(c.tensor_arg("index"));
  if (op.is(OpKind::embedding)) add(c.tensor_arg("indices"));
  if (op.is(OpKind::index, "Tensor")) {
    const graph::Arg* a = c.arg("indices");
    if (const auto* l = a ? std::get_if<graph::ValueList>(a) : nullptr) {
      for (const auto& item : l->items) add(item);
    }
  }
  return out;
}

bool needs_realized_input(const graph::Graph& g, const graph::Node& n) {
  const Rule* rule = rule_of(g, n);
  if (rule == nullptr) return false;
  if (!rule->lower) return true;
  if (!over_symbols(g, n)) return false;
  const Ctx c{g, n, g.op_of(n)};
  return !rule->symbolic || !rule->symbolic(c);
}

ValueId view_input(const graph::Graph& g, const graph::Node& n) {
  Ctx c{g, n, g.op_of(n)};
  std::optional<ValueId> self = c.tensor_arg("self");
  EMBER_INTERNAL_ASSERT(self.has_value()) << g.op_of(n).qualified_name() << " has no self";
  return *self;
}

loop::Expr lower_index_op(const graph::Graph& g, const graph::Node& n, ValueId out,
                          const Index& index, ElementReader& reader) {
  if (is_batch_norm_inference(g, n)) {
    EMBER_INTERNAL_ASSERT(out == n.outputs[0]) << "batch norm's statistics are not computed";
    return lower_batch_norm_inference(g, n, index, reader);
  }
  if (is_pool(g, n)) {
    EMBER_INTERNAL_ASSERT(out == n.outputs[0]) << "a max pool's indices are not computed";
    return lower_pool(g, n, index, reader);
  }
  if (is_upsample(g, n)) return lower_upsample(g, n, index, reader);
  if (is_depthwise_convolution(g, n)) return lower_depthwise_convolution(g, n, index, reader);
  const Rule* rule = rule_of(g, n);
  EMBER_INTERNAL_ASSERT(rule != nullptr && rule->lower)
      << "lower_index_op of " << g.op_of(n).qualified_name();
  auto it = std::find(n.outputs.begin(), n.outputs.end(), out);
  EMBER_INTERNAL_ASSERT(it != n.outputs.end()) << "value " << out << " is not an output";
  EMBER_INTERNAL_ASSERT(index.size() == static_cast<size_t>(g.type(out).dim()))
      << "index of rank " << index.size() << " for a value of rank " << g.type(out).dim();
  Ctx c{g, n, g.op_of(n)};
  Expr e;
  try {
    e = rule->lower(c, static_cast<size_t>(it - n.outputs.begin()), index, reader);
  } catch (const Unsupported& err) {
    EMBER_UNSUPPORTED(false) << g.op_of(n).qualified_name() << " (value %" << out
                             << "): " << err.what();
  }
  EMBER_INTERNAL_ASSERT(e.defined() && e.dtype() == *to_loop_dtype(g.type(out).dtype))
      << "lower_index_op of " << g.op_of(n).qualified_name() << " gave a wrong element type";
  return e;
}

}  // namespace ember::sched
