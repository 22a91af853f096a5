#include "rewrite/pool_offsets.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/ops.h"
#include "support/error.h"
#include "tracer/trace_session.h"
#include "tracer/tracer_tensor.h"

namespace ember::rewrite {

using tracer::as_tracer;

namespace {

// The offsets (with their window) recorded for each pool's indices in one trace, by the indices'
// graph value.
struct PoolOffsets {
  std::unordered_map<graph::ValueId, std::pair<at::Tensor, PoolWindow>> by_indices;
};

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
  if (graph::op_kind(schema.name()) != graph::OpKind::max_pool2d_with_indices ||
      !schema.overload_name().empty() || args.size() != 6 || !args[0].isTensor()) {
    return std::nullopt;
  }
  const at::Tensor& x = args[0].toTensor();
  if (!x.defined() || as_tracer(x) == nullptr || (x.dim() != 3 && x.dim() != 4)) {
    return std::nullopt;
  }
  // Only where a backward may follow. Under no_grad nothing reads the indices, but the offsets
  // read them, and an op whose indices are read runs as ATen's kernel (writing int64 indices)
  // instead of a generated pool kernel: one more ATen call, and a slower inference.
  if (!at::GradMode::is_enabled()) return std::nullopt;
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

void note_pool_offsets(tracer::TraceSession& session, const at::Tensor& indices,
                       const PoolWindow& w) {
  tracer::TracerTensorImpl* t = as_tracer(indices);
  EMBER_INTERNAL_ASSERT(t != nullptr) << "max_pool2d_with_indices: indices not traced";
  session.rewrite_state<PoolOffsets>().by_indices.emplace(
      t->value(), std::make_pair(record_window_offsets(indices, w), w));
}

const std::pair<at::Tensor, PoolWindow>* pool_offsets_of(tracer::TraceSession& session,
                                                         const at::Tensor& indices) {
  tracer::TracerTensorImpl* t = as_tracer(indices);
  if (t == nullptr) return nullptr;
  const PoolOffsets& all = session.rewrite_state<PoolOffsets>();
  auto it = all.by_indices.find(t->value());
  return it == all.by_indices.end() ? nullptr : &it->second;
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

std::optional<at::Tensor> record_pool_backward_from_offsets(const at::Tensor& grad,
                                                            const at::Tensor& input,
                                                            const at::Tensor& offsets,
                                                            const PoolWindow& w) {
  if (w.dh != 1 || w.dw != 1 || grad.dim() != input.dim() || offsets.sizes() != grad.sizes()) {
    return std::nullopt;
  }
  const int64_t h_in = input.size(-2), w_in = input.size(-1);
  const int64_t oh_n = grad.size(-2), ow_n = grad.size(-1);
  const at::TensorOptions longs = grad.options().dtype(at::kLong);
  const at::Tensor rows = at::arange(h_in, longs).view({h_in, 1});
  const at::Tensor cols = at::arange(w_in, longs);
  const at::Tensor g32 = grad.to(at::kFloat);
  const at::Tensor off = offsets.to(at::kLong);
  // The candidate windows along one dim for positions `pos`: their clamped index, the position's
  // offset in each, and whether the window exists and holds the position.
  struct Candidate {
    at::Tensor index, k, ok;
  };
  auto candidates = [](const at::Tensor& pos, int64_t k, int64_t s, int64_t p, int64_t n) {
    std::vector<Candidate> out;
    const at::Tensor first = (pos + p).div(s, "floor");
    for (int64_t i = 0; i < (k + s - 1) / s; ++i) {
      const at::Tensor o = first - i;
      const at::Tensor in_window = pos + p - o * s;
      out.push_back({o.clamp(0, n - 1), in_window,
                     o.ge(0).logical_and(o.lt(n)).logical_and(in_window.lt(k))});
    }
    return out;
  };
  const std::vector<Candidate> rows_at = candidates(rows, w.kh, w.sh, w.ph, oh_n);
  const std::vector<Candidate> cols_at = candidates(cols, w.kw, w.sw, w.pw, ow_n);
  at::Tensor sum;
  for (const Candidate& r : rows_at) {
    for (const Candidate& c : cols_at) {
      c10::List<std::optional<at::Tensor>> where;
      for (int64_t d = 0; d < grad.dim() - 2; ++d) where.push_back(std::nullopt);
      where.push_back(r.index);
      where.push_back(c.index);
      const at::Tensor mine = at::index(off, where).eq(r.k * w.kw + c.k);
      const at::Tensor take = mine.logical_and(r.ok.logical_and(c.ok));
      const at::Tensor term = at::where(take, at::index(g32, where), at::zeros({}, g32.options()));
      sum = sum.defined() ? sum + term : term;
    }
  }
  return sum.to(input.scalar_type()).contiguous(input.suggest_memory_format());
}

}  // namespace ember::rewrite
