#include "tracer/pool_offsets.h"

#include <ATen/ATen.h>

#include "tracer/split_reduction.h"
#include "tracer/tracer_tensor.h"

namespace ember::tracer {

namespace {

// Two values of an int[2] argument: one value stands for both; empty gives `fallback`.
std::optional<std::pair<int64_t, int64_t>> pair_of(const c10::IValue& v,
                                                   std::pair<int64_t, int64_t> fallback) {
  if (!v.isIntList()) return std::nullopt;
  const std::vector<int64_t> xs = v.toIntVector();
  if (xs.empty()) return fallback;
  if (xs.size() == 1) return std::make_pair(xs[0], xs[0]);
  if (xs.size() == 2) return std::make_pair(xs[0], xs[1]);
  return std::nullopt;
}

// Output rows and columns as int64 [OH, 1] and [OW] (broadcast over the leading dims).
std::pair<at::Tensor, at::Tensor> output_positions(const at::Tensor& like) {
  const int64_t oh = like.size(-2), ow = like.size(-1);
  const at::TensorOptions opts = like.options().dtype(at::kLong);
  return {at::arange(oh, opts).view({oh, 1}), at::arange(ow, opts)};
}

}  // namespace

std::optional<PoolWindow> offsets_window(const c10::OperatorHandle& op,
                                         c10::ArrayRef<c10::IValue> args) {
  // max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[],
  //                         int[2] padding=0, int[2] dilation=1, bool ceil_mode=False)
  const c10::FunctionSchema& schema = op.schema();
  if (schema.name() != "aten::max_pool2d_with_indices" || !schema.overload_name().empty() ||
      args.size() != 6 || !args[0].isTensor()) {
    return std::nullopt;
  }
  const at::Tensor& x = args[0].toTensor();
  if (!x.defined() || as_tracer(x) == nullptr || (x.dim() != 3 && x.dim() != 4) || !splits_on(x)) {
    return std::nullopt;
  }
  auto k = pair_of(args[1], {1, 1});
  if (!k || args[1].toIntVector().empty()) return std::nullopt;
  auto s = pair_of(args[2], *k);
  auto p = pair_of(args[3], {0, 0});
  auto d = pair_of(args[4], {1, 1});
  if (!s || !p || !d || k->first * k->second > 127 || k->first < 1 || k->second < 1 ||
      s->first < 1 || s->second < 1 || d->first < 1 || d->second < 1) {
    return std::nullopt;
  }
  PoolWindow w;
  w.kh = k->first, w.kw = k->second, w.sh = s->first, w.sw = s->second;
  w.ph = p->first, w.pw = p->second, w.dh = d->first, w.dw = d->second;
  w.width = x.size(-1);
  return w;
}

at::Tensor record_window_offsets(const at::Tensor& indices, const PoolWindow& w) {
  auto [oh, ow] = output_positions(indices);
  const at::Tensor h = indices.div(w.width, "floor");
  const at::Tensor col = indices - h * w.width;
  at::Tensor kh = h - (oh * w.sh - w.ph);
  at::Tensor kw = col - (ow * w.sw - w.pw);
  if (w.dh != 1) kh = kh.div(w.dh, "floor");
  if (w.dw != 1) kw = kw.div(w.dw, "floor");
  return (kh * w.kw + kw).to(at::kChar);
}

at::Tensor record_indices_from_offsets(const at::Tensor& offsets, const PoolWindow& w) {
  auto [oh, ow] = output_positions(offsets);
  const at::Tensor off = offsets.to(at::kLong);
  const at::Tensor kh = off.div(w.kw, "floor");
  const at::Tensor kw = off - kh * w.kw;
  const at::Tensor h = oh * w.sh - w.ph + kh * w.dh;
  const at::Tensor col = ow * w.sw - w.pw + kw * w.dw;
  return h * w.width + col;
}

}  // namespace ember::tracer
