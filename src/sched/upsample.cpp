#include "sched/upsample.h"

#include <cmath>
#include <optional>
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

// How output rows (or columns) map to input rows.
struct Axis {
  int64_t in = 0, out = 0;
  // Nearest: source row (o * a) // b.
  int64_t a = 1, b = 1;
  // Bilinear: eager's f32 scale, and whether src is scale * o (align_corners).
  float scale = 0.0f;
  bool align_corners = false;
};

struct Upsample {
  bool bilinear = false;
  ValueId x = -1;
  Axis h, w;
};

std::optional<double> scale_arg(const graph::Arg* a) {
  if (a == nullptr) return std::nullopt;
  if (const auto* d = std::get_if<double>(a)) return *d;
  return std::nullopt;
}

// eager's compute_scales_value<float>: 1 / scale when one is given (> 0), else in / out.
float scales_value(std::optional<double> scale, int64_t in, int64_t out) {
  return scale.has_value() && *scale > 0.0 ? static_cast<float>(1.0 / *scale)
                                           : static_cast<float>(in) / static_cast<float>(out);
}

// The ratio a/b whose (o * a) // b is eager's nearest source row for every o, when there is one.
bool nearest_ratio(Axis& ax, std::optional<double> scale) {
  const float s = scales_value(scale, ax.in, ax.out);
  std::vector<int64_t> rows(static_cast<size_t>(ax.out));
  for (int64_t o = 0; o < ax.out; ++o) {
    // eager's nearest_idx (CUDA: nearest_neighbor_compute_source_index): the same formula; the
    // CPU's shortcuts for out == in and out == 2 * in are checked against it below.
    const float src = std::floor(static_cast<float>(o) * s);
    rows[static_cast<size_t>(o)] = std::min(static_cast<int64_t>(src), ax.in - 1);
    if (ax.out == ax.in && rows[static_cast<size_t>(o)] != o) return false;
    if (ax.out == 2 * ax.in && rows[static_cast<size_t>(o)] != (o >> 1)) return false;
  }
  std::vector<std::pair<int64_t, int64_t>> candidates = {{ax.in, ax.out}};
  if (scale.has_value() && *scale > 0.0) {
    const double r = 1.0 / *scale;
    for (int64_t q = 1; q <= 256; ++q) {
      const double p = std::round(r * static_cast<double>(q));
      if (p >= 0 && std::abs(r * static_cast<double>(q) - p) < 1e-9) {
        candidates.emplace_back(static_cast<int64_t>(p), q);
        break;
      }
    }
  }
  for (const auto& [a, b] : candidates) {
    bool ok = b > 0;
    for (int64_t o = 0; ok && o < ax.out; ++o) ok = (o * a) / b == rows[static_cast<size_t>(o)];
    if (ok) {
      ax.a = a;
      ax.b = b;
      return true;
    }
  }
  return false;
}

std::optional<Upsample> analyze(const graph::Graph& g, const graph::Node& n) {
  const graph::OpInfo& op = g.op_of(n);
  Upsample u;
  if (op.is(graph::OpKind::upsample_bilinear2d)) {
    u.bilinear = true;
  } else if (!op.is(graph::OpKind::upsample_nearest2d)) {
    return std::nullopt;
  }
  if (!op.overload.empty() || n.outputs.size() != 1) return std::nullopt;
  const graph::Arg* self = node_arg(g, n, "self");
  const auto* ref = self ? std::get_if<graph::ValueRef>(self) : nullptr;
  if (ref == nullptr) return std::nullopt;
  u.x = ref->id;
  const graph::TensorType& xt = g.type(u.x);
  const graph::TensorType& yt = g.type(n.outputs[0]);
  std::optional<DType> dt = to_loop_dtype(xt.dtype);
  if (!dt || !loop::is_float(*dt) || xt.dtype != yt.dtype || xt.dim() != 4 || yt.dim() != 4) {
    return std::nullopt;
  }
  // f64 interpolates in f64 in eager (its source coordinates too); the weights here are f32.
  if (u.bilinear && *dt == DType::Float64) return std::nullopt;
  for (const auto* t : {&xt, &yt}) {
    for (const graph::DimExpr& d : t->sizes) {
      if (!d.is_constant()) return std::nullopt;
    }
  }
  const std::vector<int64_t> xs = sizes_of(xt), ys = sizes_of(yt);
  if (xs[0] != ys[0] || xs[1] != ys[1] || xs[2] <= 0 || xs[3] <= 0 || ys[2] <= 0 || ys[3] <= 0) {
    return std::nullopt;
  }
  // Bilinear over rows contiguous in memory (NCHW) stays ATen's: the C++ kernels compute each
  // column's taps per element as scalar gathers (8x128x32x32 -> 64x64: 27.3 ms, eager 13.8).
  // Channels-last computes them once per pixel and runs over the channels in vector lanes.
  if (u.bilinear && xt.strides[3].is_constant() && xt.strides[3].constant() == 1 && xs[3] > 1) {
    return std::nullopt;
  }
  const graph::Arg* size_arg = node_arg(g, n, "output_size");
  const auto* size = size_arg ? std::get_if<std::vector<int64_t>>(size_arg) : nullptr;
  if (size == nullptr || *size != std::vector<int64_t>{ys[2], ys[3]}) return std::nullopt;
  const std::optional<double> sh = scale_arg(node_arg(g, n, "scales_h"));
  const std::optional<double> sw = scale_arg(node_arg(g, n, "scales_w"));
  u.h = {xs[2], ys[2]};
  u.w = {xs[3], ys[3]};
  if (!u.bilinear) {
    if (!nearest_ratio(u.h, sh) || !nearest_ratio(u.w, sw)) return std::nullopt;
    return u;
  }
  const graph::Arg* ac = node_arg(g, n, "align_corners");
  const auto* align = ac ? std::get_if<bool>(ac) : nullptr;
  if (align == nullptr) return std::nullopt;
  for (auto [ax, scale] : {std::pair{&u.h, sh}, std::pair{&u.w, sw}}) {
    ax->align_corners = *align;
    // eager's area_pixel_compute_scale<float>.
    ax->scale =
        *align ? (ax->out > 1 ? static_cast<float>(ax->in - 1) / static_cast<float>(ax->out - 1)
                              : 0.0f)
               : scales_value(scale, ax->in, ax->out);
  }
  return u;
}

Expr cast(DType t, Expr e) {
  return e.dtype() == t ? e : loop::Cast::make(t, std::move(e));
}

// Bilinear: the first source row, the second, and the second's weight, of output row `o`.
struct Taps {
  Expr i0, i1, l1;
};

Taps taps(const Axis& ax, const Expr& o) {
  const Expr s = loop::FloatImm::make(DType::Float32, static_cast<double>(ax.scale));
  const Expr of = cast(DType::Float32, o);
  Expr src;
  if (ax.align_corners) {
    src = s * of;
  } else {
    const Expr half = loop::FloatImm::make(DType::Float32, 0.5);
    src = loop::max(s * (of + half) - half, loop::FloatImm::make(DType::Float32, 0.0));
  }
  const Expr i0 = cast(loop::kIndexType, src);  // src >= 0: truncation is the floor
  const Expr i1 = loop::min(i0 + 1, loop::idx(ax.in - 1));
  return {i0, i1, src - cast(DType::Float32, i0)};
}

}  // namespace

bool is_upsample(const graph::Graph& g, const graph::Node& n) {
  return analyze(g, n).has_value();
}

int64_t upsample_reads(const graph::Graph& g, const graph::Node& n) {
  std::optional<Upsample> u = analyze(g, n);
  return u ? (u->bilinear ? 4 : 1) : 0;
}

loop::Expr lower_upsample(const graph::Graph& g, const graph::Node& n, const Index& index,
                          ElementReader& reader) {
  std::optional<Upsample> u = analyze(g, n);
  EMBER_INTERNAL_ASSERT(u.has_value()) << "lower_upsample of " << g.op_of(n).qualified_name();
  EMBER_INTERNAL_ASSERT(index.size() == 4) << "upsample index of rank " << index.size();
  const DType dt = *to_loop_dtype(g.type(u->x).dtype);
  auto at = [&](const Expr& h, const Expr& w) {
    Index i = index;
    i[2] = h;
    i[3] = w;
    return reader.element(u->x, i, false);
  };
  if (!u->bilinear) {
    auto row = [](const Axis& ax, const Expr& o) {
      if (ax.a == ax.b) return o;
      return loop::floordiv(o * ax.a, loop::idx(ax.b));
    };
    return at(row(u->h, index[2]), row(u->w, index[3]));
  }
  const DType comp = dt == DType::Float64 ? DType::Float64 : DType::Float32;
  const Taps th = taps(u->h, index[2]), tw = taps(u->w, index[3]);
  const Expr one = loop::FloatImm::make(DType::Float32, 1.0);
  const Expr h1 = cast(comp, th.l1), h0 = cast(comp, one - th.l1);
  const Expr w1 = cast(comp, tw.l1), w0 = cast(comp, one - tw.l1);
  auto x = [&](const Expr& h, const Expr& w) { return cast(comp, at(h, w)); };
  const Expr top = w0 * x(th.i0, tw.i0) + w1 * x(th.i0, tw.i1);
  const Expr bottom = w0 * x(th.i1, tw.i0) + w1 * x(th.i1, tw.i1);
  return cast(dt, h0 * top + h1 * bottom);
}

}  // namespace ember::sched
