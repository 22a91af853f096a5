#include "sched/pooling.h"

#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "sched/kernel_params.h"
#include "sched/node_args.h"
#include "sched/pointwise.h"
#include "support/error.h"

namespace ember::sched {

namespace {

using graph::ValueId;
using loop::DType;
using loop::Expr;

/// The geometry of a 2D pool over the last two dims of its input.
struct Pool {
  bool max = true;
  ValueId x = -1;
  int64_t h = 0, w = 0;    // input
  int64_t oh = 0, ow = 0;  // output
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override;
};

std::optional<Pool> analyze(const graph::Graph& g, const graph::Node& n) {
  const graph::OpInfo& op = g.op_of(n);
  Pool p;
  if (op.is(graph::OpKind::max_pool2d_with_indices)) {
    p.max = true;
    if (n.outputs.size() != 2 || !value_unread(g, n.outputs[1])) return std::nullopt;
  } else if (op.is(graph::OpKind::avg_pool2d)) {
    p.max = false;
    if (n.outputs.size() != 1) return std::nullopt;
  } else {
    return std::nullopt;
  }
  const graph::Arg* self = node_arg(g, n, "self");
  const auto* ref = self ? std::get_if<graph::ValueRef>(self) : nullptr;
  if (ref == nullptr) return std::nullopt;
  p.x = ref->id;
  const graph::TensorType& xt = g.type(p.x);
  const graph::TensorType& yt = g.type(n.outputs[0]);
  std::optional<DType> dt = to_loop_dtype(xt.dtype);
  if (!dt || !loop::is_float(*dt) || xt.dtype != yt.dtype || (xt.dim() != 3 && xt.dim() != 4) ||
      yt.dim() != xt.dim()) {
    return std::nullopt;
  }
  for (const auto* t : {&xt, &yt}) {
    for (const graph::DimExpr& d : t->sizes) {
      if (!d.is_constant()) return std::nullopt;
    }
  }
  const std::vector<int64_t> xs = sizes_of(xt), ys = sizes_of(yt);
  const size_t r = xs.size();
  for (size_t d = 0; d + 2 < r; ++d) {
    if (xs[d] != ys[d]) return std::nullopt;
  }
  p.h = xs[r - 2], p.w = xs[r - 1], p.oh = ys[r - 2], p.ow = ys[r - 1];
  auto k = int_pair_arg(node_arg(g, n, "kernel_size"), std::nullopt);
  if (!k) return std::nullopt;
  auto s = int_pair_arg(node_arg(g, n, "stride"), k);
  auto pad = int_pair_arg(node_arg(g, n, "padding"), std::pair<int64_t, int64_t>{0, 0});
  if (!s || !pad) return std::nullopt;
  std::tie(p.kh, p.kw) = *k;
  std::tie(p.sh, p.sw) = *s;
  std::tie(p.ph, p.pw) = *pad;
  if (p.max) {
    auto dil = int_pair_arg(node_arg(g, n, "dilation"), std::pair<int64_t, int64_t>{1, 1});
    if (!dil) return std::nullopt;
    std::tie(p.dh, p.dw) = *dil;
  } else {
    const graph::Arg* cip = node_arg(g, n, "count_include_pad");
    const auto* b = cip ? std::get_if<bool>(cip) : nullptr;
    if (b == nullptr) return std::nullopt;
    p.count_include_pad = *b;
    const graph::Arg* div = node_arg(g, n, "divisor_override");
    if (div == nullptr) return std::nullopt;
    if (const auto* v = std::get_if<int64_t>(div)) {
      if (*v == 0) return std::nullopt;  // eager raises
      p.divisor_override = *v;
    } else if (!std::holds_alternative<graph::NoneArg>(*div)) {
      return std::nullopt;
    }
  }
  if (p.kh <= 0 || p.kw <= 0 || p.sh <= 0 || p.sw <= 0 || p.ph < 0 || p.pw < 0 || p.dh <= 0 ||
      p.dw <= 0 || p.kh * p.kw > kMaxPoolWindow || p.oh <= 0 || p.ow <= 0) {
    return std::nullopt;
  }
  // Every window starts inside the padded input (eager's output size guarantees it).
  if ((p.oh - 1) * p.sh >= p.h + p.ph || (p.ow - 1) * p.sw >= p.w + p.pw) return std::nullopt;
  if (!p.max && !p.divisor_override && p.count_include_pad) {
    // The divisor is the window clipped to the padded input: the same for all windows only
    // when none reaches past it (ceil_mode can make the last one do).
    if ((p.oh - 1) * p.sh - p.ph + p.kh > p.h + p.ph ||
        (p.ow - 1) * p.sw - p.pw + p.kw > p.w + p.pw) {
      return std::nullopt;
    }
  }
  return p;
}

}  // namespace

bool is_pool(const graph::Graph& g, const graph::Node& n) {
  return analyze(g, n).has_value();
}

int64_t pool_window(const graph::Graph& g, const graph::Node& n) {
  std::optional<Pool> p = analyze(g, n);
  return p ? p->kh * p->kw : 0;
}

loop::Expr lower_pool(const graph::Graph& g, const graph::Node& n, const Index& index,
                      ElementReader& reader) {
  std::optional<Pool> p = analyze(g, n);
  EMBER_INTERNAL_ASSERT(p.has_value()) << "lower_pool of " << g.op_of(n).qualified_name();
  const DType dt = *to_loop_dtype(g.type(p->x).dtype);
  const size_t r = index.size();
  const Expr h0 = index[r - 2] * p->sh - p->ph;  // the window's first row and column
  const Expr w0 = index[r - 1] * p->sw - p->pw;
  Expr acc;
  for (int64_t i = 0; i < p->kh; ++i) {
    const Expr hi = h0 + i * p->dh;
    for (int64_t j = 0; j < p->kw; ++j) {
      const Expr wj = w0 + j * p->dw;
      Index at = index;
      at[r - 2] = hi;
      at[r - 1] = wj;
      const Expr inside = loop::And::make(
          loop::And::make(loop::LE::make(loop::idx(0), hi), loop::LT::make(hi, loop::idx(p->h))),
          loop::And::make(loop::LE::make(loop::idx(0), wj), loop::LT::make(wj, loop::idx(p->w))));
      if (p->max) {
        const Expr v =
            loop::Select::make(inside, reader.element(p->x, at, true),
                               loop::FloatImm::make(dt, -std::numeric_limits<double>::infinity()));
        acc = acc.defined() ? loop::make_binary(loop::ExprKind::Max, acc, v) : v;
      } else {
        const DType comp = float_compute_type(dt);
        const Expr v = loop::Select::make(inside, cast_to(comp, reader.element(p->x, at, true)),
                                          loop::FloatImm::make(comp, 0.0));
        acc = acc.defined() ? acc + v : v;
      }
    }
  }
  if (p->max) return acc;
  const DType comp = float_compute_type(dt);
  Expr divisor;
  if (p->divisor_override) {
    divisor = loop::FloatImm::make(comp, static_cast<double>(*p->divisor_override));
  } else if (p->count_include_pad) {
    divisor = loop::FloatImm::make(comp, static_cast<double>(p->kh * p->kw));
  } else {
    // The window clipped to the input: (min(h0 + kh, H) - max(h0, 0)) rows, as many columns.
    auto count = [](const Expr& start, int64_t k, int64_t size) {
      return loop::make_binary(loop::ExprKind::Min, start + k, loop::idx(size)) -
             loop::make_binary(loop::ExprKind::Max, start, loop::idx(0));
    };
    divisor = cast_to(comp, count(h0, p->kh, p->h) * count(w0, p->kw, p->w));
  }
  return cast_to(dt, loop::Div::make(acc, divisor));
}

}  // namespace ember::sched
