#include "runtime/causal_attention.h"

#include <ATen/core/enum_tag.h>
#include <ATen/ops/all.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/isneginf.h>
#include <ATen/ops/logical_not.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tril.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <variant>

#include "graph/verifier.h"
#include "runtime/constant_fold.h"
#include "runtime/extern_call.h"
#include "support/error.h"

namespace ember::runtime {

namespace {

using graph::ValueId;

int arg_index(const graph::OpInfo& op, const std::string& name) {
  for (size_t i = 0; i < op.arg_names.size(); ++i) {
    if (op.arg_names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

// The SDPA kernels that take a mask, and its argument's name.
const char* mask_arg_name(const graph::OpInfo& op) {
  using graph::OpKind;
  if (op.is(OpKind::_scaled_dot_product_efficient_attention) ||
      op.is(OpKind::_scaled_dot_product_cudnn_attention)) {
    return "attn_bias";
  }
  if (op.is(OpKind::_scaled_dot_product_flash_attention_for_cpu)) return "attn_mask";
  return nullptr;
}

// Whether `m` ([..., L, S], L = S) is the causal mask for every leading index.
bool is_causal_mask(const at::Tensor& m) {
  if (m.dim() < 2 || m.size(-1) != m.size(-2)) return false;
  const int64_t n = m.size(-1);
  at::Tensor lower = at::ones({n, n}, m.options().dtype(at::kBool)).tril();
  if (m.scalar_type() == at::kBool) return at::all(at::eq(m, lower)).item<bool>();
  if (!at::isFloatingType(m.scalar_type())) return false;
  double lowest = -std::numeric_limits<float>::max();
  if (m.scalar_type() == at::kDouble) lowest = std::numeric_limits<double>::lowest();
  if (m.scalar_type() == at::kHalf) lowest = -65504.0;
  if (m.scalar_type() == at::kBFloat16) lowest = -3.3895313892515355e38;
  at::Tensor allowed = at::eq(m, 0);
  at::Tensor blocked = at::logical_or(at::isneginf(m), at::eq(m, lowest));
  return at::all(at::eq(allowed, lower)).item<bool>() &&
         at::all(at::eq(blocked, at::logical_not(lower))).item<bool>();
}

// Note [Causal masks over shape symbols]
// A mask whose sizes are symbols cannot be evaluated once for every call. It is proved causal
// instead: its nodes (arange, adds of constants, unsqueeze, slice, expand, a comparison) are
// read as functions of the element's index, each integer tensor `c + sum_d coef[d] * i_d` and a
// comparison of two as `diff(i) >= 0`. transformers' packed-sequence ids (a cumsum of where a
// position id does not follow the one before, from a cat of the positions shifted by one) are
// one number at every size: equal at every pair, so the mask's `ids[q] == ids[k]` is true
// everywhere (an index of one number reads it when its indices are in range at every size). The
// mask is causal at every size when `diff` is `a * i_query - a * i_key` (a > 0) and reads no other
// dim: key <= query, whatever the sizes. Any other node makes the mask unknown (then it stays).
struct IndexAffine {
  IndexAffine() = default;
  IndexAffine(bool predicate, std::vector<int64_t> coefficients, int64_t constant)
      : is_bool(predicate), coef(std::move(coefficients)), c(constant) {}
  bool is_bool = false;       ///< a predicate `value(i) >= 0` (else an integer tensor)
  std::vector<int64_t> coef;  ///< per dim of the value's type
  int64_t c = 0;
  /// A dim padded at its end (CUDA's attention pads a bias to a multiple of 16, then slices it
  /// back): the function holds below `padded_size` there only. -1: none.
  int padded_dim = -1;
  graph::DimExpr padded_size;
};

// `a` (of rank a.coef.size()) broadcast to `rank` dims (right-aligned), dims of size 1 in
// `sizes` (the operand's type) reading element 0.
IndexAffine broadcast_to(IndexAffine a, const graph::Dims& sizes, size_t rank) {
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == graph::DimExpr(1)) a.coef[d] = 0;
  }
  const size_t lead = rank - a.coef.size();
  a.coef.insert(a.coef.begin(), lead, 0);
  if (a.padded_dim >= 0) a.padded_dim += static_cast<int>(lead);
  return a;
}

std::optional<int64_t> int_value(const graph::Arg& a) {
  if (const auto* v = std::get_if<int64_t>(&a)) return *v;
  return std::nullopt;
}

class MaskProver {
 public:
  MaskProver(const tracer::TracedGraph& traced, const std::vector<at::Tensor>& wrapped)
      : g_(traced.graph), wrapped_(wrapped), values_(g_.values.size()) {}

  /// Reads node `ni` when it is one of the supported ops over known values; true when its
  /// output is known then.
  bool visit(int32_t ni) {
    const graph::Node& n = g_.nodes[ni];
    if (n.outputs.size() != 1) return false;
    std::optional<IndexAffine> r = read(n);
    if (!r) return false;
    values_[n.outputs[0]] = std::move(r);
    return true;
  }

  /// Whether mask `v` ([..., L, S]) is true exactly where key <= query, at every size.
  bool causal(graph::ValueId v) const {
    const std::optional<IndexAffine>& m = values_[v];
    if (!m || !m->is_bool || m->coef.size() < 2 || m->padded_dim >= 0) return false;
    const size_t r = m->coef.size();
    for (size_t d = 0; d + 2 < r; ++d) {
      if (m->coef[d] != 0) return false;
    }
    const int64_t a = m->coef[r - 2];
    return a > 0 && m->coef[r - 1] == -a && m->c == 0;
  }

 private:
  const graph::TensorType& type(graph::ValueId v) const { return g_.type(v); }

  // An integer operand: a known tensor, or a wrapped number (a Python int the program combined
  // with a tensor), as a value of rank 0.
  std::optional<IndexAffine> operand(const graph::Arg& a) const {
    if (std::optional<int64_t> i = int_value(a)) return IndexAffine{false, {}, *i};
    const auto* r = std::get_if<graph::ValueRef>(&a);
    if (r == nullptr) return std::nullopt;
    if (values_[r->id]) {
      if (values_[r->id]->padded_dim >= 0) return std::nullopt;  // (only views read past pads)
      return values_[r->id];
    }
    const at::Tensor& w = wrapped_[r->id];
    if (w.defined() && w.dim() == 0 && at::isIntegralType(w.scalar_type(), false)) {
      return IndexAffine{false, {}, w.item<int64_t>()};
    }
    return std::nullopt;
  }

  std::optional<IndexAffine> read(const graph::Node& n) const {
    using graph::OpKind;
    const graph::OpInfo& op = g_.op_of(n);
    const OpKind kind = op.kind;  // (any overload: each is checked by its arguments)
    const graph::TensorType& out = type(n.outputs[0]);
    const size_t rank = out.sizes.size();
    auto arg = [&](const char* name) -> const graph::Arg* {
      const int i = arg_index(op, name);
      return i >= 0 && static_cast<size_t>(i) < n.args.size() ? &n.args[i] : nullptr;
    };
    auto self = [&]() -> std::optional<IndexAffine> {
      const graph::Arg* a = arg("self");
      return a ? operand(*a) : std::nullopt;
    };
    const bool integral = out.dtype == graph::DType::Int64 || out.dtype == graph::DType::Int32;
    if (kind == OpKind::arange && integral && rank == 1) {
      const graph::Arg* start = arg("start");
      const graph::Arg* step = arg("step");
      std::optional<int64_t> s0 = start ? int_value(*start) : std::optional<int64_t>(0);
      std::optional<int64_t> st = step ? int_value(*step) : std::optional<int64_t>(1);
      if (!s0 || !st) return std::nullopt;
      return IndexAffine{false, {*st}, *s0};
    }
    if ((kind == OpKind::add || kind == OpKind::sub) && integral) {
      const graph::Arg* other = arg("other");
      const graph::Arg* alpha = arg("alpha");
      std::optional<IndexAffine> x = self();
      std::optional<IndexAffine> y = other ? operand(*other) : std::nullopt;
      std::optional<int64_t> k = alpha ? int_value(*alpha) : std::optional<int64_t>(1);
      if (!x || !y || !k || x->is_bool || y->is_bool) return std::nullopt;
      if (kind == OpKind::sub) *k = -*k;
      IndexAffine a = broadcast_to(*x, operand_sizes(*arg("self")), rank);
      IndexAffine b = broadcast_to(*y, operand_sizes(*other), rank);
      for (size_t d = 0; d < rank; ++d) a.coef[d] += *k * b.coef[d];
      a.c += *k * b.c;
      return a;
    }
    // `self` and `other`, two integer tensors (or numbers), broadcast to the result's rank.
    auto compared = [&]() -> std::optional<std::pair<IndexAffine, IndexAffine>> {
      const graph::Arg* other = arg("other");
      std::optional<IndexAffine> x = self();
      std::optional<IndexAffine> y = other ? operand(*other) : std::nullopt;
      if (!x || !y || x->is_bool || y->is_bool) return std::nullopt;
      return std::make_pair(broadcast_to(*x, operand_sizes(*arg("self")), rank),
                            broadcast_to(*y, operand_sizes(*other), rank));
    };
    if ((kind == OpKind::le || kind == OpKind::lt || kind == OpKind::ge || kind == OpKind::gt) &&
        out.dtype == graph::DType::Bool) {
      std::optional<std::pair<IndexAffine, IndexAffine>> ab = compared();
      if (!ab) return std::nullopt;
      const auto& [a, b] = *ab;
      // le: y - x >= 0; lt: y - x - 1 >= 0; ge: x - y >= 0; gt: x - y - 1 >= 0.
      const bool y_minus_x = kind == OpKind::le || kind == OpKind::lt;
      IndexAffine d{true, std::vector<int64_t>(rank, 0), 0};
      for (size_t i = 0; i < rank; ++i) {
        d.coef[i] = y_minus_x ? b.coef[i] - a.coef[i] : a.coef[i] - b.coef[i];
      }
      d.c = (y_minus_x ? b.c - a.c : a.c - b.c) - (kind == OpKind::lt || kind == OpKind::gt);
      return d;
    }
    if ((kind == OpKind::eq || kind == OpKind::ne) && out.dtype == graph::DType::Bool) {
      // Two integer tensors whose difference is one number everywhere: a constant predicate
      // (transformers' packed-sequence ids of one sequence, all equal).
      std::optional<std::pair<IndexAffine, IndexAffine>> ab = compared();
      if (!ab) return std::nullopt;
      const auto& [a, b] = *ab;
      for (size_t d = 0; d < rank; ++d) {
        if (a.coef[d] != b.coef[d]) return std::nullopt;
      }
      return constant_predicate(rank, (kind == OpKind::eq) == (a.c == b.c));
    }
    if (kind == OpKind::cumsum && integral) {
      // A running sum of one number v along a dim: v * (i_d + 1).
      const graph::Arg* dim = arg("dim");
      std::optional<IndexAffine> x = self();
      std::optional<int64_t> d = dim ? int_value(*dim) : std::nullopt;
      if (!x || !d || !is_constant(*x) || rank == 0) return std::nullopt;
      if (*d < 0) *d += static_cast<int64_t>(rank);
      if (*d < 0 || *d >= static_cast<int64_t>(rank)) return std::nullopt;
      const int64_t v = x->is_bool ? (x->c >= 0 ? 1 : 0) : x->c;
      IndexAffine r{false, std::vector<int64_t>(rank, 0), v};
      r.coef[*d] = v;
      return r;
    }
    if (op.is(OpKind::index, "Tensor")) {
      // One number everywhere, gathered at indices that are in range: that number.
      const graph::Arg* indices = arg("indices");
      const auto* list = indices ? std::get_if<graph::ValueList>(indices) : nullptr;
      const auto* src = arg("self") ? std::get_if<graph::ValueRef>(arg("self")) : nullptr;
      std::optional<IndexAffine> x = self();
      if (!list || !src || !x || !is_constant(*x) || list->items.empty() ||
          list->items.size() > type(src->id).sizes.size()) {
        return std::nullopt;
      }
      for (size_t k = 0; k < list->items.size(); ++k) {
        const std::optional<graph::ValueId>& item = list->items[k];
        if (!item || !in_range(*item, type(src->id).sizes[k])) return std::nullopt;
      }
      return IndexAffine{x->is_bool, std::vector<int64_t>(rank, 0), x->c};
    }
    if (op.is(OpKind::cat)) return cat(n, op, rank);
    if ((kind == OpKind::ones || kind == OpKind::new_ones) && out.dtype != graph::DType::Bool &&
        (integral || graph::is_floating(out.dtype))) {
      return IndexAffine{false, std::vector<int64_t>(rank, 0), 1};  // OPT's padding mask of ones
    }
    if (kind == OpKind::_to_copy && arg("self")) {
      // A cast of one number: to bool, whether it is nonzero; to a number, itself.
      std::optional<IndexAffine> x = self();
      if (!x || !is_constant(*x) || x->coef.size() != rank) return std::nullopt;
      const int64_t v = x->is_bool ? (x->c >= 0 ? 1 : 0) : x->c;
      if (out.dtype == graph::DType::Bool) return constant_predicate(rank, v != 0);
      if (integral || graph::is_floating(out.dtype)) {
        return IndexAffine{false, std::vector<int64_t>(rank, 0), v};
      }
      return std::nullopt;
    }
    if ((kind == OpKind::ones || kind == OpKind::new_ones ||
         (kind == OpKind::full && arg("fill_value") &&
          std::holds_alternative<bool>(*arg("fill_value")) &&
          std::get<bool>(*arg("fill_value")))) &&
        out.dtype == graph::DType::Bool) {
      return IndexAffine{true, std::vector<int64_t>(rank, 0), 0};  // true everywhere: 0 >= 0
    }
    if ((kind == OpKind::bitwise_not || kind == OpKind::logical_not) &&
        out.dtype == graph::DType::Bool) {
      std::optional<IndexAffine> x = self();
      if (!x || !x->is_bool) return std::nullopt;
      for (int64_t& k : x->coef) k = -k;  // not (diff >= 0): -diff - 1 >= 0
      x->c = -x->c - 1;
      return x;
    }
    if ((kind == OpKind::bitwise_and || kind == OpKind::logical_and) &&
        out.dtype == graph::DType::Bool) {
      // A mask and'ed with one true everywhere (transformers' padding mask of ones).
      const graph::Arg* other = arg("other");
      std::optional<IndexAffine> x = self();
      std::optional<IndexAffine> y = other ? operand(*other) : std::nullopt;
      if (!x || !y || !x->is_bool || !y->is_bool) return std::nullopt;
      IndexAffine a = broadcast_to(*x, operand_sizes(*arg("self")), rank);
      IndexAffine b = broadcast_to(*y, operand_sizes(*other), rank);
      auto everywhere = [](const IndexAffine& p) {
        return p.c >= 0 &&
               std::all_of(p.coef.begin(), p.coef.end(), [](int64_t k) { return k == 0; });
      };
      if (everywhere(b)) return a;
      if (everywhere(a)) return b;
      return std::nullopt;
    }
    if ((kind == OpKind::zeros || kind == OpKind::new_zeros || kind == OpKind::zeros_like) &&
        out.dtype != graph::DType::Bool && (integral || graph::is_floating(out.dtype))) {
      return IndexAffine{false, std::vector<int64_t>(rank, 0), 0};
    }
    if (kind == OpKind::masked_fill && graph::is_floating(out.dtype)) {
      // The additive mask: zeros filled with -inf (or the dtype's lowest value) where blocked,
      // the same mask to attention as not(blocked).
      const graph::Arg* mask = arg("mask");
      const auto* m = mask ? std::get_if<graph::ValueRef>(mask) : nullptr;
      const std::optional<IndexAffine> x = self();
      const std::optional<double> v = arg("value") ? scalar(*arg("value")) : std::nullopt;
      if (!m || !values_[m->id] || !values_[m->id]->is_bool || values_[m->id]->padded_dim >= 0 ||
          !x || x->is_bool || !is_constant(*x) || x->c != 0 || !v.has_value() ||
          !blocks(*v, out.dtype)) {
        return std::nullopt;
      }
      IndexAffine p = broadcast_to(*values_[m->id], type(m->id).sizes, rank);
      for (int64_t& k : p.coef) k = -k;  // not (diff >= 0): -diff - 1 >= 0
      p.c = -p.c - 1;
      return p;
    }
    if (op.is(OpKind::where, "self") && graph::is_floating(out.dtype)) {
      // transformers' float mask: where(allowed, 0, -inf) (or the dtype's lowest value), the
      // same mask to attention as the predicate; where(blocked, -inf, 0) its negation.
      const graph::Arg* cond = arg("condition");
      const auto* c = cond ? std::get_if<graph::ValueRef>(cond) : nullptr;
      const std::optional<double> x = arg("self") ? scalar(*arg("self")) : std::nullopt;
      const std::optional<double> y = arg("other") ? scalar(*arg("other")) : std::nullopt;
      if (!c || !values_[c->id] || !values_[c->id]->is_bool || values_[c->id]->padded_dim >= 0 ||
          !x.has_value() || !y.has_value()) {
        return std::nullopt;
      }
      const double a = x.value_or(1.0), b = y.value_or(1.0);
      IndexAffine p = broadcast_to(*values_[c->id], type(c->id).sizes, rank);
      if (a == 0.0 && blocks(b, out.dtype)) return p;
      if (blocks(a, out.dtype) && b == 0.0) {  // not (diff >= 0): -diff - 1 >= 0
        for (int64_t& k : p.coef) k = -k;
        p.c = -p.c - 1;
        return p;
      }
      return std::nullopt;
    }
    const bool view = op.is(OpKind::unsqueeze) || op.is(OpKind::slice, "Tensor") ||
                      op.is(OpKind::expand) || op.is(OpKind::alias) || op.is(OpKind::clone) ||
                      op.is(OpKind::constant_pad_nd);
    const auto* in = n.args.empty() ? nullptr : std::get_if<graph::ValueRef>(&n.args[0]);
    if (!view || in == nullptr || !values_[in->id]) return std::nullopt;
    std::optional<IndexAffine> x = values_[in->id];
    if (x->coef.size() != type(in->id).sizes.size()) return std::nullopt;
    if (op.is(OpKind::constant_pad_nd)) {
      // Padded at the end of the last dim only: the values below its old size are the input's.
      const graph::Arg* pad = arg("pad");
      const std::optional<graph::Dims> p = pad ? graph::dims_arg(*pad) : std::nullopt;
      if (!p || p->size() != 2 || !((*p)[0] == graph::DimExpr(0)) || x->padded_dim >= 0 ||
          rank == 0) {
        return std::nullopt;
      }
      x->padded_dim = static_cast<int>(rank) - 1;
      x->padded_size = type(in->id).sizes.back();
      return x;
    }
    if (op.is(OpKind::unsqueeze)) {
      const graph::Arg* dim = arg("dim");
      std::optional<int64_t> d = dim ? int_value(*dim) : std::nullopt;
      if (!d) return std::nullopt;
      if (*d < 0) *d += static_cast<int64_t>(rank);
      if (*d < 0 || *d >= static_cast<int64_t>(rank)) return std::nullopt;
      x->coef.insert(x->coef.begin() + *d, 0);
      if (x->padded_dim >= *d) ++x->padded_dim;
      return x;
    }
    if (op.is(OpKind::slice, "Tensor")) {
      std::optional<int64_t> d = arg("dim") ? int_value(*arg("dim")) : std::nullopt;
      std::optional<int64_t> start = arg("start") ? int_value(*arg("start")) : std::nullopt;
      std::optional<int64_t> step = arg("step") ? int_value(*arg("step")) : std::nullopt;
      if (!d || !start || !step || *start < 0) return std::nullopt;
      if (*d < 0) *d += static_cast<int64_t>(rank);
      if (*d < 0 || *d >= static_cast<int64_t>(rank)) return std::nullopt;
      if (x->padded_dim == *d) {
        // Sliced back to the size before the pad: the pad is gone.
        if (*start != 0 || *step != 1 || !(out.sizes[*d] == x->padded_size)) return std::nullopt;
        x->padded_dim = -1;
      }
      x->c += x->coef[*d] * *start;
      x->coef[*d] *= *step;
      return x;
    }
    return broadcast_to(*x, type(in->id).sizes, rank);  // expand, alias, clone
  }

  // Whether a mask value `v` of dtype `t` blocks (as is_causal_mask reads it).
  static bool blocks(double v, graph::DType t) {
    if (std::isinf(v) && v < 0) return true;
    switch (t) {
      case graph::DType::Float32:
        return v == -static_cast<double>(std::numeric_limits<float>::max());
      case graph::DType::Float64:
        return v == std::numeric_limits<double>::lowest();
      case graph::DType::Float16:
        return v == -65504.0;
      case graph::DType::BFloat16:
        return v == -3.3895313892515355e38;
      default:
        return false;
    }
  }
  // A 0-dim value the graph makes from a number (scalar_tensor), or a wrapped number.
  std::optional<double> scalar(const graph::Arg& a) const {
    if (const auto* d = std::get_if<double>(&a)) return *d;
    const auto* r = std::get_if<graph::ValueRef>(&a);
    if (r == nullptr) return std::nullopt;
    const at::Tensor& w = wrapped_[r->id];
    if (w.defined() && w.dim() == 0) return w.item<double>();
    const int32_t ni = g_.values[r->id].node;
    if (ni < 0) return std::nullopt;
    const graph::Node& n = g_.nodes[ni];
    if (!g_.op_of(n).is(graph::OpKind::scalar_tensor) || n.args.empty()) return std::nullopt;
    if (const auto* d = std::get_if<double>(&n.args[0])) return *d;
    if (const auto* i = std::get_if<int64_t>(&n.args[0])) return static_cast<double>(*i);
    return std::nullopt;
  }

  static bool is_constant(const IndexAffine& p) {
    return std::all_of(p.coef.begin(), p.coef.end(), [](int64_t k) { return k == 0; });
  }
  static IndexAffine constant_predicate(size_t rank, bool holds) {
    return IndexAffine{true, std::vector<int64_t>(rank, 0), holds ? 0 : -1};  // 0 >= 0, -1 >= 0
  }

  // Whether known integer tensor `v` holds indices in [0, size) at every size: its smallest and
  // largest values over its index space, as expressions.
  bool in_range(graph::ValueId v, const graph::DimExpr& size) const {
    const std::optional<IndexAffine>& p = values_[v];
    if (!p || p->is_bool || p->padded_dim >= 0) return false;
    const graph::Dims& sizes = type(v).sizes;
    if (p->coef.size() != sizes.size()) return false;
    graph::DimExpr lo = p->c, hi = p->c;
    for (size_t d = 0; d < sizes.size(); ++d) {
      const graph::DimExpr span = graph::DimExpr(p->coef[d]) * (sizes[d] - graph::DimExpr(1));
      graph::DimExpr& end = p->coef[d] < 0 ? lo : hi;
      end = end + span;
    }
    const graph::DimExpr slack = size - graph::DimExpr(1) - hi;
    return lo.is_constant() && lo.constant() >= 0 && slack.is_constant() && slack.constant() >= 0;
  }

  // cat along a dim of pieces that are one affine function shifted by their offsets: that
  // function (a position id's previous one, `cat([p[:, :1] - 1, p], -1)`, is p shifted by one).
  std::optional<IndexAffine> cat(const graph::Node& n, const graph::OpInfo& op, size_t rank) const {
    const int ti = arg_index(op, "tensors"), di = arg_index(op, "dim");
    if (ti < 0 || static_cast<size_t>(ti) >= n.args.size()) return std::nullopt;
    const auto* list = std::get_if<graph::ValueList>(&n.args[ti]);
    std::optional<int64_t> d = di >= 0 && static_cast<size_t>(di) < n.args.size()
                                   ? int_value(n.args[di])
                                   : std::optional<int64_t>(0);
    if (!list || list->items.empty() || !d || rank == 0) return std::nullopt;
    if (*d < 0) *d += static_cast<int64_t>(rank);
    if (*d < 0 || *d >= static_cast<int64_t>(rank)) return std::nullopt;
    const auto dim = static_cast<size_t>(*d);
    std::vector<IndexAffine> pieces;
    std::vector<int64_t> offsets;
    graph::DimExpr offset = 0;
    for (const std::optional<graph::ValueId>& item : list->items) {
      if (!item || !values_[*item] || values_[*item]->padded_dim >= 0 ||
          type(*item).sizes.size() != rank || !offset.is_constant()) {
        return std::nullopt;
      }
      pieces.push_back(broadcast_to(*values_[*item], type(*item).sizes, rank));
      offsets.push_back(offset.constant());
      offset = offset + type(*item).sizes[dim];
    }
    // The function: the last piece's, shifted to its offset; every piece must agree with it.
    IndexAffine f = pieces.back();
    f.c -= f.coef[dim] * offsets.back();
    for (size_t k = 0; k < pieces.size(); ++k) {
      const IndexAffine& p = pieces[k];
      const graph::DimExpr& size = type(*list->items[k]).sizes[dim];
      if (p.is_bool != f.is_bool) return std::nullopt;
      for (size_t e = 0; e < rank; ++e) {
        if (e != dim && p.coef[e] != f.coef[e]) return std::nullopt;
      }
      const bool one = size.is_constant() && size.constant() == 1;
      if ((!one && p.coef[dim] != f.coef[dim]) || p.c != f.c + f.coef[dim] * offsets[k]) {
        return std::nullopt;
      }
    }
    return f;
  }

  graph::Dims operand_sizes(const graph::Arg& a) const {
    const auto* r = std::get_if<graph::ValueRef>(&a);
    return r ? type(r->id).sizes : graph::Dims{};
  }

  const graph::Graph& g_;
  const std::vector<at::Tensor>& wrapped_;
  std::vector<std::optional<IndexAffine>> values_;
};

}  // namespace

int causal_attention(tracer::TracedGraph& traced) {
  const graph::Graph& g = traced.graph;
  // Values computed from no graph input, by deterministic nodes (their values are the same on
  // every call): what constant folding would fold, without its size limit.
  std::vector<bool> computable(g.values.size(), false);
  std::vector<bool> node_computable(g.nodes.size(), false);
  std::vector<int32_t> candidates;
  // Python numbers the program combined with tensors are constants of the graph too (a caller's
  // tensor held as a constant may change between calls; a wrapped number cannot).
  std::vector<at::Tensor> env(g.values.size());
  {
    int ci = 0;
    for (const graph::Input& in : g.inputs) {
      if (in.kind != graph::InputKind::Constant) continue;
      const at::Tensor& t = traced.constants.at(ci++);
      if (t.defined() && t.unsafeGetTensorImpl()->is_wrapped_number()) {
        computable[in.value] = true;
        env[in.value] = t;
      }
    }
  }
  // Masks over shape symbols: proved causal instead (Note [Causal masks over shape symbols]).
  MaskProver prover(traced, env);
  std::vector<bool> proved(g.nodes.size(), false);  // nodes the prover read
  std::vector<bool> known(g.values.size(), false);
  for (int32_t ni = 0; ni < static_cast<int32_t>(g.nodes.size()); ++ni) {
    const graph::Node& n = g.nodes[ni];
    const graph::OpInfo& info = g.op_of(n);
    if (!n.outputs.empty() && prover.visit(ni)) {
      proved[ni] = true;
      known[n.outputs[0]] = true;
    }
    if (const char* mask_name = mask_arg_name(info)) {
      const int mi = arg_index(info, mask_name), ci = arg_index(info, "is_causal"),
                di = arg_index(info, "dropout_p");
      const auto* mask = mi >= 0 ? std::get_if<graph::ValueRef>(&n.args[mi]) : nullptr;
      const auto* causal = ci >= 0 ? std::get_if<bool>(&n.args[ci]) : nullptr;
      const auto* dropout = di >= 0 ? std::get_if<double>(&n.args[di]) : nullptr;
      if (mask && (computable[mask->id] || known[mask->id]) && causal && !*causal && dropout &&
          *dropout == 0.0) {
        candidates.push_back(ni);
      }
    }
    if (n.outputs.empty()) continue;
    const bool metadata_only = reads_only_metadata(info);
    bool ok = true;
    for (ValueId v : graph::tensor_reads(n)) {
      ok = ok && (computable[v] || (metadata_only && g.type(v).is_static()));
    }
    for (ValueId o : n.outputs) ok = ok && g.type(o).is_static();
    if (!ok) continue;
    const c10::OperatorHandle op = *make_extern_call(g, ni).op;
    // (Ops of a dynamic output shape, `index` with tensors, have their traced shapes here.)
    if (op.hasTag(at::Tag::nondeterministic_seeded)) continue;
    node_computable[ni] = true;
    for (ValueId o : n.outputs) computable[o] = true;
  }
  if (candidates.empty()) return 0;

  // Evaluates the masks computable at the trace's sizes: each node they need, once, as the
  // executor would run it.
  auto mask_of = [&](int32_t ni) {
    const graph::Node& n = g.nodes[ni];
    return std::get<graph::ValueRef>(n.args[arg_index(g.op_of(n), mask_arg_name(g.op_of(n)))]).id;
  };
  // A mask the prover reads as causal at every size is causal at the trace's too: it is not run
  // (on a GPU, running it loads ATen's kernels for its ops, most of a warm start's pass time).
  std::vector<ValueId> masks;
  for (int32_t ni : candidates) {
    const ValueId mv = mask_of(ni);
    if (computable[mv] && !prover.causal(mv)) masks.push_back(mv);
  }
  const std::vector<bool> needed = graph::nodes_needed_by(g, masks);
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  torch::jit::Stack stack;
  for (int32_t ni = 0; ni < static_cast<int32_t>(g.nodes.size()); ++ni) {
    if (!needed[ni]) continue;
    EMBER_INTERNAL_ASSERT(node_computable[ni]) << "a causal mask reads node " << ni;
    std::vector<ValueId> stand_ins;  // what a metadata-only op reads of a graph input
    for (ValueId v : graph::tensor_reads(g.nodes[ni])) {
      if (!env[v].defined()) {
        env[v] = stand_in(g.type(v));
        stand_ins.push_back(v);
      }
    }
    make_extern_call(g, ni).run(env, stack);
    for (ValueId v : stand_ins) env[v].reset();
  }

  graph::Graph h = g;
  int rewritten = 0;
  for (int32_t ni : candidates) {
    graph::Node& n = h.nodes[ni];
    const graph::OpInfo& op = h.op_of(n);
    const int mi = arg_index(op, mask_arg_name(op));
    const ValueId mv = std::get<graph::ValueRef>(n.args[mi]).id;
    // Queries = keys (else is_causal aligns the diagonal top-left where the mask may not), as
    // many as the mask's (compared as expressions: equal at every size).
    const graph::Dims& qs = h.type(std::get<graph::ValueRef>(n.args[0]).id).sizes;
    const graph::Dims& ks = h.type(std::get<graph::ValueRef>(n.args[1]).id).sizes;
    const graph::Dims& ms = h.type(mv).sizes;
    if (qs.size() < 2 || ks.size() < 2 || ms.size() < 2 ||
        !(qs[qs.size() - 2] == ks[ks.size() - 2]) || !(ms[ms.size() - 1] == ks[ks.size() - 2]) ||
        !(ms[ms.size() - 2] == qs[qs.size() - 2])) {
      continue;
    }
    // A mask is read by value when it was evaluated (computed from no input, at static sizes,
    // and not proved causal); otherwise by the prover (over shape symbols: OPT's padding mask of
    // ones).
    const bool by_value = computable[mv] && env[mv].defined();
    if (by_value ? !is_causal_mask(env[mv]) : !prover.causal(mv)) continue;
    n.args[mi] = graph::NoneArg{};
    n.args[arg_index(op, "is_causal")] = true;
    ++rewritten;
  }
  if (rewritten == 0) return 0;

  // Drops the computable nodes nothing reads any more (the masks' nodes), last to first.
  std::vector<int> readers(h.values.size(), 0);
  for (const graph::Node& n : h.nodes) {
    for (ValueId v : graph::tensor_reads(n)) ++readers[v];
  }
  for (ValueId v : h.outputs) ++readers[v];
  for (const graph::Mutation& mu : h.mutations) ++readers[mu.value];
  std::vector<bool> dropped(h.nodes.size(), false);
  for (int32_t ni = static_cast<int32_t>(h.nodes.size()) - 1; ni >= 0; --ni) {
    const graph::Node& n = h.nodes[ni];
    if (!(node_computable[ni] || proved[ni]) || n.outputs.empty()) continue;
    bool unread = true;
    for (ValueId o : n.outputs) unread = unread && readers[o] == 0;
    if (!unread) continue;
    dropped[ni] = true;
    for (ValueId v : graph::tensor_reads(n)) --readers[v];
  }

  graph::Graph out;
  out.ops = h.ops;
  out.symbols = h.symbols;
  std::vector<ValueId> remap(h.values.size(), -1);
  for (const graph::Input& in : h.inputs) {
    remap[in.value] = out.add_input(h.type(in.value), in.kind, in.name);
  }
  for (int32_t ni = 0; ni < static_cast<int32_t>(h.nodes.size()); ++ni) {
    if (!dropped[ni]) graph::copy_node(h, h.nodes[ni], out, remap);
  }
  for (ValueId v : h.outputs) out.outputs.push_back(remap[v]);
  for (const graph::Mutation& mu : h.mutations) {
    out.mutations.push_back({remap[mu.input], remap[mu.value]});
  }
  graph::check_graph(out);
  traced.graph = std::move(out);
  return rewritten;
}

}  // namespace ember::runtime
