#include "sched/depthwise_conv.h"

#include <optional>
#include <string_view>
#include <utility>
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

/// The geometry of a depthwise convolution over the last two dims of its input.
struct Depthwise {
  ValueId x = -1, w = -1, bias = -1;
  int64_t h = 0, wd = 0;  // input rows and columns
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t multiplier = 1;  // output channels per input channel
};

std::optional<ValueId> tensor(const graph::Graph& g, const graph::Node& n, std::string_view name) {
  const graph::Arg* a = node_arg(g, n, name);
  const auto* r = a ? std::get_if<graph::ValueRef>(a) : nullptr;
  return r ? std::optional<ValueId>(r->id) : std::nullopt;
}

std::optional<Depthwise> analyze(const graph::Graph& g, const graph::Node& n) {
  if (n.op < 0 || n.op >= static_cast<int32_t>(g.ops.size())) return std::nullopt;
  const graph::OpInfo& op = g.op_of(n);
  if (!op.is(graph::OpKind::convolution) || n.outputs.size() != 1 ||
      n.args.size() != op.arg_names.size()) {
    return std::nullopt;
  }
  const graph::Arg* transposed = node_arg(g, n, "transposed");
  const graph::Arg* groups = node_arg(g, n, "groups");
  if (transposed == nullptr || !std::holds_alternative<bool>(*transposed) ||
      std::get<bool>(*transposed) || groups == nullptr ||
      !std::holds_alternative<int64_t>(*groups)) {
    return std::nullopt;
  }
  Depthwise d;
  std::optional<ValueId> x = tensor(g, n, "input"), w = tensor(g, n, "weight");
  if (!x || !w) return std::nullopt;
  d.x = *x;
  d.w = *w;
  if (std::optional<ValueId> b = tensor(g, n, "bias")) {
    d.bias = *b;
  } else {
    const graph::Arg* b_arg = node_arg(g, n, "bias");
    if (b_arg == nullptr || !std::holds_alternative<graph::NoneArg>(*b_arg)) return std::nullopt;
  }
  const graph::TensorType& xt = g.type(d.x);
  const graph::TensorType& wt = g.type(d.w);
  const graph::TensorType& yt = g.type(n.outputs[0]);
  std::optional<DType> dt = to_loop_dtype(xt.dtype);
  if (!dt || !loop::is_float(*dt) || wt.dtype != xt.dtype || yt.dtype != xt.dtype ||
      xt.dim() != 4 || wt.dim() != 4 || yt.dim() != 4 || !xt.is_static() || !wt.is_static() ||
      !yt.is_static()) {
    return std::nullopt;
  }
  const std::vector<int64_t> xs = sizes_of(xt), ws = sizes_of(wt), ys = sizes_of(yt);
  const int64_t channels = xs[1];
  if (channels <= 0 || std::get<int64_t>(*groups) != channels || ws[1] != 1 ||
      ws[0] % channels != 0 || ys[0] != xs[0] || ys[1] != ws[0]) {
    return std::nullopt;
  }
  d.multiplier = ws[0] / channels;
  if (d.bias >= 0) {
    const graph::TensorType& bt = g.type(d.bias);
    if (bt.dtype != xt.dtype || bt.dim() != 1 || !bt.is_static() || sizes_of(bt)[0] != ws[0]) {
      return std::nullopt;
    }
  }
  auto s = int_pair_arg(node_arg(g, n, "stride"));
  auto p = int_pair_arg(node_arg(g, n, "padding"));
  auto dil = int_pair_arg(node_arg(g, n, "dilation"));
  if (!s || !p || !dil) return std::nullopt;
  std::tie(d.sh, d.sw) = *s;
  std::tie(d.ph, d.pw) = *p;
  std::tie(d.dh, d.dw) = *dil;
  d.h = xs[2], d.wd = xs[3], d.kh = ws[2], d.kw = ws[3];
  if (d.kh <= 0 || d.kw <= 0 || d.kh * d.kw > kMaxDepthwiseWindow || d.sh <= 0 || d.sw <= 0 ||
      d.ph < 0 || d.pw < 0 || d.dh <= 0 || d.dw <= 0) {
    return std::nullopt;
  }
  // Eager's output size: (in + 2 pad - dilation (k - 1) - 1) / stride + 1.
  const int64_t oh = (d.h + 2 * d.ph - d.dh * (d.kh - 1) - 1) / d.sh + 1;
  const int64_t ow = (d.wd + 2 * d.pw - d.dw * (d.kw - 1) - 1) / d.sw + 1;
  if (oh <= 0 || ow <= 0 || ys[2] != oh || ys[3] != ow) return std::nullopt;
  return d;
}

}  // namespace

bool is_depthwise_convolution(const graph::Graph& g, const graph::Node& n) {
  return analyze(g, n).has_value();
}

int64_t depthwise_window(const graph::Graph& g, const graph::Node& n) {
  std::optional<Depthwise> d = analyze(g, n);
  return d ? d->kh * d->kw : 0;
}

loop::Expr lower_depthwise_convolution(const graph::Graph& g, const graph::Node& n,
                                       const Index& index, ElementReader& reader) {
  std::optional<Depthwise> d = analyze(g, n);
  EMBER_INTERNAL_ASSERT(d.has_value() && index.size() == 4)
      << "lower_depthwise_convolution of " << g.op_of(n).qualified_name();
  const DType dt = *to_loop_dtype(g.type(n.outputs[0]).dtype);
  const DType comp = float_compute_type(dt);
  const Expr oc = index[1];
  const Expr ic = d->multiplier == 1 ? oc : loop::FloorDiv::make(oc, loop::idx(d->multiplier));
  const Expr h0 = index[2] * d->sh - d->ph;  // the window's first row and column
  const Expr w0 = index[3] * d->sw - d->pw;
  Expr acc;
  for (int64_t i = 0; i < d->kh; ++i) {
    const Expr hi = h0 + i * d->dh;
    for (int64_t j = 0; j < d->kw; ++j) {
      const Expr wj = w0 + j * d->dw;
      const Expr inside = loop::And::make(
          loop::And::make(loop::LE::make(loop::idx(0), hi), loop::LT::make(hi, loop::idx(d->h))),
          loop::And::make(loop::LE::make(loop::idx(0), wj), loop::LT::make(wj, loop::idx(d->wd))));
      const Expr x = cast_to(comp, reader.element(d->x, {index[0], ic, hi, wj}, true));
      const Expr w = cast_to(
          comp, reader.element(d->w, {oc, loop::idx(0), loop::idx(i), loop::idx(j)}, false));
      const Expr term = loop::Select::make(inside, x * w, loop::FloatImm::make(comp, 0.0));
      acc = acc.defined() ? acc + term : term;
    }
  }
  if (d->bias >= 0) acc = acc + cast_to(comp, reader.element(d->bias, {oc}, false));
  return cast_to(dt, acc);
}

}  // namespace ember::sched
