/// \file
/// The index functions of views (index_ops.h): the output aliases its input, and its index
/// function remaps the index and reads the input.
#include <algorithm>
#include <optional>
#include <vector>

#include "sched/index_ops_internal.h"
#include "sched/pointwise_internal.h"
#include "support/error.h"

namespace ember::sched::index_detail {

namespace {

Index zeros(size_t rank) {
  return Index(rank, loop::idx(0));
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
  if (c.op.kind == OpKind::split) {
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

}  // namespace

void add_view_rules(RuleTable& t) {
  using K = IndexOpKind;
  // Over shape symbols: a view to the same sizes reads its input at the same index.
  const Check same_sizes = [](const Ctx& c) {
    return same_dtype_view(c) && c.n.outputs.size() == 1 &&
           c.type(c.self()).sizes == c.type(c.out()).sizes;
  };

  Rule reshape{K::View,
               [](const Ctx& c) {
                 return same_dtype_view(c) && c.n.outputs.size() == 1 &&
                        numel(c.sizes(c.self())) == numel(c.sizes(c.out()));
               },
               [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                 if (c.type(c.self()).sizes == c.type(c.out()).sizes) return read_self(c, r, idx);
                 return read_self(c, r, reshape_index(c.sizes(c.self()), c.sizes(c.out()), idx));
               },
               same_sizes};
  t[{OpKind::view, ""}] = reshape;
  t[{OpKind::_unsafe_view, ""}] = reshape;
  Rule identity{
      K::View,
      [](const Ctx& c) {
        return same_dtype_view(c) && c.n.outputs.size() == 1 &&
               c.sizes(c.self()) == c.sizes(c.out());
      },
      [](const Ctx& c, size_t, const Index& idx, ElementReader& r) { return read_self(c, r, idx); },
      same_sizes};
  t[{OpKind::alias, ""}] = identity;
  t[{OpKind::detach, ""}] = identity;

  t[{OpKind::permute, ""}] = {K::View,
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
  t[{OpKind::permute, ""}].symbolic = t[{OpKind::permute, ""}].check;  // reads no size
  t[{OpKind::transpose, "int"}] = {
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
  t[{OpKind::transpose, "int"}].symbolic = t[{OpKind::transpose, "int"}].check;
  t[{OpKind::t, ""}] = {
      K::View, [](const Ctx& c) { return same_dtype_view(c) && c.type(c.self()).dim() <= 2; },
      [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
        Index in = idx;
        if (in.size() == 2) std::swap(in[0], in[1]);
        return read_self(c, r, in);
      }};
  t[{OpKind::t, ""}].symbolic = t[{OpKind::t, ""}].check;
  t[{OpKind::expand, ""}] = {
      K::View,
      [](const Ctx& c) {
        return same_dtype_view(c) && broadcasts_to(c.sizes(c.self()), c.sizes(c.out()));
      },
      [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
        return read_self(c, r, broadcast_index(idx, c.type(c.self()).sizes));
      },
      [](const Ctx& c) {
        return same_dtype_view(c) && broadcasts_to(c.type(c.self()).sizes, c.type(c.out()).sizes);
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
  t[{OpKind::squeeze, ""}] = squeeze;
  t[{OpKind::squeeze, "dim"}] = squeeze;
  t[{OpKind::squeeze, "dims"}] = squeeze;
  t[{OpKind::unsqueeze, ""}] = {
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
  t[{OpKind::unsqueeze, ""}].symbolic = t[{OpKind::unsqueeze, ""}].check;  // over Dims already
  t[{OpKind::slice, "Tensor"}] = {
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
  t[{OpKind::select, "int"}] = {
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
  t[{OpKind::narrow, ""}] = {
      K::View,
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
  t[{OpKind::diagonal, ""}] = {
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
        int64_t len = *off >= 0 ? std::min(in[*a], in[*b] - *off) : std::min(in[*a] + *off, in[*b]);
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
  t[{OpKind::split, "Tensor"}] = split;
  t[{OpKind::split_with_sizes, ""}] = split;
  t[{OpKind::unbind, "int"}] = {K::View,
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
  t[{OpKind::as_strided, ""}] = {K::View, [](const Ctx& c) { return same_dtype_view(c); }, Lower{}};
}

}  // namespace ember::sched::index_detail
