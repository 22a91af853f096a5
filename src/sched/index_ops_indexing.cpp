/// \file
/// The index functions of indexing by index tensors (index_ops.h): index_select, gather,
/// embedding, index.Tensor. Their index tensors are range-checked by the kernel (fusion.cpp).
#include <algorithm>
#include <optional>
#include <vector>

#include "sched/fusion.h"
#include "sched/index_ops_internal.h"
#include "sched/pointwise_internal.h"
#include "sched/size_expr.h"
#include "support/error.h"

namespace ember::sched::index_detail {

std::optional<AdvancedIndex> advanced_index(const Ctx& c) {
  // symbolic_advanced_index where the broadcast shape is numbers (index_put's kernel).
  std::optional<SymbolicAdvancedIndex> ai = symbolic_advanced_index(c);
  if (!ai || !graph::all_constant(ai->bshape)) return std::nullopt;
  return AdvancedIndex{ai->indices, graph::constant_values(ai->bshape), ai->first, ai->last};
}

std::optional<SymbolicAdvancedIndex> symbolic_advanced_index(const Ctx& c) {
  const graph::Arg* a = c.arg("indices");
  const auto* l = a ? std::get_if<graph::ValueList>(a) : nullptr;
  const graph::Dims& in = c.type(c.self()).sizes;
  if (l == nullptr || l->items.empty() || l->items.size() > in.size()) return std::nullopt;
  SymbolicAdvancedIndex ai;
  ai.indices.assign(in.size(), std::nullopt);
  bool seen = false, gap = false;
  for (size_t d = 0; d < l->items.size(); ++d) {
    if (!l->items[d]) {
      gap |= seen;
      continue;
    }
    if (gap) return std::nullopt;  // not adjacent: the broadcast dims would go first
    const graph::TensorType& t = c.type(*l->items[d]);
    if (!index_dtype(t) || !kernel_device(t.device)) return std::nullopt;
    if (!seen) ai.first = d;
    seen = true;
    ai.last = d + 1;
    ai.indices[d] = *l->items[d];
    const graph::Dims& s = t.sizes;
    const graph::Dims b = ai.bshape;
    const size_t r = std::max(b.size(), s.size());
    graph::Dims res(r, graph::DimExpr(1));
    for (size_t k = 0; k < r; ++k) {
      graph::DimExpr x = k < r - b.size() ? graph::DimExpr(1) : b[k - (r - b.size())];
      graph::DimExpr y = k < r - s.size() ? graph::DimExpr(1) : s[k - (r - s.size())];
      if (is_constant(x, 1)) {
        res[k] = y;
      } else if (is_constant(y, 1) || x == y) {
        res[k] = x;
      } else {
        return std::nullopt;  // sizes not known to agree
      }
    }
    ai.bshape = res;
  }
  if (!seen) return std::nullopt;
  return ai;
}

void add_indexing_rules(RuleTable& t) {
  using K = IndexOpKind;

  t[{OpKind::index_select, ""}] = {
      K::Compute,
      [](const Ctx& c) {
        std::optional<ValueId> index = c.tensor_arg("index");
        std::optional<int64_t> d = c.int_arg("dim");
        std::vector<int64_t> in = c.sizes(c.self());
        if (!same_dtype_view(c) || !index || !d || in.empty()) return false;
        const graph::TensorType& it = c.type(*index);
        if (!index_dtype(it) || it.dim() > 1) return false;
        std::optional<int64_t> w = wrap_dim(*d, static_cast<int64_t>(in.size()));
        if (!w) return false;
        in[*w] = numel(sizes_of(it));
        return in == c.sizes(c.out());
      },
      [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
        ValueId index = *c.tensor_arg("index");
        std::vector<int64_t> in = c.sizes(c.self());
        size_t d = *wrap_dim(*c.int_arg("dim"), static_cast<int64_t>(in.size()));
        Index ii = c.type(index).dim() == 1 ? Index{idx[d]} : Index{};
        Index i = idx;
        i[d] = r.index_element(index, ii, loop::idx(in[d]), false);
        return read_self(c, r, i);
      }};
  t[{OpKind::gather, ""}] = {
      K::Compute,
      [](const Ctx& c) {
        std::optional<ValueId> index = c.tensor_arg("index");
        std::optional<int64_t> d = c.int_arg("dim");
        std::vector<int64_t> in = c.sizes(c.self());
        if (!same_dtype_view(c) || !index || !d || in.empty()) return false;
        const graph::TensorType& it = c.type(*index);
        std::vector<int64_t> is = sizes_of(it);
        if (!index_dtype(it) || is.size() != in.size()) return false;
        std::optional<int64_t> w = wrap_dim(*d, static_cast<int64_t>(in.size()));
        if (!w || is != c.sizes(c.out())) return false;
        for (size_t k = 0; k < in.size(); ++k) {
          if (static_cast<int64_t>(k) != *w && is[k] > in[k]) return false;
        }
        return true;
      },
      [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
        ValueId index = *c.tensor_arg("index");
        std::vector<int64_t> in = c.sizes(c.self());
        size_t d = *wrap_dim(*c.int_arg("dim"), static_cast<int64_t>(in.size()));
        Index i = idx;
        i[d] = r.index_element(index, idx, loop::idx(in[d]), false);
        return read_self(c, r, i);
      }};
  t[{OpKind::embedding, ""}] = {
      K::Compute,
      [](const Ctx& c) {
        std::optional<ValueId> w = c.tensor_arg("weight"), ids = c.tensor_arg("indices");
        if (!w || !ids || c.n.outputs.size() != 1) return false;
        const graph::TensorType &wt = c.type(*w), &it = c.type(*ids);
        if (wt.dim() != 2 || !loop_dtype(wt) || !index_dtype(it)) return false;
        if (c.type(c.out()).dtype != wt.dtype) return false;
        std::vector<int64_t> out = sizes_of(it);
        out.push_back(wt.sizes[1].constant());
        return out == c.sizes(c.out());
      },
      [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
        ValueId w = *c.tensor_arg("weight"), ids = *c.tensor_arg("indices");
        Index ii(idx.begin(), idx.end() - 1);
        Expr row = r.index_element(ids, ii, loop::idx(c.sizes(w)[0]), false);
        return r.element(w, {row, idx.back()}, false);
      }};
  // Over symbols (token ids of symbolic batch and length): the weight's sizes are the only ones
  // the index function reads.
  t[{OpKind::embedding, ""}].symbolic = [](const Ctx& c) {
    std::optional<ValueId> w = c.tensor_arg("weight"), ids = c.tensor_arg("indices");
    if (!w || !ids || c.n.outputs.size() != 1) return false;
    const graph::TensorType &wt = c.type(*w), &it = c.type(*ids);
    if (wt.dim() != 2 || !wt.is_static() || !loop_dtype(wt) || !index_dtype(it)) return false;
    if (c.type(c.out()).dtype != wt.dtype) return false;
    graph::Dims out = it.sizes;
    out.push_back(wt.sizes[1]);
    return out == c.type(c.out()).sizes;
  };
  t[{OpKind::index, "Tensor"}] = {
      K::Compute,
      [](const Ctx& c) {
        if (!same_dtype_view(c) || c.type(c.self()).dim() == 0) return false;
        std::optional<AdvancedIndex> ai = advanced_index(c);
        if (!ai) return false;
        std::vector<int64_t> in = c.sizes(c.self());
        std::vector<int64_t> out(in.begin(), in.begin() + ai->first);
        out.insert(out.end(), ai->bshape.begin(), ai->bshape.end());
        out.insert(out.end(), in.begin() + ai->last, in.end());
        return out == c.sizes(c.out());
      },
      [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
        // Over Dims: the same for constant sizes and symbolic ones (the rule's `symbolic`).
        SymbolicAdvancedIndex ai = *symbolic_advanced_index(c);
        const graph::Dims& in = c.type(c.self()).sizes;
        const size_t nb = ai.bshape.size();
        Index bidx(idx.begin() + ai.first, idx.begin() + ai.first + nb);
        Index i(in.size());
        for (size_t d = 0; d < in.size(); ++d) {
          if (d < ai.first) {
            i[d] = idx[d];
          } else if (d >= ai.last) {
            i[d] = idx[d - ai.last + ai.first + nb];
          } else if (ai.indices[d]) {
            ValueId v = *ai.indices[d];
            i[d] =
                r.index_element(v, broadcast_index(bidx, c.type(v).sizes), dim_expr(in[d]), true);
          } else {
            return Expr{};  // a gap between indexed dims: rejected by the check
          }
        }
        return read_self(c, r, i);
      }};
  // Over symbols (a mask gathered by index tensors of symbolic length, transformers' packed-
  // sequence masks): the same index function over size expressions, each index checked against
  // its dim's size as an expression.
  t[{OpKind::index, "Tensor"}].symbolic = [](const Ctx& c) {
    if (!same_dtype_view(c) || c.type(c.self()).dim() == 0) return false;
    std::optional<SymbolicAdvancedIndex> ai = symbolic_advanced_index(c);
    if (!ai) return false;
    const graph::Dims& in = c.type(c.self()).sizes;
    graph::Dims out(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(ai->first));
    out.insert(out.end(), ai->bshape.begin(), ai->bshape.end());
    out.insert(out.end(), in.begin() + static_cast<std::ptrdiff_t>(ai->last), in.end());
    return out == c.type(c.out()).sizes;
  };
}

}  // namespace ember::sched::index_detail
