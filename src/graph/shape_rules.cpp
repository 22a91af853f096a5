#include "graph/shape_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "graph/shape_rules_internal.h"
#include "support/error.h"
#include "sym/eval.h"
#include "sym/simplify.h"

namespace ember::graph {
namespace shape_rules_detail {

int64_t wrap_dim(const Call& c, int64_t d, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (d < 0) d += r;
  EMBER_INTERNAL_ASSERT(d >= 0 && d < r) << c.name() << ": dim " << d << " of rank " << rank;
  return d;
}

/// Broadcast sizes (torch's rules), deciding the equalities they need through guards.
Dims broadcast(const Call& c, const std::vector<const Dims*>& shapes) {
  size_t rank = 0;
  for (const Dims* s : shapes) rank = std::max(rank, s->size());
  Dims out(rank, DimExpr(1));
  for (size_t k = 0; k < rank; ++k) {
    DimExpr& r = out[rank - 1 - k];
    for (const Dims* s : shapes) {
      if (k >= s->size()) continue;
      const DimExpr& d = (*s)[s->size() - 1 - k];
      if (d == DimExpr(1) || d == r) continue;
      if (r == DimExpr(1)) {
        r = d;
        continue;
      }
      if (c.decide(d, Rel::EQ, 1)) continue;
      if (c.decide(r, Rel::EQ, 1)) {
        r = d;
        continue;
      }
      EMBER_UNSUPPORTED(c.decide(r, Rel::EQ, d))
          << c.name() << ": sizes " << r.str() << " and " << d.str() << " do not broadcast";
      if (d.is_constant()) r = d;  // prefer the constant of two equal sizes
    }
  }
  return out;
}

Dims reduced(const Call& c, const TensorType& self, const Arg* dim_arg_p, bool keepdim) {
  int64_t rank = self.dim();
  std::vector<bool> reduce(static_cast<size_t>(rank), false);
  bool all = dim_arg_p == nullptr || std::holds_alternative<NoneArg>(*dim_arg_p);
  if (!all) {
    if (std::holds_alternative<int64_t>(*dim_arg_p) ||
        std::holds_alternative<DimExpr>(*dim_arg_p)) {
      if (rank > 0) reduce[static_cast<size_t>(wrap_dim(c, c.integer(*dim_arg_p), rank))] = true;
    } else {
      Dims ds = c.dims(*dim_arg_p);
      if (ds.empty()) all = true;
      for (const DimExpr& d : ds) {
        if (rank > 0)
          reduce[static_cast<size_t>(wrap_dim(c, c.guards.specialize(d.expr()), rank))] = true;
      }
    }
  }
  Dims out;
  for (int64_t d = 0; d < rank; ++d) {
    bool r = all || reduce[static_cast<size_t>(d)];
    if (!r) {
      out.push_back(self.sizes[static_cast<size_t>(d)]);
    } else if (keepdim) {
      out.push_back(1);
    }
  }
  return out;
}

bool keepdim_of(const Call& c) {
  const Arg* k = c.named("keepdim");
  if (k == nullptr) return false;
  const bool* b = std::get_if<bool>(k);
  return b != nullptr && *b;
}

}  // namespace shape_rules_detail

namespace {

using namespace shape_rules_detail;  // NOLINT(google-build-using-namespace)
using sym::SymExpr;

constexpr int64_t kMaxIndex = std::numeric_limits<int64_t>::max();

/// view/_unsafe_view/reshape sizes with a -1 inferred.
Dims view_sizes(const Call& c, const TensorType& self, Dims sizes) {
  std::optional<size_t> infer;
  DimExpr known = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == DimExpr(-1)) {
      infer = i;
    } else {
      known = known * sizes[i];
    }
  }
  if (infer) {
    DimExpr total = sym_numel(self.sizes);
    sizes[*infer] = c.simplify(floordiv(total, known));
  }
  return sizes;
}

/// The strides of a view of `self` as `sizes` without a copy, as torch computes them (chunks of
/// dims that are contiguous among themselves are split or merged), or nullopt when the view
/// needs a copy. Relations between sizes are decided through guards.
std::optional<Dims> view_strides(const Call& c, const TensorType& self, const Dims& sizes) {
  const Dims& old_sizes = self.sizes;
  const Dims& old_strides = self.strides;
  Dims strides(sizes.size(), DimExpr(1));
  if (old_sizes.empty()) return strides;
  auto view_d = static_cast<int64_t>(sizes.size()) - 1;
  DimExpr chunk_base_stride = old_strides.back();
  DimExpr tensor_numel = 1;
  DimExpr view_numel = 1;
  for (auto tensor_d = static_cast<int64_t>(old_sizes.size()) - 1; tensor_d >= 0; --tensor_d) {
    auto td = static_cast<size_t>(tensor_d);
    tensor_numel = tensor_numel * old_sizes[td];
    bool chunk_ends = tensor_d == 0;
    if (!chunk_ends) {
      const DimExpr& prev_size = old_sizes[td - 1];
      const DimExpr& prev_stride = old_strides[td - 1];
      chunk_ends = !(prev_size == DimExpr(1)) && !c.decide(prev_size, Rel::EQ, 1) &&
                   !(prev_stride == tensor_numel * chunk_base_stride) &&
                   c.decide(prev_stride, Rel::NE, tensor_numel * chunk_base_stride);
    }
    if (!chunk_ends) continue;
    while (view_d >= 0) {
      const DimExpr& v = sizes[static_cast<size_t>(view_d)];
      bool take = v == DimExpr(1) ||
                  (!(view_numel == tensor_numel) && c.decide(view_numel, Rel::LT, tensor_numel));
      if (!take) break;
      strides[static_cast<size_t>(view_d)] = view_numel * chunk_base_stride;
      view_numel = view_numel * v;
      --view_d;
    }
    if (!(view_numel == tensor_numel) && c.decide(view_numel, Rel::NE, tensor_numel)) {
      return std::nullopt;
    }
    if (tensor_d > 0) {
      chunk_base_stride = old_strides[td - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return strides;
}

/// Entry `i` of a per-spatial-dim argument (a stride, padding, kernel size), which torch also
/// takes as one value for every dim.
const DimExpr& per_dim(const Dims& v, size_t i) {
  return v.size() == 1 ? v[0] : v.at(i);
}

DimExpr clamp_index(const Call& c, DimExpr i, const DimExpr& size) {
  if (i.is_constant() && i.constant() < 0) i = i + size;
  if (c.decide(i, Rel::LT, 0)) return 0;
  // i == size clamps to i itself: asking `i > size` keeps that case in the graph (a length
  // equal to a buffer's size reuses it).
  if (c.decide(i, Rel::GT, size)) return size;
  return i;
}

std::vector<TensorType> rule(const Call& c) {
  const OpKind kind = c.op.kind;
  const std::string& ov = c.op.overload;

  if (op_category(kind) == OpCategory::Pointwise || c.pointwise_tag) {
    Dims sizes = broadcast(c, c.all_tensor_shapes());
    std::vector<TensorType> out;
    for (size_t i = 0; i < c.concrete.size(); ++i) out.push_back(c.fresh(i, sizes));
    return out;
  }

  switch (kind) {
    // ---- reductions
    case OpKind::sum:
    case OpKind::mean:
    case OpKind::prod:
    case OpKind::amax:
    case OpKind::amin:
    case OpKind::max:
    case OpKind::min:
    case OpKind::argmax:
    case OpKind::argmin:
    case OpKind::any:
    case OpKind::all:
    case OpKind::var:
    case OpKind::std:
    case OpKind::var_mean:
    case OpKind::std_mean:
    case OpKind::logsumexp: {
      const TensorType& self = c.tensor(0);
      Dims sizes = reduced(c, self, c.named("dim"), keepdim_of(c));
      std::vector<TensorType> out;
      for (size_t i = 0; i < c.concrete.size(); ++i) out.push_back(c.fresh(i, sizes));
      return out;
    }
    case OpKind::_softmax:
    case OpKind::_log_softmax:
    case OpKind::_safe_softmax:
    case OpKind::_softmax_backward_data:
    case OpKind::_log_softmax_backward_data:
    case OpKind::tril:
    case OpKind::triu:
    case OpKind::flip:
    case OpKind::roll:
    case OpKind::fill:
    case OpKind::index_put:
    case OpKind::_index_put_impl:
    case OpKind::index_add:
    case OpKind::index_copy:
    case OpKind::index_fill:
    case OpKind::scatter:
    case OpKind::scatter_add:
    case OpKind::scatter_reduce:
    case OpKind::slice_scatter:
    case OpKind::select_scatter:
    case OpKind::empty_like:
    case OpKind::zeros_like:
    case OpKind::ones_like:
    case OpKind::full_like:
      return c.same_as(c.tensor(0));
    case OpKind::native_group_norm: {
      // (input, weight, bias, N, C, HxW, group, eps): the input's shape, and the mean and rstd
      // [N, group]; N and C as the input's dims 0 and 1, HxW the product of the rest.
      const TensorType& x = c.tensor(0);
      EMBER_UNSUPPORTED(x.dim() >= 2) << c.name() << " of rank " << x.dim();
      c.require_equal(c.dim(c.at(3)), x.sizes[0], "batch");
      c.require_equal(c.dim(c.at(4)), x.sizes[1], "channels");
      DimExpr spatial = 1;
      for (size_t d = 2; d < x.sizes.size(); ++d) spatial = spatial * x.sizes[d];
      c.require_equal(c.dim(c.at(5)), c.simplify(spatial), "spatial size");
      const DimExpr group = c.dim(c.at(6));
      return c.by_slot({x.sizes, Dims{x.sizes[0], group}, Dims{x.sizes[0], group}});
    }
    case OpKind::native_layer_norm: {
      const TensorType& x = c.tensor(0);
      Dims normalized = c.dims(c.at(1));
      size_t axis = x.sizes.size() - normalized.size();
      for (size_t i = 0; i < normalized.size(); ++i) {
        c.require_equal(x.sizes[axis + i], normalized[i], "normalized size");
        for (size_t w = 2; w <= 3 && w < c.args.size(); ++w) {
          const TensorType* t = c.tensor_or_null(c.at(w));
          if (t != nullptr && t->sizes.size() == normalized.size()) {
            c.require_equal(t->sizes[i], normalized[i], "weight size");
          }
        }
      }
      Dims stats(x.sizes.begin(), x.sizes.begin() + static_cast<std::ptrdiff_t>(axis));
      stats.resize(x.sizes.size(), DimExpr(1));
      return {c.fresh(0, x.sizes), c.fresh(1, stats), c.fresh(2, stats)};
    }

    case OpKind::copy: {
      // The functional copy_ clones self preserving its strides and storage offset.
      const TensorType& s = c.tensor(0);
      return {c.view(0, s.sizes, s.strides, s.storage_offset)};
    }

    // ---- views
    case OpKind::alias:
    case OpKind::detach: {
      const TensorType& s = c.tensor(0);
      return {c.view(0, s.sizes, s.strides, s.storage_offset)};
    }
    case OpKind::view:
    case OpKind::_unsafe_view:
    case OpKind::reshape: {
      const TensorType& s = c.tensor(0);
      Dims sizes = view_sizes(c, s, c.dims(c.at(1)));
      if (s.is_contiguous()) return {c.view(0, sizes, contiguous_strides(sizes), s.storage_offset)};
      std::optional<Dims> strides = view_strides(c, s, sizes);
      EMBER_UNSUPPORTED(strides.has_value())
          << c.name() << " of a tensor whose strides do not allow the view, with symbolic sizes";
      return {c.view(0, sizes, *strides, s.storage_offset)};
    }
    case OpKind::permute: {
      const TensorType& s = c.tensor(0);
      Dims perm = c.dims(c.at(1));
      Dims sizes, strides;
      for (const DimExpr& p : perm) {
        auto d = static_cast<size_t>(wrap_dim(c, c.guards.specialize(p.expr()), s.dim()));
        sizes.push_back(s.sizes[d]);
        strides.push_back(s.strides[d]);
      }
      return {c.view(0, sizes, strides, s.storage_offset)};
    }
    case OpKind::transpose:
    case OpKind::t: {
      const TensorType& s = c.tensor(0);
      Dims sizes = s.sizes, strides = s.strides;
      if (s.dim() >= 2) {
        int64_t a = kind == OpKind::t ? 0 : wrap_dim(c, c.integer(c.at(1)), s.dim());
        int64_t b = kind == OpKind::t ? 1 : wrap_dim(c, c.integer(c.at(2)), s.dim());
        std::swap(sizes[static_cast<size_t>(a)], sizes[static_cast<size_t>(b)]);
        std::swap(strides[static_cast<size_t>(a)], strides[static_cast<size_t>(b)]);
      }
      return {c.view(0, sizes, strides, s.storage_offset)};
    }
    case OpKind::unsqueeze: {
      const TensorType& s = c.tensor(0);
      int64_t d = c.integer(c.at(1));
      if (d < 0) d += s.dim() + 1;
      EMBER_INTERNAL_ASSERT(d >= 0 && d <= s.dim()) << c.name() << ": dim " << d;
      Dims sizes = s.sizes, strides = s.strides;
      auto ud = static_cast<size_t>(d);
      DimExpr stride = ud >= s.sizes.size() ? DimExpr(1) : s.sizes[ud] * s.strides[ud];
      sizes.insert(sizes.begin() + d, DimExpr(1));
      strides.insert(strides.begin() + d, stride);
      return {c.view(0, sizes, strides, s.storage_offset)};
    }
    case OpKind::squeeze: {
      const TensorType& s = c.tensor(0);
      std::vector<bool> drop(s.sizes.size(), false);
      const Arg* dim = c.args.size() > 1 ? &c.at(1) : nullptr;
      for (size_t d = 0; d < s.sizes.size(); ++d) {
        drop[d] = dim == nullptr && s.sizes[d] == DimExpr(1);
      }
      if (dim != nullptr) {
        Dims ds = std::holds_alternative<int64_t>(*dim) || std::holds_alternative<DimExpr>(*dim)
                      ? Dims{c.dim(*dim)}
                      : c.dims(*dim);
        for (const DimExpr& e : ds) {
          auto d = static_cast<size_t>(wrap_dim(c, c.guards.specialize(e.expr()), s.dim()));
          if (d < s.sizes.size()) drop[d] = c.decide(s.sizes[d], Rel::EQ, 1);
        }
      }
      Dims sizes, strides;
      for (size_t d = 0; d < s.sizes.size(); ++d) {
        if (drop[d]) continue;
        sizes.push_back(s.sizes[d]);
        strides.push_back(s.strides[d]);
      }
      return {c.view(0, sizes, strides, s.storage_offset)};
    }
    case OpKind::expand: {
      const TensorType& s = c.tensor(0);
      Dims target = c.dims(c.at(1));
      size_t lead = target.size() - s.sizes.size();
      Dims sizes, strides;
      for (size_t i = 0; i < target.size(); ++i) {
        if (i < lead) {
          sizes.push_back(target[i]);
          strides.push_back(0);
          continue;
        }
        const DimExpr& have = s.sizes[i - lead];
        DimExpr want = target[i] == DimExpr(-1) ? have : target[i];
        if (have == want || c.decide(have, Rel::EQ, want)) {
          sizes.push_back(want.is_constant() ? want : have);
          strides.push_back(s.strides[i - lead]);
        } else {
          EMBER_INTERNAL_ASSERT(c.decide(have, Rel::EQ, 1))
              << c.name() << ": expands " << have.str();
          sizes.push_back(want);
          strides.push_back(0);
        }
      }
      return {c.view(0, sizes, strides, s.storage_offset)};
    }
    case OpKind::slice: {
      const TensorType& s = c.tensor(0);
      auto d = static_cast<size_t>(wrap_dim(c, c.integer(c.at(1)), s.dim()));
      const DimExpr& size = s.sizes[d];
      const Arg& start_a = c.at(2);
      const Arg& end_a = c.at(3);
      int64_t step = c.args.size() > 4 ? c.integer(c.at(4)) : 1;
      EMBER_UNSUPPORTED(step > 0) << c.name() << ": step " << step;
      DimExpr start = std::holds_alternative<NoneArg>(start_a) ? DimExpr(0) : c.dim(start_a);
      DimExpr end = std::holds_alternative<NoneArg>(end_a) ? DimExpr(kMaxIndex) : c.dim(end_a);
      start = clamp_index(c, start, size);
      if (end == DimExpr(kMaxIndex)) {
        end = size;
      } else {
        end = clamp_index(c, end, size);
        if (c.decide(end, Rel::LT, start)) end = start;
      }
      DimExpr len = c.simplify(floordiv(end - start + (step - 1), step));
      Dims sizes = s.sizes, strides = s.strides;
      sizes[d] = len;
      strides[d] = s.strides[d] * step;
      return {c.view(0, sizes, strides, c.simplify(s.storage_offset + start * s.strides[d]))};
    }
    case OpKind::select: {
      const TensorType& s = c.tensor(0);
      auto d = static_cast<size_t>(wrap_dim(c, c.integer(c.at(1)), s.dim()));
      DimExpr index = c.dim(c.at(2));
      if ((index.is_constant() && index.constant() < 0) ||
          (!index.is_constant() && c.decide(index, Rel::LT, 0))) {
        index = c.simplify(index + s.sizes[d]);
      }
      // Out-of-range indices raise in eager; the guard keeps a compiled read in bounds.
      EMBER_INTERNAL_ASSERT(c.decide(index, Rel::LT, s.sizes[d]) && c.decide(index, Rel::GE, 0))
          << c.name() << ": index " << index.str() << " out of " << s.sizes[d].str();
      Dims sizes = s.sizes, strides = s.strides;
      sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(d));
      strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(d));
      return {c.view(0, sizes, strides, c.simplify(s.storage_offset + index * s.strides[d]))};
    }
    case OpKind::diagonal: {
      // diagonal(self, offset, dim1, dim2): dims dim1 and dim2 replaced by a last one, the
      // diagonal's, of stride stride1 + stride2.
      const TensorType& s = c.tensor(0);
      EMBER_UNSUPPORTED(s.dim() >= 2) << c.name() << " of rank " << s.dim();
      const int64_t off = c.args.size() > 1 ? c.integer(c.at(1)) : 0;
      auto a =
          static_cast<size_t>(wrap_dim(c, c.args.size() > 2 ? c.integer(c.at(2)) : 0, s.dim()));
      auto b =
          static_cast<size_t>(wrap_dim(c, c.args.size() > 3 ? c.integer(c.at(3)) : 1, s.dim()));
      EMBER_UNSUPPORTED(a != b) << c.name() << ": dim1 and dim2 are both " << a;
      // Its length: min(size1, size2 - off) for off >= 0, min(size1 + off, size2) below, at
      // least 0, decided through guards.
      DimExpr x = off >= 0 ? s.sizes[a] : c.simplify(s.sizes[a] + off);
      DimExpr y = off >= 0 ? c.simplify(s.sizes[b] - off) : s.sizes[b];
      DimExpr len = x == y || c.decide(x, Rel::LE, y) ? x : y;
      if (!c.decide(len, Rel::GE, 0)) len = 0;
      Dims sizes, strides;
      for (size_t d = 0; d < s.sizes.size(); ++d) {
        if (d == a || d == b) continue;
        sizes.push_back(s.sizes[d]);
        strides.push_back(s.strides[d]);
      }
      sizes.push_back(len);
      strides.push_back(c.simplify(s.strides[a] + s.strides[b]));
      DimExpr offset = off >= 0 ? s.strides[b] * off : s.strides[a] * -off;
      return {c.view(0, sizes, strides, c.simplify(s.storage_offset + offset))};
    }
    case OpKind::split:
    case OpKind::split_with_sizes: {
      const TensorType& s = c.tensor(0);
      int64_t dim_i = c.args.size() > 2 ? c.integer(c.at(2)) : 0;
      auto d = static_cast<size_t>(wrap_dim(c, dim_i, s.dim()));
      const DimExpr& size = s.sizes[d];
      Dims pieces;
      if (kind == OpKind::split_with_sizes) {
        pieces = c.dims(c.at(1));
      } else {
        DimExpr split = c.dim(c.at(1));
        auto n = static_cast<int64_t>(c.concrete.size());
        EMBER_UNSUPPORTED(
            c.decide(floordiv(size + split - 1, split), Rel::EQ, std::max<int64_t>(n, 1)))
            << c.name() << ": the number of pieces";
        for (int64_t i = 0; i + 1 < n; ++i) pieces.push_back(split);
        if (n > 0) pieces.push_back(c.simplify(size - split * (n - 1)));
      }
      std::vector<TensorType> out;
      DimExpr offset = s.storage_offset;
      for (size_t i = 0; i < pieces.size() && i < c.concrete.size(); ++i) {
        Dims sizes = s.sizes;
        sizes[d] = pieces[i];
        out.push_back(c.view(i, sizes, s.strides, c.simplify(offset)));
        offset = offset + pieces[i] * s.strides[d];
      }
      return out;
    }
    case OpKind::as_strided: {
      const TensorType& s = c.tensor(0);
      DimExpr offset = s.storage_offset;
      if (c.args.size() > 3 && !std::holds_alternative<NoneArg>(c.at(3))) offset = c.dim(c.at(3));
      return {c.view(0, c.dims(c.at(1)), c.dims(c.at(2)), offset)};
    }

    // ---- indexing and layout
    case OpKind::index_select: {
      const TensorType& s = c.tensor(0);
      auto d = static_cast<size_t>(wrap_dim(c, c.integer(c.at(1)), s.dim()));
      Dims sizes = s.sizes;
      const TensorType& index = c.tensor(2);
      if (!sizes.empty()) sizes[d] = index.sizes.empty() ? DimExpr(1) : index.sizes[0];
      return {c.fresh(0, sizes)};
    }
    case OpKind::gather:
      return {c.fresh(0, c.tensor(2).sizes)};
    case OpKind::embedding: {
      const TensorType& w = c.tensor(0);
      Dims sizes = c.tensor(1).sizes;
      sizes.push_back(w.sizes.back());
      return {c.fresh(0, sizes)};
    }
    case OpKind::cat:
    case OpKind::stack: {
      const auto* list = std::get_if<ValueList>(&c.at(0));
      EMBER_INTERNAL_ASSERT(list != nullptr) << c.name() << ": expected a tensor list";
      std::vector<const TensorType*> parts;
      for (const std::optional<ValueId>& v : list->items) {
        const TensorType& t = c.g.type(*v);
        // cat skips legacy empty 1-D tensors.
        if (kind == OpKind::cat && t.dim() == 1 && t.sizes[0] == DimExpr(0)) continue;
        parts.push_back(&t);
      }
      EMBER_UNSUPPORTED(!parts.empty()) << c.name() << " of empty tensors";
      int64_t rank = parts[0]->dim() + (kind == OpKind::stack ? 1 : 0);
      auto d = static_cast<size_t>(wrap_dim(c, c.args.size() > 1 ? c.integer(c.at(1)) : 0, rank));
      Dims sizes = parts[0]->sizes;
      if (kind == OpKind::stack) {
        sizes.insert(sizes.begin() + static_cast<std::ptrdiff_t>(d),
                     DimExpr(static_cast<int64_t>(parts.size())));
      } else {
        DimExpr total = 0;
        for (const TensorType* p : parts) total = total + p->sizes[d];
        sizes[d] = total;
      }
      for (const TensorType* p : parts) {
        for (size_t k = 0; k < p->sizes.size() && k < parts[0]->sizes.size(); ++k) {
          if (kind == OpKind::cat && k == d) continue;  // the dim cat joins along
          c.require_equal(p->sizes[k], parts[0]->sizes[k], "part sizes");
        }
      }
      return {c.fresh(0, sizes)};
    }
    case OpKind::constant_pad_nd: {
      const TensorType& s = c.tensor(0);
      Dims pad = c.dims(c.at(1));
      Dims sizes = s.sizes;
      for (size_t i = 0; 2 * i + 1 < pad.size() && i < sizes.size(); ++i) {
        size_t d = sizes.size() - 1 - i;
        sizes[d] = c.simplify(sizes[d] + pad[2 * i] + pad[2 * i + 1]);
      }
      return {c.fresh(0, sizes)};
    }
    case OpKind::repeat: {
      const TensorType& s = c.tensor(0);
      Dims reps = c.dims(c.at(1));
      Dims sizes = reps;
      size_t lead = reps.size() - s.sizes.size();
      for (size_t i = 0; i < s.sizes.size(); ++i) sizes[lead + i] = s.sizes[i] * reps[lead + i];
      return {c.fresh(0, sizes)};
    }

    // ---- factories
    case OpKind::empty:
    case OpKind::zeros:
    case OpKind::ones:
    case OpKind::full:
      return {c.fresh(0, c.dims(c.at(0)))};
    case OpKind::new_empty:
    case OpKind::new_zeros:
    case OpKind::new_ones:
    case OpKind::new_full:
      return {c.fresh(0, c.dims(c.at(1)))};
    case OpKind::empty_strided:
      return {c.view(0, c.dims(c.at(0)), c.dims(c.at(1)), 0)};
    case OpKind::scalar_tensor:
      return {c.fresh(0, {})};
    case OpKind::arange: {
      // arange(end), arange.start(start, end), arange.start_step(start, end, step): integer
      // bounds and steps, or floats of integral value (`torch.arange(T, -1, -1.0)`); another
      // float next to a symbolic bound is Unsupported.
      auto bound = [&](size_t i) -> DimExpr {
        if (const double* f = std::get_if<double>(&c.at(i))) {
          EMBER_UNSUPPORTED(std::isfinite(*f) && *f == std::floor(*f) && std::fabs(*f) < 1e15)
              << c.name() << " with the float bound or step " << *f << " and a symbolic one";
          return DimExpr(static_cast<int64_t>(*f));
        }
        EMBER_UNSUPPORTED(dim_arg(c.at(i)).has_value())
            << c.name() << " with a bound or step that is no number";
        return c.dim(c.at(i));
      };
      DimExpr start = 0, end = 0, step = 1;
      if (ov.empty()) {
        end = bound(0);
      } else {
        start = bound(0);
        end = bound(1);
        if (ov == "start_step") step = bound(2);
      }
      int64_t st = c.guards.specialize(step.expr());
      EMBER_UNSUPPORTED(st != 0) << c.name() << ": step 0";
      // ceil((end - start) / step), for either sign of the step.
      DimExpr n = c.simplify(st > 0 ? floordiv(end - start + (st - 1), st)
                                    : floordiv(end - start + (st + 1), st));
      if (!c.decide(n, Rel::GE, 0)) n = 0;
      return {c.fresh(0, {n})};
    }

    // ---- matrix products and attention
    case OpKind::mm:
      c.require_equal(c.tensor(0).sizes[1], c.tensor(1).sizes[0], "inner sizes");
      return {c.fresh(0, {c.tensor(0).sizes[0], c.tensor(1).sizes[1]})};
    case OpKind::addmm: {
      c.require_equal(c.tensor(1).sizes[1], c.tensor(2).sizes[0], "inner sizes");
      Dims out{c.tensor(1).sizes[0], c.tensor(2).sizes[1]};
      broadcast(c, {&c.tensor(0).sizes, &out});  // the bias against the product
      return {c.fresh(0, out)};
    }
    case OpKind::bmm: {
      const TensorType& a = c.tensor(0);
      const TensorType& b = c.tensor(1);
      c.require_equal(a.sizes[0], b.sizes[0], "batch sizes");
      c.require_equal(a.sizes[2], b.sizes[1], "inner sizes");
      return {c.fresh(0, {a.sizes[0], a.sizes[1], b.sizes[2]})};
    }
    case OpKind::scaled_dot_product_attention:
    case OpKind::_scaled_dot_product_flash_attention_for_cpu: {
      const TensorType& q = c.tensor(0);
      c.require_equal(q.sizes.back(), c.tensor(1).sizes.back(), "query and key widths");
      c.require_equal(c.tensor(1).sizes[c.tensor(1).sizes.size() - 2],
                      c.tensor(2).sizes[c.tensor(2).sizes.size() - 2], "key and value lengths");
      Dims out = q.sizes;
      out.back() = c.tensor(2).sizes.back();
      std::vector<TensorType> r{c.fresh(0, out)};
      if (c.concrete.size() > 1) {
        Dims lse(q.sizes.begin(), q.sizes.end() - 1);
        r.push_back(c.fresh(1, lse));
      }
      return r;
    }
    case OpKind::_scaled_dot_product_efficient_attention: {
      // (query, key, value, attn_bias, compute_log_sumexp, ...): the output, and the log-sum-exp
      // [B, H, L padded to a multiple of 32] (of length 0 when not asked for); the seeds keep
      // their types. (The flash and cuDNN kernels also return the lengths as ints: not yet.)
      const TensorType& q = c.tensor(0);
      const TensorType& k = c.tensor(1);
      const TensorType& v = c.tensor(2);
      EMBER_UNSUPPORTED(q.dim() == 4) << c.name() << " of rank " << q.dim();
      c.require_equal(q.sizes.back(), k.sizes.back(), "query and key widths");
      c.require_equal(k.sizes[2], v.sizes[2], "key and value lengths");
      Dims out = q.sizes;
      out.back() = v.sizes.back();
      const bool* lse_wanted = c.args.size() > 4 ? std::get_if<bool>(&c.at(4)) : nullptr;
      EMBER_UNSUPPORTED(lse_wanted != nullptr) << c.name() << ": compute_log_sumexp";
      const DimExpr length =
          *lse_wanted ? c.simplify(floordiv(q.sizes[2] + 31, 32) * 32) : DimExpr(0);
      return c.by_slot({out, Dims{q.sizes[0], q.sizes[1], length}});
    }
    case OpKind::convolution: {
      // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
      // groups): each spatial size from torch's formula.
      const TensorType& x = c.tensor(0);
      const TensorType& w = c.tensor(1);
      Dims stride = c.dims(c.at(3)), padding = c.dims(c.at(4)), dilation = c.dims(c.at(5));
      const bool* transposed = std::get_if<bool>(&c.at(6));
      EMBER_INTERNAL_ASSERT(transposed != nullptr) << c.name() << ": transposed";
      Dims out_pad = c.dims(c.at(7));
      int64_t groups = c.integer(c.at(8));
      if (*transposed) {
        c.require_equal(x.sizes[1], w.sizes[0], "input channels");
      } else {
        c.require_equal(x.sizes[1], w.sizes[1] * groups, "input channels");
      }
      size_t spatial = x.sizes.size() - 2;
      Dims sizes{x.sizes[0], *transposed ? w.sizes[1] * groups : w.sizes[0]};
      for (size_t i = 0; i < spatial; ++i) {
        const DimExpr& in = x.sizes[2 + i];
        DimExpr k = per_dim(dilation, i) * (w.sizes[2 + i] - 1);
        DimExpr n = *transposed
                        ? (in - 1) * per_dim(stride, i) - per_dim(padding, i) * 2 + k +
                              per_dim(out_pad, i) + 1
                        : floordiv(in + per_dim(padding, i) * 2 - k - 1, per_dim(stride, i)) + 1;
        sizes.push_back(c.simplify(n));
      }
      return {c.fresh(0, sizes)};
    }
    case OpKind::index: {
      // index.Tensor(self, indices): the index tensors broadcast together; their shape replaces
      // the indexed dims where those are adjacent, else leads.
      const TensorType& s = c.tensor(0);
      const auto* list = std::get_if<ValueList>(&c.at(1));
      EMBER_INTERNAL_ASSERT(list != nullptr) << c.name() << ": expected a tensor list";
      std::vector<const Dims*> shapes;
      std::vector<size_t> indexed;
      for (size_t i = 0; i < list->items.size(); ++i) {
        if (!list->items[i]) continue;
        const TensorType& t = c.g.type(*list->items[i]);
        EMBER_UNSUPPORTED(t.dtype != DType::Bool && t.dtype != DType::UInt8)
            << c.name() << " with a mask index (its result size depends on the data)";
        shapes.push_back(&t.sizes);
        indexed.push_back(i);
      }
      EMBER_UNSUPPORTED(!indexed.empty()) << c.name() << " without an index tensor";
      Dims index_shape = broadcast(c, shapes);
      const bool adjacent = indexed.back() - indexed.front() + 1 == indexed.size();
      Dims sizes;
      if (adjacent) {
        sizes.assign(s.sizes.begin(), s.sizes.begin() + static_cast<std::ptrdiff_t>(indexed[0]));
      }
      sizes.insert(sizes.end(), index_shape.begin(), index_shape.end());
      for (size_t d = 0; d < s.sizes.size(); ++d) {
        const bool is_indexed = std::find(indexed.begin(), indexed.end(), d) != indexed.end();
        if (is_indexed || (adjacent && d < indexed[0])) continue;
        sizes.push_back(s.sizes[d]);
      }
      return {c.fresh(0, sizes)};
    }
    case OpKind::unbind: {
      const TensorType& s = c.tensor(0);
      auto d =
          static_cast<size_t>(wrap_dim(c, c.args.size() > 1 ? c.integer(c.at(1)) : 0, s.dim()));
      EMBER_UNSUPPORTED(c.decide(s.sizes[d], Rel::EQ, static_cast<int64_t>(c.concrete.size())))
          << c.name() << ": the number of pieces";
      Dims sizes = s.sizes, strides = s.strides;
      sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(d));
      strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(d));
      std::vector<TensorType> out;
      for (size_t i = 0; i < c.concrete.size(); ++i) {
        out.push_back(
            c.view(i, sizes, strides,
                   c.simplify(s.storage_offset + static_cast<int64_t>(i) * s.strides[d])));
      }
      return out;
    }
    case OpKind::max_pool2d_with_indices:
    case OpKind::avg_pool2d: {
      // max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode),
      // avg_pool2d(self, kernel_size, stride, padding, ceil_mode, ...): torch's pooling size.
      const TensorType& x = c.tensor(0);
      const bool max = kind == OpKind::max_pool2d_with_indices;
      Dims kernel = c.dims(c.at(1));
      Dims stride = c.args.size() > 2 ? c.dims(c.at(2)) : Dims{};
      Dims padding = c.args.size() > 3 ? c.dims(c.at(3)) : Dims{0};
      Dims dilation = max && c.args.size() > 4 ? c.dims(c.at(4)) : Dims{1};
      const size_t ceil_at = max ? 5 : 4;
      const bool* ceil = c.args.size() > ceil_at ? std::get_if<bool>(&c.at(ceil_at)) : nullptr;
      const bool ceil_mode = ceil != nullptr && *ceil;
      if (stride.empty()) stride = kernel;
      Dims sizes(x.sizes.begin(), x.sizes.end() - 2);
      for (size_t i = 0; i < 2; ++i) {
        const DimExpr& in = x.sizes[x.sizes.size() - 2 + i];
        DimExpr k = per_dim(dilation, i) * (per_dim(kernel, i) - 1) + 1;
        DimExpr span = in + per_dim(padding, i) * 2 - k + (ceil_mode ? per_dim(stride, i) - 1 : 0);
        DimExpr n = c.simplify(floordiv(span, per_dim(stride, i)) + 1);
        // With ceil_mode, the last window must start inside the input or its left padding.
        if (ceil_mode &&
            c.decide((n - 1) * per_dim(stride, i), Rel::GE, in + per_dim(padding, i))) {
          n = c.simplify(n - 1);
        }
        sizes.push_back(n);
      }
      return c.same_as_shape(sizes);
    }
    case OpKind::nll_loss_forward: {
      // (output, total_weight); reduction 0 (none) keeps the batch dim.
      const TensorType& x = c.tensor(0);
      const int64_t* mode = std::get_if<int64_t>(&c.at(3));
      EMBER_INTERNAL_ASSERT(mode != nullptr) << c.name() << ": reduction";
      Dims out = *mode == 0 && x.dim() == 2 ? Dims{x.sizes[0]} : Dims{};
      std::vector<TensorType> r{c.fresh(0, out)};
      if (c.concrete.size() > 1) r.push_back(c.fresh(1, {}));
      return r;
    }
    case OpKind::empty_permuted:
      return {c.fresh(0, c.dims(c.at(0)))};
    case OpKind::native_batch_norm:
    case OpKind::_native_batch_norm_legit:
    case OpKind::_native_batch_norm_legit_functional:
    case OpKind::_native_batch_norm_legit_no_training: {
      // (out, save_mean, save_invstd[, running_mean, running_var]): the statistics have one
      // value per channel, or none outside training.
      const TensorType& x = c.tensor(0);
      std::vector<TensorType> out{c.fresh(0, x.sizes)};
      for (size_t i = 1; i < c.concrete.size(); ++i) {
        const Dims& seen = c.concrete[i].sizes;
        const bool empty = seen.size() == 1 && seen[0] == DimExpr(0);
        out.push_back(c.fresh(i, empty ? Dims{0} : Dims{x.sizes.size() > 1 ? x.sizes[1] : 1}));
      }
      return out;
    }
    default:
      break;
  }
  // Ops outside ember's table, by name (shape_rules_by_name.cpp).
  if (std::optional<std::vector<TensorType>> out = rule_by_name(c)) return *out;
  EMBER_UNSUPPORTED(false) << c.name() << " has no symbolic shape rule";
  return {};
}

std::string hint_str(const Dims& d, const sym::ShapeEnv& env) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(sym::hint(d[i].expr(), env));
  }
  return s + "]";
}

bool agrees(const Dims& symbolic, const Dims& concrete, const sym::ShapeEnv& env) {
  if (symbolic.size() != concrete.size()) return false;
  for (size_t i = 0; i < symbolic.size(); ++i) {
    if (sym::hint(symbolic[i].expr(), env) != concrete[i].constant()) return false;
  }
  return true;
}

}  // namespace

Dims dense_strides_like(const Dims& sizes, const Dims& like) {
  const size_t n = sizes.size();
  std::vector<int64_t> like_values;
  bool usable = like.size() == n && all_constant(like);
  if (usable) like_values = constant_values(like);
  std::vector<size_t> order(n);  // outermost first
  std::iota(order.begin(), order.end(), size_t{0});
  if (usable) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return like_values[a] > like_values[b]; });
  }
  Dims strides(n);
  DimExpr acc = 1;
  for (size_t k = n; k-- > 0;) {
    size_t d = order[k];
    strides[d] = acc;
    const DimExpr& s = sizes[d];
    if (!s.is_constant() || s.constant() > 1) acc = acc * s;
  }
  return strides;
}

std::vector<TensorType> symbolic_result_types(const Graph& g, const OpInfo& op,
                                              const std::vector<Arg>& args,
                                              const std::vector<TensorType>& concrete,
                                              sym::GuardRecorder& guards, bool pointwise,
                                              const std::vector<int32_t>& slots) {
  Call c{g, op, args, concrete, guards, pointwise, slots};
  std::vector<TensorType> out = rule(c);
  EMBER_INTERNAL_ASSERT(out.size() == concrete.size())
      << c.name() << ": the rule gives " << out.size() << " results, the meta kernel "
      << concrete.size();
  for (size_t i = 0; i < out.size(); ++i) {
    const TensorType& t = out[i];
    const TensorType& m = concrete[i];
    bool same = agrees(t.sizes, m.sizes, g.symbols) && agrees(t.strides, m.strides, g.symbols) &&
                sym::hint(t.storage_offset.expr(), g.symbols) == m.storage_offset.constant();
    EMBER_UNSUPPORTED(same) << c.name() << ": the symbolic shape rule gives sizes "
                            << hint_str(t.sizes, g.symbols) << " strides "
                            << hint_str(t.strides, g.symbols) << " at the hints, the meta kernel "
                            << type_str(m) << " (result " << i << ")";
  }
  return out;
}

}  // namespace ember::graph
