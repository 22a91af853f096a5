#include "rewrite/split_reduction.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/ops.h"
#include "tracer/meta_cache.h"
#include "tracer/trace_session.h"
#include "tracer/tracer_tensor.h"

namespace ember::rewrite {

using tracer::as_tracer;
using tracer::call_meta_cached;
using tracer::TracerTensorImpl;

namespace {

// Splits are for CUDA, where a program per result leaves SMs idle. The option
// trace.splits_everywhere applies them on every device (the CPU tests run the rewritten graphs
// against eager). The rows of the table have this as their device predicate; the sums side by
// side that other rows record (the batch-norm backward's) check it here.
bool splits_on(const at::Tensor& x) {
  return x.device().is_cuda() || tracer::trace_options().splits_everywhere;
}

constexpr int64_t kMaxRows = 256;             // results: fewer than this, and the device idles
constexpr int64_t kMinRowElements = 1 << 16;  // elements per result worth splitting
constexpr int64_t kMinPartials = 1024;        // rows of the first stage
constexpr int64_t kMinChannelsPerGroup = 8;

std::optional<at::Tensor> optional_tensor(const c10::IValue& v) {
  if (v.isTensor() && v.toTensor().defined()) return v.toTensor();
  return std::nullopt;
}

bool split_group_norm(torch::jit::Stack* stack) {
  // aten::native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C,
  //                         SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)
  constexpr size_t kArgs = 8;
  const size_t base = stack->size() - kArgs;
  const c10::IValue& input = (*stack)[base];
  if (!input.isTensor()) return false;
  const at::Tensor x = input.toTensor();
  const std::optional<at::Tensor> weight = optional_tensor((*stack)[base + 1]);
  const std::optional<at::Tensor> bias = optional_tensor((*stack)[base + 2]);
  const int64_t n = (*stack)[base + 3].toInt();
  const int64_t c = (*stack)[base + 4].toInt();
  const int64_t hxw = (*stack)[base + 5].toInt();
  const int64_t g = (*stack)[base + 6].toInt();
  const double eps = (*stack)[base + 7].toDouble();
  if (!x.defined() || !x.is_contiguous() || g <= 0 || c % g != 0 || n * c * hxw != x.numel()) {
    return false;
  }
  const at::ScalarType dtype = x.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kBFloat16 && dtype != at::kHalf) {
    return false;
  }
  const int64_t d = c / g;
  const int64_t row = d * hxw;
  if (n * g >= kMaxRows || d < kMinChannelsPerGroup || row < kMinRowElements ||
      n * c < kMinPartials) {
    return false;
  }
  for (const auto& t : {weight, bias}) {
    if (t.has_value() && (t->dim() != 1 || t->size(0) != c)) return false;
  }
  // The ops below are recorded as they are: this runs below autograd already, and the caller's
  // autocast must not recast them (eager's kernel computes in the accumulation type).
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const at::ScalarType acc = dtype == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor xv = x.view({n, g, d, hxw});
  if (dtype != acc) xv = xv.to(acc);
  const double inv_row = 1.0 / static_cast<double>(row);
  at::Tensor mean = xv.sum(-1).sum(-1).mul(inv_row);  // [n, g]
  at::Tensor dev = xv.sub(mean.view({n, g, 1, 1}));
  at::Tensor var = dev.mul(dev).sum(-1).sum(-1).mul(inv_row);
  at::Tensor rstd = var.add(eps).rsqrt();  // [n, g]
  // Per (sample, channel): a = rstd * w, b = bias - a * mean; out = x * a + b.
  at::Tensor a = rstd.view({n, g, 1}).expand({n, g, d}).reshape({n, c});
  at::Tensor m = mean.view({n, g, 1}).expand({n, g, d}).reshape({n, c});
  if (weight.has_value()) a = a.mul(weight->to(acc).view({1, c}));
  at::Tensor b = a.mul(m).neg();
  if (bias.has_value()) b = b.add(bias->to(acc).view({1, c}));
  at::Tensor out = x.view({n, c, hxw}).to(acc).mul(a.view({n, c, 1})).add(b.view({n, c, 1}));
  out = out.to(dtype).view(x.sizes());
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, std::move(out), mean.to(dtype), rstd.to(dtype));
  return true;
}

// The split of `r` elements per row into s partials of r / s: s divides r, the partials give
// enough programs (rows * s >= kMinPartials) and each is long enough to be worth a program.
std::optional<int64_t> split_factor(int64_t rows, int64_t r) {
  for (int64_t s = 4096; s >= 32; --s) {
    if (r % s == 0 && rows * s >= kMinPartials && r / s >= 256) return s;
  }
  return std::nullopt;
}

// Reductions over leading dims (columns): `x.sum(0)` of a [8192, 768] gradient (a linear layer's
// bias gradient), the per-channel sums of a channels-last activation. The scheduler's column
// kernel runs one program per tile of 256 kept elements, each over every row: 3 programs for
// the bias gradient, 1 for 64 channels, where the H200 has 132 SMs.
constexpr int64_t kColumnTile = 256;         // kept elements per program of a column kernel
constexpr int64_t kMaxColumnPrograms = 128;  // fewer programs than this: split
constexpr int64_t kMinColumnRows = 256;      // rows worth splitting
constexpr int64_t kMinColumnElements = 1 << 16;
constexpr int64_t kColumnPrograms = 1024;  // the first stage's programs, about
constexpr int64_t kMinRowsPerPartial = 32;

// The dims of a non-overlapping and dense `x` from the largest stride to the smallest (size-1
// dims first, ties by index): permuted by it, x is contiguous.
std::vector<int64_t> memory_order(const at::Tensor& x) {
  std::vector<int64_t> order(static_cast<size_t>(x.dim()));
  for (int64_t d = 0; d < x.dim(); ++d) order[static_cast<size_t>(d)] = d;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const bool one_a = x.size(a) == 1, one_b = x.size(b) == 1;
    if (one_a != one_b) return one_a;
    return !one_a && x.stride(a) > x.stride(b);
  });
  return order;
}

// How `x`'s dims fall in memory order: [batch kept][outer reduced][kept][inner reduced], size-1
// dims aside. The batch is a kept run before the reduced one (the batch of a global average pool
// over a channels-last activation, [N][H W][C]); without one, the leading kept run is `kept`
// ([N C][H W], a row reduction; [H W][C], a column one). nullopt when the dims fall otherwise,
// or nothing is kept or reduced.
struct ColumnShape {
  std::vector<int64_t> order;  // memory order (size-1 dims first)
  int64_t batch = 1, outer = 1, kept = 1, inner = 1;
};

std::optional<ColumnShape> column_shape(const at::Tensor& x, const std::vector<bool>& reduced) {
  if (x.dim() == 0 || !x.is_non_overlapping_and_dense()) return std::nullopt;
  ColumnShape shape;
  shape.order = memory_order(x);
  // Runs of kept and reduced dims in memory order, each with its number of elements.
  std::vector<std::pair<bool, int64_t>> runs;
  for (int64_t d : shape.order) {
    const int64_t size = x.size(d);
    if (size == 1) continue;
    const bool r = reduced[static_cast<size_t>(d)];
    if (runs.empty() || runs.back().first != r) runs.emplace_back(r, 1);
    runs.back().second *= size;
  }
  size_t i = 0;
  const auto take = [&](bool r) {
    return i < runs.size() && runs[i].first == r ? runs[i++].second : 1;
  };
  if (runs.size() >= 3 && !runs[0].first) shape.batch = take(false);
  shape.outer = take(true);
  shape.kept = take(false);
  shape.inner = take(true);
  if (i != runs.size() || shape.kept == 1 || shape.outer * shape.inner == 1) return std::nullopt;
  return shape;
}

// The number of partials for `rows` rows of `kept` columns, `batch` times: a divisor of rows,
// about kColumnPrograms programs of kColumnTile columns, at least kMinRowsPerPartial rows each.
std::optional<int64_t> column_split_factor(int64_t batch, int64_t rows, int64_t kept) {
  const int64_t tiles = batch * ((kept + kColumnTile - 1) / kColumnTile);
  const int64_t target =
      std::min(rows / kMinRowsPerPartial, std::max<int64_t>(8, kColumnPrograms / tiles));
  for (int64_t s = target; s >= std::max<int64_t>(4, target / 8); --s) {
    if (rows % s == 0) return s;
  }
  return std::nullopt;
}

// The sums of each of `xs` (one shape and layout) over `reduced` in `acc` (the kept dims in x's
// order, or ones where keepdim), as sums over the inner reduced run (rows) and then over the
// outer one (columns, split in partials when long), for each element of the batch. Stage by stage
// for all of them, so that the sums of one stage are adjacent in the graph and the scheduler folds
// them into one kernel (Note [Sibling reductions] in sched/reduction_fusion.cpp). Requires
// column_shape(x, reduced).
std::vector<at::Tensor> sums_in_stages(std::vector<at::Tensor> xs, const std::vector<bool>& reduced,
                                       const ColumnShape& shape, at::ScalarType acc, bool keepdim) {
  const at::Tensor x = xs.at(0);
  bool identity = true;
  for (size_t i = 0; i < shape.order.size(); ++i) identity &= shape.order[i] == int64_t(i);
  // Shapes with the batch in front, where there is one (so that the sums are over `d + b`).
  const int64_t b = shape.batch > 1 ? 1 : 0;
  const auto batched = [&](std::vector<int64_t> sizes) {
    if (b) sizes.insert(sizes.begin(), shape.batch);
    return sizes;
  };
  const auto reshaped = [](const at::Tensor& y, const std::vector<int64_t>& sizes) {
    return y.sizes() == c10::IntArrayRef(sizes) ? y : y.reshape(sizes);
  };
  for (at::Tensor& y : xs) {
    if (!identity) y = y.permute(shape.order);
    y = shape.inner > 1
            ? reshaped(y, batched({shape.outer, shape.kept, shape.inner})).sum(-1, false, acc)
            : reshaped(y, batched({shape.outer, shape.kept}));  // [batch,] outer, kept
  }
  const std::optional<int64_t> s = shape.outer >= kMinColumnRows
                                       ? column_split_factor(shape.batch, shape.outer, shape.kept)
                                       : std::nullopt;
  if (s) {
    // [batch,] s, kept partials, summed side by side again (split once more when they are many;
    // each split divides the rows by at least kMinRowsPerPartial, so this ends).
    for (at::Tensor& y : xs) {
      y = y.view(batched({*s, shape.outer / *s, shape.kept})).sum(1 + b, false, acc);
    }
    xs = record_sums_side_by_side(std::move(xs), {b}, acc);
  } else {
    // No split (rows too few, or no divisor): one column sum each.
    for (at::Tensor& y : xs) y = y.sum(b, false, acc);
  }
  // [batch,] kept -> the kept dims in x's order: their sizes in memory order, then permuted.
  std::vector<int64_t> kept_dims, kept_sizes;
  for (int64_t d : shape.order) {
    if (!reduced[static_cast<size_t>(d)]) {
      kept_dims.push_back(d);
      kept_sizes.push_back(x.size(d));
    }
  }
  for (at::Tensor& y : xs) {
    if (y.sizes() != c10::IntArrayRef(kept_sizes)) y = y.view(kept_sizes);
    if (kept_sizes.size() != 1) {
      std::vector<int64_t> perm(kept_dims.size());
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
      std::sort(perm.begin(), perm.end(),
                [&](int64_t a, int64_t b) { return kept_dims[a] < kept_dims[b]; });
      if (!std::is_sorted(perm.begin(), perm.end())) y = y.permute(perm).contiguous();
    }
    if (keepdim) {
      for (int64_t d = 0; d < x.dim(); ++d) {
        if (reduced[static_cast<size_t>(d)]) y = y.unsqueeze(d);
      }
    }
  }
  return xs;
}

at::Tensor sum_in_stages(const at::Tensor& x, const std::vector<bool>& reduced,
                         const ColumnShape& shape, at::ScalarType acc, bool keepdim) {
  return sums_in_stages({x}, reduced, shape, acc, keepdim)[0];
}

// Whether the scheduler's kernel for this sum would leave the device idle: a column kernel
// (kept dims innermost) with few tiles over all batches, or one program per kept element over
// strided rows.
bool column_reduction_worth_splitting(const ColumnShape& shape) {
  if (shape.batch * shape.outer * shape.kept * shape.inner < kMinColumnElements) return false;
  if (shape.inner == 1) {
    // Without a split factor (no divisor of the rows) the sum would be recorded as it is: not
    // worth it, and a sum recorded here comes back here.
    return shape.outer >= kMinColumnRows &&
           shape.batch * ((shape.kept + kColumnTile - 1) / kColumnTile) < kMaxColumnPrograms &&
           column_split_factor(shape.batch, shape.outer, shape.kept).has_value();
  }
  return shape.outer > 1 && shape.batch * shape.kept < kMaxColumnPrograms * 8;
}

bool split_simple_reduction(const c10::FunctionSchema& schema, torch::jit::Stack* stack) {
  // aten::sum(self, *, dtype), aten::sum.dim_IntList(self, dim, keepdim, *, dtype),
  // aten::mean(self, *, dtype), aten::mean.dim(self, dim, keepdim, *, dtype),
  // aten::amax(self, dim, keepdim), aten::amin(self, dim, keepdim).
  using graph::OpKind;
  const OpKind kind = graph::op_kind(schema.name());
  const std::string& overload = schema.overload_name();
  const bool is_sum = kind == OpKind::sum, is_mean = kind == OpKind::mean;
  const bool is_max = kind == OpKind::amax, is_min = kind == OpKind::amin;
  const bool full = (is_sum || is_mean) && overload.empty();
  if (!((is_sum && (overload.empty() || overload == "dim_IntList")) ||
        (is_mean && (overload.empty() || overload == "dim")) ||
        ((is_max || is_min) && overload.empty()))) {
    return false;
  }
  const size_t num_args = schema.arguments().size();
  const size_t base = stack->size() - num_args;
  const c10::IValue& self = (*stack)[base];
  if (!self.isTensor()) return false;
  const at::Tensor x = self.toTensor();
  if (!x.defined() || x.dim() == 0) return false;
  const at::ScalarType dtype = x.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kBFloat16 && dtype != at::kHalf) {
    return false;
  }
  const int64_t rank = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), full);
  bool keepdim = false;
  std::optional<at::ScalarType> out_dtype;
  if (!full) {
    const c10::IValue& dims = (*stack)[base + 1];
    if (!dims.isIntList()) return false;
    std::vector<int64_t> list = dims.toIntVector();
    if (list.empty()) reduced.assign(reduced.size(), true);  // every dim
    for (int64_t d : list) {
      if (d < -rank || d >= rank) return false;
      const size_t w = static_cast<size_t>(d < 0 ? d + rank : d);
      if (reduced[w]) return false;  // named twice: the op itself raises
      reduced[w] = true;
    }
    if (!(*stack)[base + 2].isBool()) return false;
    keepdim = (*stack)[base + 2].toBool();
  }
  if (is_sum || is_mean) {
    const c10::IValue& d = (*stack)[base + num_args - 1];
    if (d.isInt()) out_dtype = static_cast<at::ScalarType>(d.toInt());
    if (out_dtype && !at::isFloatingType(*out_dtype)) return false;
  }
  if ((is_sum || is_mean) && !full) {
    const std::optional<ColumnShape> shape = column_shape(x, reduced);
    if (shape && column_reduction_worth_splitting(*shape)) {
      const at::ScalarType result = out_dtype.value_or(dtype);
      const at::ScalarType acc =
          dtype == at::kDouble || result == at::kDouble ? at::kDouble : at::kFloat;
      c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
      at::Tensor out = sum_in_stages(x, reduced, *shape, acc, keepdim);
      if (is_mean) {
        out = out.mul(1.0 / static_cast<double>(shape->outer * shape->inner));
      }
      out = out.to(result);
      torch::jit::drop(*stack, num_args);
      torch::jit::push(*stack, std::move(out));
      return true;
    }
  }
  if (!x.is_contiguous()) return false;
  // The reduced dims must be the trailing ones: each row's elements are then one run.
  int64_t first = rank;
  while (first > 0 && reduced[static_cast<size_t>(first - 1)]) --first;
  for (int64_t d = 0; d < first; ++d) {
    if (reduced[static_cast<size_t>(d)]) return false;
  }
  int64_t rows = 1, r = 1;
  for (int64_t d = 0; d < rank; ++d) (d < first ? rows : r) *= x.size(d);
  if (rows >= kMaxRows || r < (int64_t{1} << 18)) return false;
  std::optional<int64_t> s = split_factor(rows, r);
  if (!s) return false;
  std::vector<int64_t> out_sizes(x.sizes().begin(), x.sizes().begin() + first);
  if (keepdim) out_sizes.resize(static_cast<size_t>(rank), 1);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  at::Tensor parts = x.view({rows, *s, r / *s});
  at::Tensor out;
  if (is_max || is_min) {
    out = is_max ? parts.amax(-1).amax(-1) : parts.amin(-1).amin(-1);
  } else {
    const at::ScalarType result = out_dtype.value_or(dtype);
    const at::ScalarType acc =
        dtype == at::kDouble || result == at::kDouble ? at::kDouble : at::kFloat;
    out = parts.sum(-1, false, acc).sum(-1);
    if (is_mean) out = out.mul(1.0 / static_cast<double>(r));
    out = out.to(result);
  }
  out = out.reshape(out_sizes);
  torch::jit::drop(*stack, num_args);
  torch::jit::push(*stack, std::move(out));
  return true;
}

// Training batch norm on CUDA (`_native_batch_norm_legit_functional`, what the tracer records
// for nn.BatchNorm2d in training): per-channel statistics over every dim but 1. The scheduler's
// kernel for it is a column reduction over all N x H x W rows of a channels-last input, one
// program per 256 channels: a few programs for the whole device (f32 runs cuDNN's kernel
// instead). Recorded as sums in stages:
//   d      = x - k[c]                             k = x[0, :, 0, 0], in f32 (f64 for f64)
//   s1, s2 = sum(d), sum(d * d)                   one pass: side by side, one kernel per stage
//   mean   = k + s1 / R                           R = N * H * W
//   var    = max(s2 / R - (s1 / R)^2, 0)
//   dev    = x - mean[c]
//   invstd = rsqrt(var + eps)
//   out    = dev * (invstd * w)[c] + b[c]          eager's form, rounded once to x's dtype
//   running_mean' = running_mean * (1 - m) + mean * m
//   running_var'  = running_var * (1 - m) + var * R / (R - 1) * m
// with save_mean and save_invstd in the dtype the op's meta kernel gives them.
// From kMinColumnRows rows on: at 784 rows of 512 channels (ResNet-18's last stage, batch 16)
// the unsplit kernel runs 4 programs, too few to read its 1.6 MB at the device's bandwidth.
constexpr int64_t kMinBatchNormRows = kMinColumnRows;

bool split_batch_norm_training(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  constexpr size_t kArgs = 8;
  const size_t base = stack->size() - kArgs;
  const c10::IValue& input = (*stack)[base];
  const c10::IValue& rm_arg = (*stack)[base + 3];
  const c10::IValue& rv_arg = (*stack)[base + 4];
  if (!input.isTensor() || !rm_arg.isTensor() || !rv_arg.isTensor() ||
      !(*stack)[base + 5].isBool() || !(*stack)[base + 5].toBool()) {
    return false;
  }
  const at::Tensor x = input.toTensor();
  const at::Tensor rm = rm_arg.toTensor(), rv = rv_arg.toTensor();
  TracerTensorImpl* tracer = as_tracer(x);
  if (tracer == nullptr || tracer->session() == nullptr || x.dim() < 2) {
    return false;
  }
  const at::ScalarType dtype = x.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble && dtype != at::kBFloat16 && dtype != at::kHalf) {
    return false;
  }
  const int64_t c = x.size(1);
  const std::optional<at::Tensor> weight = optional_tensor((*stack)[base + 1]);
  const std::optional<at::Tensor> bias = optional_tensor((*stack)[base + 2]);
  for (const auto& t :
       {weight, bias, std::optional<at::Tensor>(rm), std::optional<at::Tensor>(rv)}) {
    if (t.has_value() && (t->dim() != 1 || t->size(0) != c || t->device() != x.device())) {
      return false;
    }
  }
  std::vector<bool> reduced(static_cast<size_t>(x.dim()), true);
  reduced[1] = false;
  const std::optional<ColumnShape> shape = column_shape(x, reduced);
  if (!shape || shape->outer * shape->inner < kMinBatchNormRows) return false;
  const int64_t r = shape->outer * shape->inner;
  const double momentum = (*stack)[base + 6].toDouble();
  const double eps = (*stack)[base + 7].toDouble();

  // The results' dtypes, from the op's meta kernel (save_mean and save_invstd are f32 for a
  // bf16 input on CUDA).
  std::vector<at::ScalarType> dtypes;
  {
    torch::jit::Stack meta(stack->begin() + static_cast<std::ptrdiff_t>(base), stack->end());
    for (c10::IValue& v : meta) {
      if (v.isTensor()) {
        if (TracerTensorImpl* t = as_tracer(v.toTensor())) v = t->meta();
      }
    }
    c10::impl::ForceDispatchKeyGuard untraced(tracer->session()->outer_tls());
    call_meta_cached(op, meta);
    if (meta.size() != 5) return false;
    for (const c10::IValue& v : meta) dtypes.push_back(v.toTensor().scalar_type());
  }

  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const at::ScalarType acc = dtype == at::kDouble ? at::kDouble : at::kFloat;
  std::vector<int64_t> per_channel(static_cast<size_t>(x.dim()), 1);
  per_channel[1] = c;
  const double inv_r = 1.0 / static_cast<double>(r);
  // One pass over x for both statistics: sums of d = x - k and d^2 around a shift k per channel
  // (the channel's first element), var = mean(d^2) - mean(d)^2. With k a sample of the channel,
  // mean(d) is of the order of the deviation, so the difference cancels few bits (a plain
  // E[x^2] - E[x]^2 cancels all of them when the mean is large against the deviation).
  at::Tensor k = x;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d != 1) k = k.narrow(d, 0, 1);
  }
  at::Tensor d = x.to(acc).sub(k.to(acc));
  std::vector<at::Tensor> sums = sums_in_stages({d, d.mul(d)}, reduced, *shape, acc, false);
  at::Tensor shift = sums[0].mul(inv_r);  // mean(d)
  at::Tensor mean = shift.add(k.to(acc).reshape({c}));
  at::Tensor var = sums[1].mul(inv_r).sub(shift.mul(shift)).clamp_min(0);
  at::Tensor dev = x.to(acc).sub(mean.view(per_channel));
  at::Tensor invstd = var.add(eps).rsqrt();
  at::Tensor a = weight.has_value() ? invstd.mul(weight->to(acc)) : invstd;
  at::Tensor out = dev.mul(a.view(per_channel));
  if (bias.has_value()) out = out.add(bias->to(acc).view(per_channel));
  out = out.to(dtype);
  const double unbias = static_cast<double>(r) / static_cast<double>(std::max<int64_t>(r - 1, 1));
  at::Tensor new_rm = rm.to(acc).mul(1.0 - momentum).add(mean.mul(momentum)).to(rm.scalar_type());
  at::Tensor new_rv =
      rv.to(acc).mul(1.0 - momentum).add(var.mul(unbias * momentum)).to(rv.scalar_type());
  torch::jit::drop(*stack, kArgs);
  torch::jit::push(*stack, std::move(out), mean.to(dtypes[1]), invstd.to(dtypes[2]),
                   std::move(new_rm), std::move(new_rv));
  return true;
}

}  // namespace

std::vector<at::Tensor> record_sums_side_by_side(std::vector<at::Tensor> xs,
                                                 const std::vector<int64_t>& dims,
                                                 at::ScalarType acc) {
  const at::Tensor& x = xs.at(0);
  const int64_t rank = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t d : dims) reduced[static_cast<size_t>(d < 0 ? d + rank : d)] = true;
  bool same_layout = true;
  for (const at::Tensor& y : xs) {
    same_layout &= y.sizes() == x.sizes() && y.strides() == x.strides();
  }
  if (same_layout && splits_on(x) && rank > 0) {
    const std::optional<ColumnShape> shape = column_shape(x, reduced);
    if (shape && column_reduction_worth_splitting(*shape)) {
      c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
      return sums_in_stages(std::move(xs), reduced, *shape, acc, false);
    }
  }
  for (at::Tensor& y : xs) y = y.sum(dims, false, acc);
  return xs;
}

bool record_split_reduction(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const graph::OpKind kind = graph::op_kind(schema.name());
  if (kind == graph::OpKind::native_group_norm && schema.overload_name().empty() &&
      schema.arguments().size() == 8 && stack->size() >= 8) {
    return split_group_norm(stack);
  }
  if (kind == graph::OpKind::_native_batch_norm_legit_functional &&
      schema.overload_name().empty() && schema.arguments().size() == 8 && stack->size() >= 8) {
    return split_batch_norm_training(op, stack);
  }
  if (stack->size() >= schema.arguments().size()) return split_simple_reduction(schema, stack);
  return false;
}

}  // namespace ember::rewrite
