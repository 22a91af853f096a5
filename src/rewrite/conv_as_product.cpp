#include "rewrite/conv_as_product.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <vector>

#include "graph/ops.h"

namespace ember::rewrite {

namespace {

bool all_equal(const c10::IValue& v, int64_t x) {
  if (!v.isIntList()) return false;
  for (int64_t e : v.toIntVector()) {
    if (e != x) return false;
  }
  return true;
}

}  // namespace

std::optional<at::Tensor> pointwise_convolution_as_product(const c10::OperatorHandle& op,
                                                           c10::ArrayRef<c10::IValue> args,
                                                           int64_t max_products) {
  // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
  //             groups)
  const c10::FunctionSchema& schema = op.schema();
  if (graph::op_kind(schema.name()) != graph::OpKind::convolution ||
      !schema.overload_name().empty() || args.size() != 9 || !args[0].isTensor() ||
      !args[1].isTensor() || !args[6].isBool() || args[6].toBool() || !args[8].isInt() ||
      args[8].toInt() != 1 || !all_equal(args[3], 1) || !all_equal(args[4], 0)) {
    return std::nullopt;
  }
  if (at::GradMode::is_enabled()) return std::nullopt;
  const at::Tensor& x = args[0].toTensor();
  const at::Tensor& w = args[1].toTensor();
  if (!x.defined() || !w.defined() || x.dim() != 4 || w.dim() != 4 || w.sym_size(2) != 1 ||
      w.sym_size(3) != 1 || w.sym_size(1) != x.sym_size(1)) {
    return std::nullopt;
  }
  const at::ScalarType t = x.scalar_type();
  if ((t != at::kBFloat16 && t != at::kHalf) || w.scalar_type() != t) return std::nullopt;
  std::optional<at::Tensor> bias;
  if (args[2].isTensor() && args[2].toTensor().defined()) {
    bias = args[2].toTensor();
    if (bias->dim() != 1 || bias->scalar_type() != t || bias->sym_size(0) != w.sym_size(0)) {
      return std::nullopt;
    }
  } else if (!args[2].isNone() && !args[2].isTensor()) {
    return std::nullopt;
  }
  // Channels-last as the convolution would see it: its rows [N * H * W, C] are a view.
  constexpr auto kCL = at::MemoryFormat::ChannelsLast;
  if (!x.is_contiguous(kCL) || x.suggest_memory_format() != kCL) return std::nullopt;
  const c10::SymInt n = x.sym_size(0), c = x.sym_size(1), h = x.sym_size(2), wd = x.sym_size(3);
  const c10::SymInt o = w.sym_size(0);
  if (max_products > 0) {
    if (!x.is_cuda()) return std::nullopt;
    // Over shape symbols: no (the templates are for static graphs).
    const std::optional<int64_t> macs = (n * h * wd * c * o).maybe_as_int();
    if (!macs.has_value() || *macs > max_products) return std::nullopt;
  }
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const at::Tensor rows = x.permute({0, 2, 3, 1}).reshape_symint({n * h * wd, c});
  const at::Tensor weight = w.reshape_symint({o, c});
  at::Tensor out = at::mm(rows, weight.t()).view_symint({n, h, wd, o}).permute({0, 3, 1, 2});
  if (bias) out = out.add(bias->view_symint({1, o, 1, 1}));
  return out;
}

}  // namespace ember::rewrite
