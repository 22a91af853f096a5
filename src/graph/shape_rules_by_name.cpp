/// \file
/// Symbolic shape rules of ops outside ember's op table, by qualified name, one class of ops each,
/// and of the backward ops a joint graph holds: each gradient has the sizes of what it is the
/// gradient of. Called by symbolic_result_types (shape_rules.cpp) after the table's rules.
#include <algorithm>
#include <initializer_list>

#include "graph/shape_rules_internal.h"
#include "sym/eval.h"

namespace ember::graph::shape_rules_detail {

std::optional<std::vector<TensorType>> rule_by_name(const Call& c) {
  auto one_of = [&](std::initializer_list<std::string_view> names) {
    return std::find(names.begin(), names.end(), c.op.name) != names.end();
  };
  if (one_of({"aten::floor_divide", "aten::remainder", "aten::fmod", "aten::copysign",
              "aten::xlogy", "aten::hypot"})) {
    return c.same_as_shape(broadcast(c, c.all_tensor_shapes()));
  }
  if (one_of({"aten::cumsum", "aten::cumprod", "aten::logcumsumexp", "aten::cummax", "aten::cummin",
              "aten::sort"})) {
    return c.same_as(c.tensor(0));
  }
  if (one_of({"aten::_adaptive_avg_pool2d", "aten::adaptive_max_pool2d",
              "aten::_adaptive_avg_pool3d", "aten::adaptive_max_pool3d"})) {
    // (self, output_size): the leading dims, then output_size.
    const TensorType& x = c.tensor(0);
    Dims out_size = c.dims(c.at(1));
    Dims sizes(x.sizes.begin(), x.sizes.end() - static_cast<std::ptrdiff_t>(out_size.size()));
    sizes.insert(sizes.end(), out_size.begin(), out_size.end());
    return c.same_as_shape(sizes);
  }
  if (one_of({"aten::topk"})) {
    // topk(self, k, dim=-1, ...): dim becomes k.
    const TensorType& s = c.tensor(0);
    Dims sizes = s.sizes;
    if (!sizes.empty()) {
      int64_t dim = c.args.size() > 2 ? c.integer(c.at(2)) : -1;
      sizes[static_cast<size_t>(wrap_dim(c, dim, s.dim()))] = c.dim(c.at(1));
    }
    return c.same_as_shape(sizes);
  }
  if (one_of({"aten::linalg_vector_norm", "aten::norm"})) {
    return c.same_as_shape(reduced(c, c.tensor(0), c.named("dim"), keepdim_of(c)));
  }
  if (one_of({"aten::mse_loss", "aten::l1_loss", "aten::smooth_l1_loss", "aten::huber_loss",
              "aten::soft_margin_loss", "aten::binary_cross_entropy"})) {
    // reduction: 0 none (the broadcast shape), else one value.
    const Arg* r = c.named("reduction");
    const int64_t* mode = r ? std::get_if<int64_t>(r) : nullptr;
    EMBER_INTERNAL_ASSERT(mode != nullptr) << c.name() << ": reduction";
    return c.same_as_shape(*mode == 0 ? broadcast(c, c.all_tensor_shapes()) : Dims{});
  }
  if (one_of({"aten::mv"})) {  // [n, m] @ [m]
    const TensorType &a = c.tensor(0), &v = c.tensor(1);
    c.require_equal(a.sizes.at(1), v.sizes.at(0), "inner size");
    return c.same_as_shape({a.sizes.at(0)});
  }
  if (one_of({"aten::dot", "aten::vdot"})) {  // [n] . [n]
    c.require_equal(c.tensor(0).sizes.at(0), c.tensor(1).sizes.at(0), "size");
    return c.same_as_shape({});
  }
  // ---- backward ops: each gradient has the sizes of what it is the gradient of
  if (one_of({"aten::native_layer_norm_backward"})) {
    // (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
    return c.by_slot({c.sizes_of(1), c.sizes_of(5), c.sizes_of(6)});
  }
  if (one_of({"aten::native_group_norm_backward"})) {
    // (grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask): weight's are [C]
    const Dims channel = {c.dim(c.at(6))};
    return c.by_slot({c.sizes_of(1), channel, channel});
  }
  if (one_of({"aten::native_batch_norm_backward"})) {
    // (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, ...)
    const TensorType& x = c.tensor(1);
    const Dims channel = {x.sizes.size() > 1 ? x.sizes[1] : DimExpr(1)};
    return c.by_slot({x.sizes, channel, channel});
  }
  if (one_of({"aten::convolution_backward"})) {
    // (grad_output, input, weight, bias_sizes, ...): input's, weight's, bias_sizes
    std::optional<Dims> bias;
    if (std::optional<Dims> b = dims_arg(c.at(3))) bias = *b;
    return c.by_slot({c.sizes_of(1), c.sizes_of(2), bias});
  }
  if (one_of({"aten::embedding_dense_backward"})) {
    // (grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
    const TensorType& grad = c.tensor(0);
    EMBER_INTERNAL_ASSERT(!grad.sizes.empty()) << c.name() << ": a 0-dim gradient";
    return c.same_as_shape({c.dim(c.at(2)), grad.sizes.back()});
  }
  if (one_of({"aten::nll_loss_backward",
              "aten::nll_loss2d_backward",
              "aten::mse_loss_backward",
              "aten::l1_loss_backward",
              "aten::smooth_l1_loss_backward",
              "aten::huber_loss_backward",
              "aten::soft_margin_loss_backward",
              "aten::binary_cross_entropy_backward",
              "aten::max_pool2d_with_indices_backward",
              "aten::max_pool3d_with_indices_backward",
              "aten::avg_pool2d_backward",
              "aten::avg_pool3d_backward",
              "aten::_adaptive_avg_pool2d_backward",
              "aten::_adaptive_avg_pool3d_backward",
              "aten::adaptive_max_pool2d_backward",
              "aten::adaptive_max_pool3d_backward",
              "aten::reflection_pad1d_backward",
              "aten::reflection_pad2d_backward",
              "aten::reflection_pad3d_backward",
              "aten::replication_pad1d_backward",
              "aten::replication_pad2d_backward",
              "aten::replication_pad3d_backward"})) {
    // (grad_output, self, ...): self's sizes
    return c.same_as(c.tensor(1));
  }
  if (one_of({"aten::select_backward", "aten::slice_backward", "aten::diagonal_backward",
              "aten::unfold_backward", "aten::as_strided_backward"})) {
    // (grad, input_sizes, ...)
    return c.same_as_shape(c.dims(c.at(1)));
  }
  if (one_of({"aten::upsample_nearest1d", "aten::upsample_nearest2d", "aten::upsample_nearest3d",
              "aten::_upsample_nearest_exact1d", "aten::_upsample_nearest_exact2d",
              "aten::_upsample_nearest_exact3d", "aten::upsample_linear1d",
              "aten::upsample_bilinear2d", "aten::upsample_bicubic2d", "aten::upsample_trilinear3d",
              "aten::_upsample_bilinear2d_aa", "aten::_upsample_bicubic2d_aa"}) &&
      c.op.overload.empty()) {
    // (self, output_size, ...): the batch and channel dims, then output_size (in the layout the
    // kernel keeps: the concrete strides' order).
    const TensorType& x = c.tensor(0);
    const Dims out_size = c.dims(c.at(1));
    EMBER_UNSUPPORTED(x.dim() == static_cast<int64_t>(out_size.size()) + 2)
        << c.name() << ": " << out_size.size() << " output sizes for rank " << x.dim();
    Dims sizes{x.sizes[0], x.sizes[1]};
    sizes.insert(sizes.end(), out_size.begin(), out_size.end());
    return c.same_as_shape(sizes);
  }
  if (one_of({"aten::upsample_nearest1d_backward", "aten::upsample_nearest2d_backward",
              "aten::upsample_nearest3d_backward", "aten::_upsample_nearest_exact1d_backward",
              "aten::_upsample_nearest_exact2d_backward",
              "aten::_upsample_nearest_exact3d_backward", "aten::upsample_linear1d_backward",
              "aten::upsample_bilinear2d_backward", "aten::upsample_bicubic2d_backward",
              "aten::upsample_trilinear3d_backward", "aten::_upsample_bilinear2d_aa_backward",
              "aten::_upsample_bicubic2d_aa_backward"})) {
    // (grad_output, output_size, input_size, ...): the input's sizes.
    return c.same_as_shape(c.dims(c.at(2)));
  }
  if (one_of({"aten::reflection_pad1d", "aten::reflection_pad2d", "aten::reflection_pad3d",
              "aten::replication_pad1d", "aten::replication_pad2d", "aten::replication_pad3d"})) {
    // (self, padding): padding (left, right) of the last dim first, then the dim before it; each
    // padded dim grows by its two pads.
    const TensorType& x = c.tensor(0);
    const Dims pad = c.dims(c.at(1));
    EMBER_UNSUPPORTED(pad.size() % 2 == 0 && pad.size() / 2 <= static_cast<size_t>(x.dim()))
        << c.name() << ": " << pad.size() << " pads for rank " << x.dim();
    Dims sizes = x.sizes;
    for (size_t k = 0; k < pad.size() / 2; ++k) {
      DimExpr& d = sizes[sizes.size() - 1 - k];
      d = c.simplify(d + pad[2 * k] + pad[2 * k + 1]);
    }
    return c.same_as_shape(sizes);
  }
  if (one_of({"aten::baddbmm"})) {
    // (self, batch1, batch2, ...): [b, n, p], with self broadcast against it.
    const TensorType& a = c.tensor(1);
    const TensorType& b = c.tensor(2);
    c.require_equal(a.sizes[0], b.sizes[0], "batch sizes");
    c.require_equal(a.sizes[2], b.sizes[1], "inner sizes");
    Dims out{a.sizes[0], a.sizes[1], b.sizes[2]};
    broadcast(c, {&c.tensor(0).sizes, &out});
    return c.same_as_shape(out);
  }
  if (one_of({"aten::pixel_shuffle", "aten::pixel_unshuffle"})) {
    // (self, factor r): [.., C, H, W] <-> [.., C / r^2, H * r, W * r]; C a constant.
    const TensorType& x = c.tensor(0);
    const int64_t r = c.integer(c.at(1));
    EMBER_UNSUPPORTED(x.dim() >= 3 && r >= 1) << c.name() << " of rank " << x.dim();
    Dims sizes = x.sizes;
    const size_t ch = sizes.size() - 3;
    EMBER_UNSUPPORTED(sizes[ch].is_constant()) << c.name() << " of symbolic channels";
    if (one_of({"aten::pixel_shuffle"})) {
      sizes[ch] = sizes[ch].constant() / (r * r);
      sizes[ch + 1] = c.simplify(sizes[ch + 1] * r);
      sizes[ch + 2] = c.simplify(sizes[ch + 2] * r);
    } else {
      sizes[ch] = sizes[ch].constant() * r * r;
      sizes[ch + 1] = c.simplify(floordiv(sizes[ch + 1], r));
      sizes[ch + 2] = c.simplify(floordiv(sizes[ch + 2], r));
    }
    return c.same_as_shape(sizes);
  }
  if ((one_of({"aten::median", "aten::nanmedian"}) && c.op.overload == "dim") ||
      (one_of({"aten::mode", "aten::kthvalue"}) && c.op.overload.empty())) {
    // (self, [k,] dim, keepdim): values and indices without dim (of size 1 when kept).
    const TensorType& x = c.tensor(0);
    const bool kth = one_of({"aten::kthvalue"});
    const size_t dim_at = kth ? 2 : 1;
    const int64_t d = wrap_dim(c, c.integer(c.at(dim_at)), x.dim());
    const bool* keep = c.args.size() > dim_at + 1 ? std::get_if<bool>(&c.at(dim_at + 1)) : nullptr;
    EMBER_UNSUPPORTED(keep != nullptr) << c.name() << ": keepdim";
    Dims sizes = x.sizes;
    if (!sizes.empty()) {
      if (*keep) {
        sizes[static_cast<size_t>(d)] = 1;
      } else {
        sizes.erase(sizes.begin() + d);
      }
    }
    return c.same_as_shape(sizes);
  }
  if (one_of({"aten::one_hot"})) {
    // (self, num_classes): self's sizes, then num_classes (a constant; -1 reads the data).
    const int64_t n = c.integer(c.at(1));
    EMBER_UNSUPPORTED(n >= 0) << c.name() << " with num_classes from the data";
    Dims sizes = c.tensor(0).sizes;
    sizes.push_back(n);
    return c.same_as_shape(sizes);
  }
  if (one_of({"aten::unfold"})) {
    // unfold(self, dimension, size, step): a view; dim d holds (L - size) // step + 1 windows
    // (L >= size, guarded: eager raises otherwise), each a new last dim of `size` elements.
    const TensorType& s = c.tensor(0);
    EMBER_UNSUPPORTED(s.dim() >= 1) << c.name() << " of a 0-dim tensor";
    const auto d = static_cast<size_t>(wrap_dim(c, c.integer(c.at(1)), s.dim()));
    const int64_t size = c.integer(c.at(2)), step = c.integer(c.at(3));
    EMBER_UNSUPPORTED(step > 0 && size >= 0) << c.name() << ": size " << size << ", step " << step;
    EMBER_UNSUPPORTED(c.decide(s.sizes[d], Rel::GE, size))
        << c.name() << ": a window of " << size << " over " << s.sizes[d].str();
    Dims sizes = s.sizes, strides = s.strides;
    sizes[d] = c.simplify(floordiv(s.sizes[d] - size, step) + 1);
    strides[d] = c.simplify(s.strides[d] * step);
    sizes.push_back(size);
    strides.push_back(s.strides[d]);
    return std::vector<TensorType>{c.view(0, sizes, strides, s.storage_offset)};
  }
  if (one_of({"aten::_scaled_dot_product_flash_attention",
              "aten::_scaled_dot_product_cudnn_attention"})) {
    // CUDA's flash and cuDNN attention over [B, H, L, E] queries: the output [B, H, L, Ev] (in
    // the layout the kernel picks: its concrete strides' order) and the log-sum-exp [B, H, L]
    // (cuDNN's may be [B, H, L, 1], or empty when not asked for); the lengths L and S come back
    // as ints (symbolic_int_results), the seeds and the unused results keep their types. A
    // debug mask [B, H, L, S] is not built.
    const TensorType& q = c.tensor(0);
    const TensorType& k = c.tensor(1);
    const TensorType& v = c.tensor(2);
    EMBER_UNSUPPORTED(q.dim() == 4 && k.dim() == 4 && v.dim() == 4)
        << c.name() << " of rank " << q.dim();
    const Arg* debug = c.named("return_debug_mask");
    EMBER_UNSUPPORTED(debug == nullptr || !std::holds_alternative<bool>(*debug) ||
                      !std::get<bool>(*debug))
        << c.name() << " with a debug mask";
    c.require_equal(q.sizes.back(), k.sizes.back(), "query and key widths");
    c.require_equal(k.sizes[2], v.sizes[2], "key and value lengths");
    Dims out = q.sizes;
    out.back() = v.sizes.back();
    std::vector<std::optional<Dims>> per{out};
    // The log-sum-exp, by the rank the meta kernel gave it; an empty one keeps its type.
    const size_t lse_at = 1;
    for (size_t i = 0; i < c.concrete.size(); ++i) {
      if ((c.slots.empty() ? i : static_cast<size_t>(c.slots[i])) != lse_at) continue;
      const Dims& seen = c.concrete[i].sizes;
      const bool empty =
          std::any_of(seen.begin(), seen.end(), [](const DimExpr& d) { return d == DimExpr(0); });
      if (empty) break;
      Dims lse{q.sizes[0], q.sizes[1], q.sizes[2]};
      if (seen.size() == 4) lse.push_back(1);
      per.push_back(lse);
    }
    return c.by_slot(per);
  }
  if (one_of({"aten::_scaled_dot_product_flash_attention_for_cpu_backward",
              "aten::_scaled_dot_product_efficient_attention_backward",
              "aten::_scaled_dot_product_flash_attention_backward",
              "aten::_scaled_dot_product_cudnn_attention_backward"})) {
    // (grad_out, query, key, value, ...): query's, key's, value's (then an attention bias's)
    std::vector<std::optional<Dims>> per = {c.sizes_of(1), c.sizes_of(2), c.sizes_of(3)};
    if (one_of({"aten::_scaled_dot_product_efficient_attention_backward"})) {
      per.push_back(c.sizes_of(4));
    }
    return c.by_slot(per);
  }
  return std::nullopt;
}

}  // namespace ember::graph::shape_rules_detail

namespace ember::graph {

std::vector<DimExpr> symbolic_int_results(const Graph& g, const OpInfo& op,
                                          const std::vector<Arg>& args,
                                          const std::vector<int64_t>& concrete) {
  std::vector<DimExpr> out;
  auto length = [&](size_t i) -> std::optional<DimExpr> {
    const auto* r = i < args.size() ? std::get_if<ValueRef>(&args[i]) : nullptr;
    if (r == nullptr || g.type(r->id).sizes.size() != 4) return std::nullopt;
    return g.type(r->id).sizes[2];
  };
  const std::initializer_list<std::string_view> attention = {
      "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_cudnn_attention"};
  if (std::find(attention.begin(), attention.end(), op.name) != attention.end()) {
    // (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, ...): over dense batches the
    // longest sequences are the query's and the key's lengths.
    std::optional<DimExpr> l = length(0), s = length(1);
    if (l && s) out = {*l, *s};
  }
  bool same = out.size() == concrete.size();
  for (size_t i = 0; same && i < out.size(); ++i) {
    same = sym::hint(out[i].expr(), g.symbols) == concrete[i];
  }
  EMBER_UNSUPPORTED(same) << op.qualified_name() << " returns an int computed from symbolic sizes";
  return out;
}

}  // namespace ember::graph
