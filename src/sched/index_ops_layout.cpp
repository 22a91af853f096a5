/// \file
/// The index functions of computing layout ops (index_ops.h): cat, stack, flip, roll,
/// constant_pad_nd, repeat, tril/triu, copy, fill, slice_scatter, select_scatter, im2col.
#include <algorithm>
#include <optional>
#include <vector>

#include "sched/fusion.h"
#include "sched/index_ops_internal.h"
#include "sched/pointwise_internal.h"
#include "sched/size_expr.h"
#include "support/error.h"

namespace ember::sched::index_detail {

namespace {

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

}  // namespace

void add_layout_rules(RuleTable& t) {
  using K = IndexOpKind;

  // Over sizes that may be symbolic: the inputs agree with the output but along `dim`, where
  // their sizes add up to the output's.
  auto cat_check = [](const Ctx& c, bool stack) {
    std::optional<std::vector<ValueId>> ts = tensor_list(c, "tensors");
    std::optional<int64_t> d = c.int_arg("dim");
    const graph::TensorType& ot = c.type(c.out());
    if (!ts || ts->empty() || !d || !loop_dtype(ot) || c.n.outputs.size() != 1) return false;
    const graph::Dims& out = ot.sizes;
    std::optional<int64_t> w = wrap_dim(*d, static_cast<int64_t>(out.size()));
    if (!w || out.empty()) return false;
    graph::DimExpr total = 0;
    for (ValueId v : *ts) {
      const graph::TensorType& t = c.type(v);
      if (!loop_dtype(t) || !kernel_device(t.device)) return false;
      graph::Dims s = t.sizes;
      if (stack) {
        s.insert(s.begin() + *w, 1);
      } else if (s.size() == 1 && is_constant(s[0], 0)) {
        continue;  // the legacy empty tensor: skipped by cat
      }
      if (s.size() != out.size()) return false;
      total = total + s[*w];
      s[*w] = out[*w];
      if (s != out) return false;
    }
    return total == out[*w];
  };
  // One arm per input, chosen by the output index along `dim` (offsets over symbols where the
  // inputs' lengths are).
  auto cat_lower = [](const Ctx& c, const Index& idx, ElementReader& r, bool stack) {
    std::vector<ValueId> ts = *tensor_list(c, "tensors");
    const graph::Dims& out = c.type(c.out()).sizes;
    size_t d = *wrap_dim(*c.int_arg("dim"), static_cast<int64_t>(out.size()));
    DType dt = ldt(c.type(c.out()));
    std::vector<std::pair<ValueId, Expr>> parts;  // input, offset along d
    graph::DimExpr off = 0;
    for (ValueId v : ts) {
      const graph::Dims& s = c.type(v).sizes;
      graph::DimExpr len = 1;
      if (!stack) {
        bool legacy_empty = s.size() == 1 && is_constant(s[0], 0);
        len = legacy_empty ? graph::DimExpr(0) : s[d];
      }
      if (!is_constant(len, 0)) parts.emplace_back(v, dim_expr(off));
      off = off + len;
    }
    if (parts.empty()) return zero_of(dt);
    bool guarded = parts.size() > 1;
    auto arm = [&](size_t k) {
      Index i = idx;
      if (stack) {
        i = erase(idx, d);
      } else {
        i[d] = idx[d] - parts[k].second;
      }
      return convert(dt, r.element(parts[k].first, i, guarded));
    };
    Expr e = arm(parts.size() - 1);
    for (size_t k = parts.size() - 1; k-- > 0;) {
      e = loop::Select::make(loop::LT::make(idx[d], parts[k + 1].second), arm(k), e);
    }
    return e;
  };
  t[{OpKind::cat, ""}] = {K::Compute, [cat_check](const Ctx& c) { return cat_check(c, false); },
                          [cat_lower](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                            return cat_lower(c, idx, r, false);
                          }};
  t[{OpKind::stack, ""}] = {K::Compute, [cat_check](const Ctx& c) { return cat_check(c, true); },
                            [cat_lower](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
                              return cat_lower(c, idx, r, true);
                            }};
  t[{OpKind::cat, ""}].symbolic = t[{OpKind::cat, ""}].check;  // over Dims already
  t[{OpKind::stack, ""}].symbolic = t[{OpKind::stack, ""}].check;
  t[{OpKind::flip, ""}] = {K::Compute,
                           [](const Ctx& c) {
                             const std::vector<int64_t>* dims = c.ints_arg("dims");
                             const int64_t rank = c.type(c.self()).dim();
                             return same_dtype_view(c) && dims &&
                                    c.sizes(c.self()) == c.sizes(c.out()) &&
                                    distinct_dims(*dims, rank);
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
  t[{OpKind::roll, ""}] = {
      K::Compute,
      [](const Ctx& c) {
        const std::vector<int64_t>* shifts = c.ints_arg("shifts");
        const std::vector<int64_t>* dims = c.ints_arg("dims");
        const int64_t rank = c.type(c.self()).dim();
        if (!same_dtype_view(c) || !shifts || !dims || shifts->empty()) return false;
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
          return read_self(c, r, delinearize(rolled(linearize(idx, in), n, shifts[0]), in));
        }
        Index i = idx;
        for (size_t k = 0; k < dims.size(); ++k) {
          size_t d = *wrap_dim(dims[k], static_cast<int64_t>(in.size()));
          i[d] = rolled(i[d], in[d], shifts[k]);
        }
        return read_self(c, r, i);
      }};
  t[{OpKind::constant_pad_nd, ""}] = {
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
  // im2col (F.unfold): out[n, (c * kh + i) * kw + j, oh * OW + ow] is self[n, c, oh * sh - ph +
  // i * dh, ow * sw - pw + j * dw], 0 in the padding. ATen's CUDA kernel runs once per batch
  // element (YituTechConvBert: 192 launches per call); as an index function it fuses into its
  // consumer.
  t[{OpKind::im2col, ""}] = {
      K::Compute,
      [](const Ctx& c) {
        const std::vector<int64_t>* k = c.ints_arg("kernel_size");
        const std::vector<int64_t>* d = c.ints_arg("dilation");
        const std::vector<int64_t>* p = c.ints_arg("padding");
        const std::vector<int64_t>* st = c.ints_arg("stride");
        std::vector<int64_t> in = c.sizes(c.self());
        // Eager's kernels take floating types only (an integer input raises there).
        if (!same_dtype_view(c) || !loop::is_float(ldt(c.type(c.out()))) || !k || !d || !p || !st ||
            k->size() != 2 || d->size() != 2 || p->size() != 2 || st->size() != 2 ||
            (in.size() != 3 && in.size() != 4)) {
          return false;
        }
        const size_t h = in.size() - 2;
        int64_t blocks = 1;
        for (size_t a = 0; a < 2; ++a) {
          if ((*k)[a] <= 0 || (*d)[a] <= 0 || (*p)[a] < 0 || (*st)[a] <= 0) return false;
          const int64_t span = (*d)[a] * ((*k)[a] - 1) + 1;
          const int64_t o = (in[h + a] + 2 * (*p)[a] - span) / (*st)[a] + 1;
          if (in[h + a] + 2 * (*p)[a] < span || o <= 0) return false;
          blocks *= o;
        }
        std::vector<int64_t> out(in.begin(), in.end() - 2);
        out.back() *= (*k)[0] * (*k)[1];
        out.push_back(blocks);
        return out == c.sizes(c.out());
      },
      [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
        const std::vector<int64_t>& k = *c.ints_arg("kernel_size");
        const std::vector<int64_t>& d = *c.ints_arg("dilation");
        const std::vector<int64_t>& p = *c.ints_arg("padding");
        const std::vector<int64_t>& st = *c.ints_arg("stride");
        std::vector<int64_t> in = c.sizes(c.self());
        const size_t h = in.size() - 2;  // the channel index is idx[h - 1], the block idx[h]
        const int64_t ow_count = (in[h + 1] + 2 * p[1] - (d[1] * (k[1] - 1) + 1)) / st[1] + 1;
        const Expr ck = idx[h - 1], l = idx[h];
        const Expr taps = loop::idx(k[0] * k[1]);
        const Expr tap = loop::mod(ck, taps);
        const Expr pos[2] = {loop::floordiv(l, loop::idx(ow_count)),
                             loop::mod(l, loop::idx(ow_count))};
        const Expr off[2] = {loop::floordiv(tap, loop::idx(k[1])), loop::mod(tap, loop::idx(k[1]))};
        Index i(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(h - 1));
        i.push_back(loop::floordiv(ck, taps));
        Expr cond;
        for (size_t a = 0; a < 2; ++a) {
          Expr at = pos[a] * loop::idx(st[a]) + off[a] * loop::idx(d[a]) - loop::idx(p[a]);
          i.push_back(at);
          if (p[a] == 0) continue;  // a window starts and ends inside the input
          Expr inside = loop::And::make(loop::LE::make(loop::idx(0), at),
                                        loop::LT::make(at, loop::idx(in[h + a])));
          cond = cond.defined() ? loop::And::make(cond, inside) : inside;
        }
        if (!cond.defined()) return read_self(c, r, i);
        return loop::Select::make(cond, r.element(c.self(), i, true),
                                  zero_of(ldt(c.type(c.out()))));
      }};
  t[{OpKind::repeat, ""}] = {K::Compute,
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
  t[{OpKind::tril, ""}] = triangle(true);
  t[{OpKind::triu, ""}] = triangle(false);
  t[{OpKind::copy, ""}] = {
      K::Compute,
      [](const Ctx& c) {
        std::optional<ValueId> self = c.tensor_arg("self"), src = c.tensor_arg("src");
        if (!self || !src || c.n.outputs.size() != 1) return false;
        const graph::TensorType &st = c.type(*self), &rt = c.type(*src), &ot = c.type(c.out());
        return loop_dtype(st) && loop_dtype(rt) && ot.dtype == st.dtype && rt.device == ot.device &&
               kernel_device(rt.device) && sizes_of(ot) == sizes_of(st) &&
               broadcasts_to(sizes_of(rt), sizes_of(ot));
      },
      [](const Ctx& c, size_t, const Index& idx, ElementReader& r) {
        ValueId src = *c.tensor_arg("src");
        return convert(ldt(c.type(c.out())),
                       r.element(src, broadcast_index(idx, c.sizes(src)), false));
      }};
  t[{OpKind::fill, "Scalar"}] = {K::Compute,
                                 [](const Ctx& c) {
                                   const graph::TensorType& ot = c.type(c.out());
                                   return c.n.outputs.size() == 1 && loop_dtype(ot) &&
                                          scalar_constant(ldt(ot), c.arg("value")).has_value();
                                 },
                                 [](const Ctx& c, size_t, const Index&, ElementReader&) {
                                   return *scalar_constant(ldt(c.type(c.out())), c.arg("value"));
                                 }};
  t[{OpKind::fill, "Tensor"}] = {
      K::Compute,
      [](const Ctx& c) {
        std::optional<ValueId> v = c.tensor_arg("value");
        const graph::TensorType& ot = c.type(c.out());
        return v && c.n.outputs.size() == 1 && loop_dtype(ot) && loop_dtype(c.type(*v)) &&
               c.type(*v).dim() == 0 && kernel_device(c.type(*v).device);
      },
      [](const Ctx& c, size_t, const Index&, ElementReader& r) {
        return convert(ldt(c.type(c.out())), r.element(*c.tensor_arg("value"), {}, false));
      }};
  t[{OpKind::slice_scatter, ""}] = {
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
          cond =
              loop::And::make(cond, loop::EQ::make(loop::mod(rel, loop::idx(step)), loop::idx(0)));
          si[d] = loop::floordiv(rel, loop::idx(step));
        }
        return loop::Select::make(cond, r.element(src, si, true), read_self(c, r, idx));
      }};
  t[{OpKind::select_scatter, ""}] = {
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
        return loop::Select::make(cond, r.element(src, erase(idx, d), true), read_self(c, r, idx));
      }};
}

}  // namespace ember::sched::index_detail
