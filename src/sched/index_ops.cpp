#include "sched/index_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "sched/batch_norm.h"
#include "sched/kernel_params.h"
#include "sched/pointwise.h"
#include "sched/pointwise_internal.h"
#include "support/error.h"

namespace ember::sched {

namespace {

using graph::ValueId;
using loop::DType;
using loop::Expr;

// One node and its schema, with typed access to its arguments.
struct Ctx {
  const graph::Graph& g;
  const graph::Node& n;
  const graph::OpInfo& op;

  const graph::Arg* arg(std::string_view name) const {
    for (size_t i = 0; i < op.arg_names.size() && i < n.args.size(); ++i) {
      if (op.arg_names[i] == name) return &n.args[i];
    }
    return nullptr;
  }
  std::optional<int64_t> int_arg(std::string_view name) const {
    const graph::Arg* a = arg(name);
    const auto* v = a ? std::get_if<int64_t>(a) : nullptr;
    return v ? std::optional<int64_t>(*v) : std::nullopt;
  }
  const std::vector<int64_t>* ints_arg(std::string_view name) const {
    const graph::Arg* a = arg(name);
    return a ? std::get_if<std::vector<int64_t>>(a) : nullptr;
  }
  std::optional<ValueId> tensor_arg(std::string_view name) const {
    const graph::Arg* a = arg(name);
    const auto* r = a ? std::get_if<graph::ValueRef>(a) : nullptr;
    return r ? std::optional<ValueId>(r->id) : std::nullopt;
  }
  bool is_none(std::string_view name) const {
    const graph::Arg* a = arg(name);
    return a != nullptr && std::holds_alternative<graph::NoneArg>(*a);
  }
  const graph::TensorType& type(ValueId v) const { return g.type(v); }
  std::vector<int64_t> sizes(ValueId v) const { return sizes_of(g.type(v)); }
  ValueId self() const { return *tensor_arg("self"); }
  ValueId out() const { return n.outputs[0]; }
  /// The result position of output `k` among the op's tensor results.
  int32_t slot(size_t k) const {
    return n.result_slots.empty() ? static_cast<int32_t>(k) : n.result_slots[k];
  }
};

Expr size_expr(int64_t s) {
  return loop::idx(s);
}

// Wraps a possibly negative dim into [0, rank); rank 0 accepts -1 and 0 (as torch's
// maybe_wrap_dim with wrap_scalar).
std::optional<int64_t> wrap_dim(int64_t d, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (d < -r || d >= r) return std::nullopt;
  return d < 0 ? d + r : d;
}

// Every dim of `dims` is valid for a rank-`rank` tensor and named once (after wrapping).
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

// The row-major linear position of `index` in `sizes`.
Expr linearize(const Index& index, const std::vector<int64_t>& sizes) {
  Expr lin = loop::idx(0);
  for (size_t d = 0; d < sizes.size(); ++d) lin = lin * size_expr(sizes[d]) + index[d];
  return lin;
}
// The index of row-major linear position `lin` in `sizes` (every size >= 1).
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

Index zeros(size_t rank) {
  return Index(rank, loop::idx(0));
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}

// The input index of output `index` of a reshape from `in` to `out` sizes (equal numel). Size-1
// dims are left out; the other dims are split into groups of equal size products, and each group
// is linearized over the output dims and delinearized over the input dims.
Index reshape_index(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                    const Index& index) {
  Index result = zeros(in.size());
  if (numel(in) == 0) return result;
  std::vector<size_t> ind, outd;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] != 1) ind.push_back(d);
  }
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] != 1) outd.push_back(d);
  }
  size_t i = 0, j = 0;
  while (i < ind.size()) {
    EMBER_INTERNAL_ASSERT(j < outd.size()) << "reshape of unequal sizes";
    std::vector<size_t> gi{ind[i]}, go{outd[j]};
    int64_t pi = in[ind[i++]], po = out[outd[j++]];
    while (pi != po) {
      if (pi < po) {
        EMBER_INTERNAL_ASSERT(i < ind.size()) << "reshape of unequal sizes";
        pi *= in[ind[i]];
        gi.push_back(ind[i++]);
      } else {
        EMBER_INTERNAL_ASSERT(j < outd.size()) << "reshape of unequal sizes";
        po *= out[outd[j]];
        go.push_back(outd[j++]);
      }
    }
    Index go_index;
    std::vector<int64_t> go_sizes, gi_sizes;
    for (size_t d : go) {
      go_index.push_back(index[d]);
      go_sizes.push_back(out[d]);
    }
    for (size_t d : gi) gi_sizes.push_back(in[d]);
    Index split =
        delinearize(go.size() == 1 ? go_index[0] : linearize(go_index, go_sizes), gi_sizes);
    for (size_t k = 0; k < gi.size(); ++k) result[gi[k]] = split[k];
  }
  EMBER_INTERNAL_ASSERT(j == outd.size()) << "reshape of unequal sizes";
  return result;
}

// `v` with `value` inserted at position `dim`.
template <typename T, typename V>
std::vector<T> insert(std::vector<T> v, size_t dim, V value) {
  v.insert(v.begin() + static_cast<std::ptrdiff_t>(dim), T(std::move(value)));
  return v;
}
// `v` without position `dim`.
template <typename T>
std::vector<T> erase(std::vector<T> v, size_t dim) {
  v.erase(v.begin() + static_cast<std::ptrdiff_t>(dim));
  return v;
}

// The element of `v` converted to `t` as eager's copy_ does it.
Expr convert(DType t, Expr e) {
  return detail::cast(t, std::move(e));
}

// `value` (a bool, int or double argument) converted to `t` as `Scalar::to<T>()` does, or nullopt
// where that conversion raises (an integer that does not fit) or is not exact to reproduce.
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

// torch's slice bounds: (start, length) of self.slice(dim, start, end, step) on a dim of `size`.
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

// The dims squeeze removes from `self`, or nullopt.
std::optional<std::vector<bool>> squeezed_dims(const Ctx& c) {
  std::vector<int64_t> in = c.sizes(c.self());
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<bool> removed(in.size(), false);
  std::vector<int64_t> candidates;
  if (const graph::Arg* d = c.arg("dim")) {
    if (const auto* v = std::get_if<int64_t>(d)) {
      candidates.push_back(*v);
    } else if (const auto* l = std::get_if<std::vector<int64_t>>(d)) {
      candidates = *l;
    } else {
      return std::nullopt;
    }
  } else {
    for (int64_t k = 0; k < rank; ++k) candidates.push_back(k);
  }
  for (int64_t d : candidates) {
    std::optional<int64_t> w = wrap_dim(d, rank);
    if (!w) return std::nullopt;
    if (rank > 0 && in[*w] == 1) removed[*w] = true;
  }
  return removed;
}

// The start of output `slot` of split / split_with_sizes along the split dim.
std::optional<int64_t> split_start(const Ctx& c, int32_t slot) {
  if (c.op.name == "aten::split") {
    std::optional<int64_t> size = c.int_arg("split_size");
    if (!size || *size < 0) return std::nullopt;
    return *size * slot;
  }
  const std::vector<int64_t>* sizes = c.ints_arg("split_sizes");
  if (!sizes || slot < 0 || slot >= static_cast<int32_t>(sizes->size())) return std::nullopt;
  int64_t start = 0;
  for (int32_t k = 0; k < slot; ++k) start += (*sizes)[k];
  return start;
}

// The tensor list argument `name`, with no missing entries.
std::optional<std::vector<ValueId>> tensor_list(const Ctx& c, std::string_view name) {
  const graph::Arg* a = c.arg(name);
  const auto* l = a ? std::get_if<graph::ValueList>(a) : nullptr;
  if (l == nullptr) return std::nullopt;
  std::vector<ValueId> out;
  for (const auto& item : l->items) {
    if (!item) return std::nullopt;
    out.push_back(*item);
  }
  return out;
}

bool index_dtype(const graph::TensorType& t) {
  return t.dtype == graph::DType::Int64 || t.dtype == graph::DType::Int32;
}

// Right-aligned broadcast of `index` (of shape `out`) to a tensor of sizes `in`.
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

// aten::index.Tensor: the indexed dims, the broadcast shape of the index tensors, and where the
// broadcast dims sit in the output.
struct AdvancedIndex {
  std::vector<std::optional<ValueId>> indices;  // per self dim (trailing dims: none)
  std::vector<int64_t> bshape;
  size_t first = 0;  // first indexed dim (the broadcast dims replace the indexed dims there)
  size_t last = 0;   // one past the last indexed dim
};

std::optional<AdvancedIndex> advanced_index(const Ctx& c) {
  const graph::Arg* a = c.arg("indices");
  const auto* l = a ? std::get_if<graph::ValueList>(a) : nullptr;
  std::vector<int64_t> in = c.sizes(c.self());
  if (l == nullptr || l->items.empty() || l->items.size() > in.size()) return std::nullopt;
  AdvancedIndex ai;
  ai.indices.assign(in.size(), std::nullopt);
  bool seen = false, gap = false;
  for (size_t d = 0; d < l->items.size(); ++d) {
    if (!l->items[d]) {
      gap |= seen;
      continue;
    }
    if (gap) return std::nullopt;  // not adjacent: the broadcast dims would go first
    const graph::TensorType& t = c.type(*l->items[d]);
    if (!index_dtype(t) || t.device.kind != graph::DeviceKind::CPU) return std::nullopt;
    if (!seen) ai.first = d;
    seen = true;
    ai.last = d + 1;
    ai.indices[d] = *l->items[d];
    // Broadcast shapes, right-aligned.
    std::vector<int64_t> s = sizes_of(t);
    std::vector<int64_t> b = ai.bshape;
    size_t r = std::max(b.size(), s.size());
    std::vector<int64_t> res(r, 1);
    for (size_t k = 0; k < r; ++k) {
      int64_t x = k < r - b.size() ? 1 : b[k - (r - b.size())];
      int64_t y = k < r - s.size() ? 1 : s[k - (r - s.size())];
      if (x != y && x != 1 && y != 1) return std::nullopt;
      res[k] = x == 1 ? y : x;
    }
    ai.bshape = res;
  }
  if (!seen) return std::nullopt;
  return ai;
}

// ---- the table -----------------------------------------------------------------------------

using Check = std::function<bool(const Ctx&)>;
// The element of output `k` (its position in n.outputs) at `index`.
using Lower = std::function<Expr(const Ctx&, size_t k, const Index&, ElementReader&)>;

struct Rule {
  IndexOpKind kind;
  Check check;
  Lower lower;  // empty: only through the traced geometry (as_strided)
};

// Views and computing ops that read `self` at a remapped index of the same dtype.
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

const std::map<std::string, Rule>& rules() {
  static const std::map<std::string, Rule> table = [] {
    std::map<std::string, Rule> t;
    using K = IndexOpKind;

    // ---- views ----
    Rule reshape{K::View,
                 [](const Ctx& c) {
                   return same_dtype_view(c) && c.n.outputs.size() == 1 &&
                          numel(c.sizes(c.self())) == numel(c.sizes(c.out()));
                 },
                 [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                   return read_self(c, r, reshape_index(c.sizes(c.self()), c.sizes(c.out()), idx));
                 }};
    t["aten::view"] = reshape;
    t["aten::_unsafe_view"] = reshape;
    Rule identity{K::View,
                  [](const Ctx& c) {
                    return same_dtype_view(c) && c.n.outputs.size() == 1 &&
                           c.sizes(c.self()) == c.sizes(c.out());
                  },
                  [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                    return read_self(c, r, idx);
                  }};
    t["aten::alias"] = identity;
    t["aten::detach"] = identity;

    t["aten::permute"] = {K::View,
                          [](const Ctx& c) {
                            const std::vector<int64_t>* dims = c.ints_arg("dims");
                            const int64_t rank = c.type(c.self()).dim();
                            return same_dtype_view(c) && dims &&
                                   static_cast<int64_t>(dims->size()) == rank &&
                                   distinct_dims(*dims, rank);
                          },
                          [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                            const std::vector<int64_t>& dims = *c.ints_arg("dims");
                            const int64_t rank = c.type(c.self()).dim();
                            Index in(idx.size());
                            for (size_t k = 0; k < dims.size(); ++k)
                              in[*wrap_dim(dims[k], rank)] = idx[k];
                            return read_self(c, r, in);
                          }};
    t["aten::transpose.int"] = {
        K::View,
        [](const Ctx& c) {
          const int64_t rank = c.type(c.self()).dim();
          std::optional<int64_t> a = c.int_arg("dim0"), b = c.int_arg("dim1");
          return same_dtype_view(c) && a && b && wrap_dim(*a, rank) && wrap_dim(*b, rank);
        },
        [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
          const int64_t rank = c.type(c.self()).dim();
          Index in = idx;
          if (rank > 0) {
            std::swap(in[*wrap_dim(*c.int_arg("dim0"), rank)],
                      in[*wrap_dim(*c.int_arg("dim1"), rank)]);
          }
          return read_self(c, r, in);
        }};
    t["aten::t"] = {K::View,
                    [](const Ctx& c) { return same_dtype_view(c) && c.type(c.self()).dim() <= 2; },
                    [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                      Index in = idx;
                      if (in.size() == 2) std::swap(in[0], in[1]);
                      return read_self(c, r, in);
                    }};
    t["aten::expand"] = {K::View,
                         [](const Ctx& c) {
                           return same_dtype_view(c) &&
                                  broadcasts_to(c.sizes(c.self()), c.sizes(c.out()));
                         },
                         [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                           return read_self(c, r, broadcast_index(idx, c.sizes(c.self())));
                         }};
    Rule squeeze{K::View,
                 [](const Ctx& c) {
                   if (!same_dtype_view(c)) return false;
                   std::optional<std::vector<bool>> removed = squeezed_dims(c);
                   if (!removed) return false;
                   std::vector<int64_t> in = c.sizes(c.self()), kept;
                   for (size_t d = 0; d < in.size(); ++d) {
                     if (!(*removed)[d]) kept.push_back(in[d]);
                   }
                   return kept == c.sizes(c.out());
                 },
                 [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                   std::vector<bool> removed = *squeezed_dims(c);
                   Index in;
                   size_t j = 0;
                   for (bool rm : removed) in.push_back(rm ? loop::idx(0) : idx[j++]);
                   return read_self(c, r, in);
                 }};
    t["aten::squeeze"] = squeeze;
    t["aten::squeeze.dim"] = squeeze;
    t["aten::squeeze.dims"] = squeeze;
    t["aten::unsqueeze"] = {
        K::View,
        [](const Ctx& c) {
          std::optional<int64_t> d = c.int_arg("dim");
          const int64_t rank = c.type(c.self()).dim();
          if (!same_dtype_view(c) || !d) return false;
          std::optional<int64_t> w = wrap_dim(*d, rank + 1);
          return w && insert(c.type(c.self()).sizes, *w, 1) == c.type(c.out()).sizes;
        },
        [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
          const int64_t rank = c.type(c.self()).dim();
          return read_self(c, r, erase(idx, *wrap_dim(*c.int_arg("dim"), rank + 1)));
        }};
    t["aten::slice.Tensor"] = {
        K::View,
        [](const Ctx& c) {
          std::vector<int64_t> in = c.sizes(c.self()), out = c.sizes(c.out());
          std::optional<int64_t> d = c.int_arg("dim");
          if (!same_dtype_view(c) || !d || in.empty()) return false;
          std::optional<int64_t> w = wrap_dim(*d, static_cast<int64_t>(in.size()));
          if (!w) return false;
          std::optional<std::pair<int64_t, int64_t>> range = slice_range(c, in[*w]);
          if (!range) return false;
          in[*w] = range->second;
          return in == out;
        },
        [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
          std::vector<int64_t> in = c.sizes(c.self());
          size_t d = *wrap_dim(*c.int_arg("dim"), static_cast<int64_t>(in.size()));
          int64_t start = slice_range(c, in[d])->first;
          Index i = idx;
          i[d] = loop::idx(start) + idx[d] * *c.int_arg("step");
          return read_self(c, r, i);
        }};
    t["aten::select.int"] = {
        K::View,
        [](const Ctx& c) {
          std::vector<int64_t> in = c.sizes(c.self());
          std::optional<int64_t> d = c.int_arg("dim"), i = c.int_arg("index");
          if (!same_dtype_view(c) || !d || !i || in.empty()) return false;
          std::optional<int64_t> w = wrap_dim(*d, static_cast<int64_t>(in.size()));
          if (!w || *i < -in[*w] || *i >= in[*w]) return false;
          return erase(c.type(c.self()).sizes, *w) == c.type(c.out()).sizes;
        },
        [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
          std::vector<int64_t> in = c.sizes(c.self());
          size_t d = *wrap_dim(*c.int_arg("dim"), static_cast<int64_t>(in.size()));
          int64_t i = *c.int_arg("index");
          return read_self(c, r, insert(idx, d, loop::idx(i < 0 ? i + in[d] : i)));
        }};
    t["aten::narrow"] = {K::View,
                         [](const Ctx& c) {
                           std::vector<int64_t> in = c.sizes(c.self());
                           std::optional<int64_t> d = c.int_arg("dim"), s = c.int_arg("start"),
                                                  len = c.int_arg("length");
                           if (!same_dtype_view(c) || !d || !s || !len || in.empty()) return false;
                           std::optional<int64_t> w = wrap_dim(*d, static_cast<int64_t>(in.size()));
                           if (!w) return false;
                           int64_t start = *s < 0 ? *s + in[*w] : *s;
                           if (start < 0 || *len < 0 || start + *len > in[*w]) return false;
                           in[*w] = *len;
                           return in == c.sizes(c.out());
                         },
                         [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                           std::vector<int64_t> in = c.sizes(c.self());
                           size_t d = *wrap_dim(*c.int_arg("dim"), static_cast<int64_t>(in.size()));
                           int64_t s = *c.int_arg("start");
                           Index i = idx;
                           i[d] = loop::idx(s < 0 ? s + in[d] : s) + idx[d];
                           return read_self(c, r, i);
                         }};
    t["aten::diagonal"] = {
        K::View,
        [](const Ctx& c) {
          std::vector<int64_t> in = c.sizes(c.self());
          const int64_t rank = static_cast<int64_t>(in.size());
          std::optional<int64_t> off = c.int_arg("offset"), d1 = c.int_arg("dim1"),
                                 d2 = c.int_arg("dim2");
          if (!same_dtype_view(c) || rank < 2 || !off || !d1 || !d2) return false;
          std::optional<int64_t> a = wrap_dim(*d1, rank), b = wrap_dim(*d2, rank);
          if (!a || !b || *a == *b) return false;
          std::vector<int64_t> out;
          for (int64_t k = 0; k < rank; ++k) {
            if (k != *a && k != *b) out.push_back(in[k]);
          }
          int64_t len =
              *off >= 0 ? std::min(in[*a], in[*b] - *off) : std::min(in[*a] + *off, in[*b]);
          out.push_back(std::max<int64_t>(len, 0));
          return out == c.sizes(c.out());
        },
        [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
          const int64_t rank = c.type(c.self()).dim();
          int64_t off = *c.int_arg("offset");
          int64_t a = *wrap_dim(*c.int_arg("dim1"), rank), b = *wrap_dim(*c.int_arg("dim2"), rank);
          Index in(static_cast<size_t>(rank));
          size_t j = 0;
          for (int64_t k = 0; k < rank; ++k) {
            if (k != a && k != b) in[k] = idx[j++];
          }
          const Expr& diag = idx.back();
          in[a] = off >= 0 ? diag : diag + loop::idx(-off);
          in[b] = off >= 0 ? diag + loop::idx(off) : diag;
          return read_self(c, r, in);
        }};
    Rule split{K::View,
               [](const Ctx& c) {
                 std::vector<int64_t> in = c.sizes(c.self());
                 std::optional<int64_t> d = c.int_arg("dim");
                 if (!same_dtype_view(c) || !d || in.empty()) return false;
                 std::optional<int64_t> w = wrap_dim(*d, static_cast<int64_t>(in.size()));
                 if (!w) return false;
                 for (size_t k = 0; k < c.n.outputs.size(); ++k) {
                   std::optional<int64_t> start = split_start(c, c.slot(k));
                   std::vector<int64_t> out = c.sizes(c.n.outputs[k]), want = in;
                   if (!start || *start < 0 || out.size() != in.size()) return false;
                   want[*w] = out[*w];
                   if (out != want || *start + out[*w] > in[*w]) return false;
                 }
                 return true;
               },
               [](const Ctx& c, size_t k, const Index& idx, ElementReader& r) {
                 size_t d = *wrap_dim(*c.int_arg("dim"), c.type(c.self()).dim());
                 Index i = idx;
                 i[d] = loop::idx(*split_start(c, c.slot(k))) + idx[d];
                 return read_self(c, r, i);
               }};
    t["aten::split.Tensor"] = split;
    t["aten::split_with_sizes"] = split;
    t["aten::unbind.int"] = {K::View,
                             [](const Ctx& c) {
                               std::vector<int64_t> in = c.sizes(c.self());
                               std::optional<int64_t> d = c.int_arg("dim");
                               if (!same_dtype_view(c) || !d || in.empty()) return false;
                               std::optional<int64_t> w =
                                   wrap_dim(*d, static_cast<int64_t>(in.size()));
                               if (!w) return false;
                               for (size_t k = 0; k < c.n.outputs.size(); ++k) {
                                 if (c.slot(k) >= in[*w] || erase(c.type(c.self()).sizes, *w) !=
                                                                c.type(c.n.outputs[k]).sizes) {
                                   return false;
                                 }
                               }
                               return true;
                             },
                             [](const Ctx& c, size_t k, const Index& idx, ElementReader& r) {
                               size_t d = *wrap_dim(*c.int_arg("dim"), c.type(c.self()).dim());
                               return read_self(c, r, insert(idx, d, loop::idx(c.slot(k))));
                             }};
    t["aten::as_strided"] = {K::View, [](const Ctx& c) { return same_dtype_view(c); }, Lower{}};

    // ---- computing ops ----
    auto cat_check = [](const Ctx& c, bool stack) {
      std::optional<std::vector<ValueId>> ts = tensor_list(c, "tensors");
      std::optional<int64_t> d = c.int_arg("dim");
      const graph::TensorType& ot = c.type(c.out());
      if (!ts || ts->empty() || !d || !loop_dtype(ot) || c.n.outputs.size() != 1) return false;
      std::vector<int64_t> out = sizes_of(ot);
      std::optional<int64_t> w = wrap_dim(*d, static_cast<int64_t>(out.size()));
      if (!w || out.empty()) return false;
      int64_t total = 0;
      for (ValueId v : *ts) {
        const graph::TensorType& t = c.type(v);
        if (!loop_dtype(t) || t.device.kind != graph::DeviceKind::CPU) return false;
        std::vector<int64_t> s = sizes_of(t);
        if (stack) {
          s.insert(s.begin() + *w, 1);
        } else if (numel(s) == 0 && s.size() == 1) {
          continue;  // the legacy empty tensor: skipped by cat
        }
        if (s.size() != out.size()) return false;
        total += s[*w];
        s[*w] = out[*w];
        if (s != out) return false;
      }
      return total == out[*w];
    };
    // One arm per input, chosen by the output index along `dim`.
    auto cat_lower = [](const Ctx& c, const Index& idx, ElementReader& r, bool stack) {
      std::vector<ValueId> ts = *tensor_list(c, "tensors");
      std::vector<int64_t> out = c.sizes(c.out());
      size_t d = *wrap_dim(*c.int_arg("dim"), static_cast<int64_t>(out.size()));
      DType dt = ldt(c.type(c.out()));
      std::vector<std::pair<ValueId, int64_t>> parts;  // input, offset along d
      int64_t off = 0;
      for (ValueId v : ts) {
        int64_t len = 1;
        if (!stack) {
          bool legacy_empty = c.type(v).dim() == 1 && numel(c.sizes(v)) == 0;
          len = legacy_empty ? 0 : c.sizes(v)[d];
        }
        if (len > 0) parts.emplace_back(v, off);
        off += len;
      }
      if (parts.empty()) return zero_of(dt);
      bool guarded = parts.size() > 1;
      auto arm = [&](size_t k) {
        Index i = idx;
        if (stack) {
          i = erase(idx, d);
        } else {
          i[d] = idx[d] - loop::idx(parts[k].second);
        }
        return convert(dt, r.element(parts[k].first, i, guarded));
      };
      Expr e = arm(parts.size() - 1);
      for (size_t k = parts.size() - 1; k-- > 0;) {
        e = loop::Select::make(loop::LT::make(idx[d], loop::idx(parts[k + 1].second)), arm(k), e);
      }
      return e;
    };
    t["aten::cat"] = {K::Compute, [cat_check](const Ctx& c) { return cat_check(c, false); },
                      [cat_lower](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                        return cat_lower(c, idx, r, false);
                      }};
    t["aten::stack"] = {K::Compute, [cat_check](const Ctx& c) { return cat_check(c, true); },
                        [cat_lower](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                          return cat_lower(c, idx, r, true);
                        }};
    t["aten::flip"] = {K::Compute,
                       [](const Ctx& c) {
                         const std::vector<int64_t>* dims = c.ints_arg("dims");
                         const int64_t rank = c.type(c.self()).dim();
                         return same_dtype_view(c) && dims &&
                                c.sizes(c.self()) == c.sizes(c.out()) && distinct_dims(*dims, rank);
                       },
                       [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                         std::vector<int64_t> in = c.sizes(c.self());
                         Index i = idx;
                         for (int64_t d : *c.ints_arg("dims")) {
                           int64_t w = *wrap_dim(d, static_cast<int64_t>(in.size()));
                           if (in.empty()) continue;
                           i[w] = loop::idx(in[w] - 1) - idx[w];
                         }
                         return read_self(c, r, i);
                       }};
    t["aten::roll"] = {K::Compute,
                       [](const Ctx& c) {
                         const std::vector<int64_t>* shifts = c.ints_arg("shifts");
                         const std::vector<int64_t>* dims = c.ints_arg("dims");
                         const int64_t rank = c.type(c.self()).dim();
                         if (!same_dtype_view(c) || !shifts || !dims || shifts->empty())
                           return false;
                         if (c.sizes(c.self()) != c.sizes(c.out())) return false;
                         if (dims->empty()) return shifts->size() == 1;
                         if (dims->size() != shifts->size()) return false;
                         for (int64_t d : *dims) {
                           if (!wrap_dim(d, rank) || rank == 0) return false;
                         }
                         return true;
                       },
                       [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                         std::vector<int64_t> in = c.sizes(c.self());
                         const std::vector<int64_t>& shifts = *c.ints_arg("shifts");
                         const std::vector<int64_t>& dims = *c.ints_arg("dims");
                         if (numel(in) == 0) return read_self(c, r, idx);
                         // Element i of the result is element (i - shift) mod size of the input.
                         auto rolled = [](const Expr& i, int64_t size, int64_t shift) {
                           int64_t s = loop::mod_i64(shift, size);
                           return s == 0 ? i : loop::mod(i + loop::idx(size - s), loop::idx(size));
                         };
                         if (dims.empty()) {
                           int64_t n = numel(in);
                           return read_self(
                               c, r, delinearize(rolled(linearize(idx, in), n, shifts[0]), in));
                         }
                         Index i = idx;
                         for (size_t k = 0; k < dims.size(); ++k) {
                           size_t d = *wrap_dim(dims[k], static_cast<int64_t>(in.size()));
                           i[d] = rolled(i[d], in[d], shifts[k]);
                         }
                         return read_self(c, r, i);
                       }};
    t["aten::constant_pad_nd"] = {
        K::Compute,
        [](const Ctx& c) {
          const std::vector<int64_t>* pad = c.ints_arg("pad");
          std::vector<int64_t> in = c.sizes(c.self());
          if (!same_dtype_view(c) || !pad || pad->size() % 2 != 0 || pad->size() > 2 * in.size()) {
            return false;
          }
          if (!scalar_constant(ldt(c.type(c.out())), c.arg("value"))) return false;
          for (size_t k = 0; k < pad->size() / 2; ++k) {
            size_t d = in.size() - 1 - k;
            in[d] += (*pad)[2 * k] + (*pad)[2 * k + 1];
            if (in[d] < 0) return false;
          }
          return in == c.sizes(c.out());
        },
        [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
          const std::vector<int64_t>& pad = *c.ints_arg("pad");
          std::vector<int64_t> in = c.sizes(c.self());
          DType dt = ldt(c.type(c.out()));
          Index i = idx;
          Expr cond;
          auto conj = [&](Expr e) { cond = cond.defined() ? loop::And::make(cond, e) : e; };
          for (size_t k = 0; k < pad.size() / 2; ++k) {
            size_t d = in.size() - 1 - k;
            int64_t before = pad[2 * k], after = pad[2 * k + 1];
            i[d] = idx[d] - loop::idx(before);
            if (before > 0) conj(loop::LE::make(loop::idx(before), idx[d]));
            if (after > 0) conj(loop::LT::make(idx[d], loop::idx(before + in[d])));
          }
          Expr value = *scalar_constant(dt, c.arg("value"));
          if (!cond.defined()) return read_self(c, r, i);
          return loop::Select::make(cond, r.element(c.self(), i, true), value);
        }};
    t["aten::repeat"] = {K::Compute,
                         [](const Ctx& c) {
                           const std::vector<int64_t>* reps = c.ints_arg("repeats");
                           std::vector<int64_t> in = c.sizes(c.self());
                           if (!same_dtype_view(c) || !reps || reps->size() < in.size())
                             return false;
                           std::vector<int64_t> out(*reps);
                           size_t off = reps->size() - in.size();
                           for (size_t d = 0; d < out.size(); ++d) {
                             if (out[d] < 0) return false;
                             if (d >= off) out[d] *= in[d - off];
                           }
                           return out == c.sizes(c.out());
                         },
                         [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                           std::vector<int64_t> in = c.sizes(c.self());
                           size_t off = idx.size() - in.size();
                           Index i(in.size());
                           for (size_t d = 0; d < in.size(); ++d) {
                             i[d] = in[d] <= 1 ? loop::idx(0)
                                               : loop::mod(idx[d + off], loop::idx(in[d]));
                           }
                           return read_self(c, r, i);
                         }};
    auto triangle = [](bool lower) {
      return Rule{K::Compute,
                  [](const Ctx& c) {
                    return same_dtype_view(c) && c.type(c.self()).dim() >= 2 &&
                           c.int_arg("diagonal") && c.sizes(c.self()) == c.sizes(c.out());
                  },
                  [lower](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                    // tril keeps j - i <= diagonal; triu keeps j - i >= diagonal.
                    Expr diff = idx[idx.size() - 1] - idx[idx.size() - 2];
                    Expr k = loop::idx(*c.int_arg("diagonal"));
                    Expr keep = lower ? loop::LE::make(diff, k) : loop::LE::make(k, diff);
                    DType dt = ldt(c.type(c.out()));
                    return loop::Select::make(keep, read_self(c, r, idx), zero_of(dt));
                  }};
    };
    t["aten::tril"] = triangle(true);
    t["aten::triu"] = triangle(false);
    t["aten::copy"] = {
        K::Compute,
        [](const Ctx& c) {
          std::optional<ValueId> self = c.tensor_arg("self"), src = c.tensor_arg("src");
          if (!self || !src || c.n.outputs.size() != 1) return false;
          const graph::TensorType &st = c.type(*self), &rt = c.type(*src), &ot = c.type(c.out());
          return loop_dtype(st) && loop_dtype(rt) && ot.dtype == st.dtype &&
                 rt.device.kind == graph::DeviceKind::CPU && sizes_of(ot) == sizes_of(st) &&
                 broadcasts_to(sizes_of(rt), sizes_of(ot));
        },
        [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
          ValueId src = *c.tensor_arg("src");
          return convert(ldt(c.type(c.out())),
                         r.element(src, broadcast_index(idx, c.sizes(src)), false));
        }};
    t["aten::fill.Scalar"] = {K::Compute,
                              [](const Ctx& c) {
                                const graph::TensorType& ot = c.type(c.out());
                                return c.n.outputs.size() == 1 && loop_dtype(ot) &&
                                       scalar_constant(ldt(ot), c.arg("value")).has_value();
                              },
                              [](const Ctx& c, size_t, const Index&, ElementReader&) {
                                return *scalar_constant(ldt(c.type(c.out())), c.arg("value"));
                              }};
    t["aten::fill.Tensor"] = {
        K::Compute,
        [](const Ctx& c) {
          std::optional<ValueId> v = c.tensor_arg("value");
          const graph::TensorType& ot = c.type(c.out());
          return v && c.n.outputs.size() == 1 && loop_dtype(ot) && loop_dtype(c.type(*v)) &&
                 c.type(*v).dim() == 0 && c.type(*v).device.kind == graph::DeviceKind::CPU;
        },
        [](const Ctx& c, size_t, const Index&, ElementReader& r) {
          return convert(ldt(c.type(c.out())), r.element(*c.tensor_arg("value"), {}, false));
        }};
    t["aten::slice_scatter"] = {
        K::Compute,
        [](const Ctx& c) {
          std::optional<ValueId> src = c.tensor_arg("src");
          std::optional<int64_t> d = c.int_arg("dim");
          std::vector<int64_t> in = c.sizes(c.self());
          if (!same_dtype_view(c) || !src || !d || in.empty()) return false;
          if (c.type(*src).dtype != c.type(c.self()).dtype || in != c.sizes(c.out())) return false;
          std::optional<int64_t> w = wrap_dim(*d, static_cast<int64_t>(in.size()));
          if (!w) return false;
          std::optional<std::pair<int64_t, int64_t>> range = slice_range(c, in[*w]);
          if (!range) return false;
          in[*w] = range->second;
          return in == c.sizes(*src);
        },
        [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
          ValueId src = *c.tensor_arg("src");
          std::vector<int64_t> in = c.sizes(c.self());
          size_t d = *wrap_dim(*c.int_arg("dim"), static_cast<int64_t>(in.size()));
          auto [start, len] = *slice_range(c, in[d]);
          int64_t step = *c.int_arg("step");
          if (len == 0) return read_self(c, r, idx);
          Expr rel = idx[d] - loop::idx(start);
          Expr cond = loop::And::make(loop::LE::make(loop::idx(start), idx[d]),
                                      loop::LT::make(rel, loop::idx((len - 1) * step + 1)));
          Index si = idx;
          si[d] = rel;
          if (step != 1) {
            cond = loop::And::make(cond,
                                   loop::EQ::make(loop::mod(rel, loop::idx(step)), loop::idx(0)));
            si[d] = loop::floordiv(rel, loop::idx(step));
          }
          return loop::Select::make(cond, r.element(src, si, true), read_self(c, r, idx));
        }};
    t["aten::select_scatter"] = {
        K::Compute,
        [](const Ctx& c) {
          std::optional<ValueId> src = c.tensor_arg("src");
          std::optional<int64_t> d = c.int_arg("dim"), i = c.int_arg("index");
          std::vector<int64_t> in = c.sizes(c.self());
          if (!same_dtype_view(c) || !src || !d || !i || in.empty()) return false;
          if (c.type(*src).dtype != c.type(c.self()).dtype || in != c.sizes(c.out())) return false;
          std::optional<int64_t> w = wrap_dim(*d, static_cast<int64_t>(in.size()));
          if (!w || *i < -in[*w] || *i >= in[*w]) return false;
          return erase(c.type(c.self()).sizes, *w) == c.type(*src).sizes;
        },
        [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
          ValueId src = *c.tensor_arg("src");
          std::vector<int64_t> in = c.sizes(c.self());
          size_t d = *wrap_dim(*c.int_arg("dim"), static_cast<int64_t>(in.size()));
          int64_t i = *c.int_arg("index");
          Expr cond = loop::EQ::make(idx[d], loop::idx(i < 0 ? i + in[d] : i));
          return loop::Select::make(cond, r.element(src, erase(idx, d), true),
                                    read_self(c, r, idx));
        }};

    // ---- factories: a function of the index alone ----
    auto constant_rule = [](std::string_view value_arg, std::optional<int64_t> fixed) {
      return Rule{K::Compute,
                  [value_arg, fixed](const Ctx& c) {
                    const graph::TensorType& ot = c.type(c.out());
                    if (c.n.outputs.size() != 1 || !loop_dtype(ot)) return false;
                    graph::Arg v = fixed ? graph::Arg(*fixed) : graph::Arg(graph::NoneArg{});
                    const graph::Arg* a = fixed ? &v : c.arg(value_arg);
                    return scalar_constant(ldt(ot), a).has_value();
                  },
                  [value_arg, fixed](const Ctx& c, size_t, const Index&, ElementReader&) {
                    graph::Arg v = fixed ? graph::Arg(*fixed) : graph::Arg(graph::NoneArg{});
                    const graph::Arg* a = fixed ? &v : c.arg(value_arg);
                    return *scalar_constant(ldt(c.type(c.out())), a);
                  }};
    };
    t["aten::scalar_tensor"] = constant_rule("s", std::nullopt);
    t["aten::full"] = constant_rule("fill_value", std::nullopt);
    t["aten::full_like"] = constant_rule("fill_value", std::nullopt);
    t["aten::new_full"] = constant_rule("fill_value", std::nullopt);
    for (const char* name : {"aten::zeros", "aten::zeros_like", "aten::new_zeros"}) {
      t[name] = constant_rule("", 0);
    }
    for (const char* name : {"aten::ones", "aten::ones_like", "aten::new_ones"}) {
      t[name] = constant_rule("", 1);
    }
    // arange of integers, into an integer dtype or a float one that holds every value exactly
    // (eager computes start + i * step in a wider type and rounds once: the same values).
    auto arange_args = [](const Ctx& c) -> std::optional<std::array<int64_t, 3>> {
      std::array<int64_t, 3> r{0, 0, 1};  // start, end, step
      std::optional<int64_t> end = c.int_arg("end");
      if (!end) return std::nullopt;
      r[1] = *end;
      if (c.arg("start")) {
        std::optional<int64_t> start = c.int_arg("start");
        if (!start) return std::nullopt;
        r[0] = *start;
      }
      if (c.arg("step")) {
        std::optional<int64_t> step = c.int_arg("step");
        if (!step || *step == 0) return std::nullopt;
        r[2] = *step;
      }
      return r;
    };
    Rule arange{K::Compute,
                [arange_args](const Ctx& c) {
                  std::optional<std::array<int64_t, 3>> a = arange_args(c);
                  const graph::TensorType& ot = c.type(c.out());
                  if (!a || c.n.outputs.size() != 1 || !loop_dtype(ot) || ot.dim() != 1)
                    return false;
                  DType dt = ldt(ot);
                  auto [start, end, step] = *a;
                  constexpr int64_t kExact = int64_t{1} << 24;  // f32 holds every int below
                  if (std::abs(start) > kExact || std::abs(end) > kExact) return false;
                  int64_t len =
                      step > 0 ? (end - start + step - 1) / step : (start - end - step - 1) / -step;
                  len = std::max<int64_t>(len, 0);
                  auto fits = [&](int64_t v) {
                    return loop::is_float(dt) ? dt != DType::BFloat16 && dt != DType::Float16
                                              : loop::int_fits(dt, v) && dt != DType::Bool;
                  };
                  if (len > 0 && (!fits(start) || !fits(start + (len - 1) * step))) return false;
                  return c.sizes(c.out()) == std::vector<int64_t>{len};
                },
                [arange_args](const Ctx& c, size_t, const Index& idx, ElementReader&) {
                  auto [start, end, step] = *arange_args(c);
                  return detail::cast(ldt(c.type(c.out())),
                                      loop::idx(start) + idx[0] * loop::idx(step));
                }};
    t["aten::arange"] = arange;
    t["aten::arange.start"] = arange;
    t["aten::arange.start_step"] = arange;

    // ---- indexing by index tensors ----
    t["aten::index_select"] = {
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
    t["aten::gather"] = {K::Compute,
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
    t["aten::embedding"] = {K::Compute,
                            [](const Ctx& c) {
                              std::optional<ValueId> w = c.tensor_arg("weight"),
                                                     ids = c.tensor_arg("indices");
                              if (!w || !ids || c.n.outputs.size() != 1) return false;
                              const graph::TensorType &wt = c.type(*w), &it = c.type(*ids);
                              if (wt.dim() != 2 || !loop_dtype(wt) || !index_dtype(it))
                                return false;
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
    t["aten::index.Tensor"] = {
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
          AdvancedIndex ai = *advanced_index(c);
          std::vector<int64_t> in = c.sizes(c.self());
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
              i[d] = r.index_element(v, broadcast_index(bidx, c.sizes(v)), loop::idx(in[d]), true);
            } else {
              return Expr{};  // a gap between indexed dims: rejected by the check
            }
          }
          return read_self(c, r, i);
        }};
    return t;
  }();
  return table;
}

const Rule* rule_of(const graph::Graph& g, const graph::Node& n) {
  if (n.op < 0 || n.op >= static_cast<int32_t>(g.ops.size())) return nullptr;
  auto it = rules().find(g.op_of(n).qualified_name());
  return it == rules().end() ? nullptr : &it->second;
}

}  // namespace

std::optional<IndexOpKind> index_op_kind(const graph::Graph& g, const graph::Node& n) {
  if (is_batch_norm_inference(g, n)) return IndexOpKind::Compute;
  const Rule* rule = rule_of(g, n);
  const graph::OpInfo& op = g.op_of(n);
  if (rule == nullptr || n.outputs.empty() || n.args.size() != op.arg_names.size()) {
    return std::nullopt;
  }
  for (ValueId o : n.outputs) {
    for (const graph::DimExpr& d : g.type(o).sizes) {
      if (!d.is_constant()) return std::nullopt;
    }
  }
  Ctx c{g, n, op};
  if (rule->kind == IndexOpKind::View && !c.tensor_arg("self")) return std::nullopt;
  if (!op.returns_list && n.outputs.size() != 1) return std::nullopt;
  if (!rule->check(c)) return std::nullopt;
  return rule->kind;
}

std::vector<ValueId> index_tensor_args(const graph::Graph& g, const graph::Node& n) {
  const std::string name = g.op_of(n).qualified_name();
  Ctx c{g, n, g.op_of(n)};
  std::vector<ValueId> out;
  auto add = [&](std::optional<ValueId> v) {
    if (v) out.push_back(*v);
  };
  if (name == "aten::index_select" || name == "aten::gather") add(c.tensor_arg("index"));
  if (name == "aten::embedding") add(c.tensor_arg("indices"));
  if (name == "aten::index.Tensor") {
    const graph::Arg* a = c.arg("indices");
    if (const auto* l = a ? std::get_if<graph::ValueList>(a) : nullptr) {
      for (const auto& item : l->items) add(item);
    }
  }
  return out;
}

bool needs_realized_input(const graph::Graph& g, const graph::Node& n) {
  const Rule* rule = rule_of(g, n);
  return rule != nullptr && !rule->lower;
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
  const Rule* rule = rule_of(g, n);
  EMBER_INTERNAL_ASSERT(rule != nullptr && rule->lower)
      << "lower_index_op of " << g.op_of(n).qualified_name();
  auto it = std::find(n.outputs.begin(), n.outputs.end(), out);
  EMBER_INTERNAL_ASSERT(it != n.outputs.end()) << "value " << out << " is not an output";
  EMBER_INTERNAL_ASSERT(index.size() == static_cast<size_t>(g.type(out).dim()))
      << "index of rank " << index.size() << " for a value of rank " << g.type(out).dim();
  Ctx c{g, n, g.op_of(n)};
  Expr e = rule->lower(c, static_cast<size_t>(it - n.outputs.begin()), index, reader);
  EMBER_INTERNAL_ASSERT(e.defined() && e.dtype() == *to_loop_dtype(g.type(out).dtype))
      << "lower_index_op of " << g.op_of(n).qualified_name() << " gave a wrong element type";
  return e;
}

}  // namespace ember::sched
