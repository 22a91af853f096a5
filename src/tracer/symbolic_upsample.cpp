#include "tracer/symbolic_upsample.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cmath>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "support/error.h"

namespace ember::tracer {

namespace {

// The `.vec` overloads this file decomposes; each has (input, output_size, [align_corners,]
// scale_factors) and a default overload (input, output_size, [align_corners,] one scale per
// spatial dim).
constexpr const char* kUpsampleOps[] = {
    "aten::upsample_nearest1d",        "aten::upsample_nearest2d",
    "aten::upsample_nearest3d",        "aten::_upsample_nearest_exact1d",
    "aten::_upsample_nearest_exact2d", "aten::_upsample_nearest_exact3d",
    "aten::upsample_linear1d",         "aten::upsample_bilinear2d",
    "aten::upsample_bicubic2d",        "aten::upsample_trilinear3d",
    "aten::_upsample_bilinear2d_aa",   "aten::_upsample_bicubic2d_aa",
};

// `size * scale` truncated to an integer, as torch's compute_output_size casts the double
// product: a number for a constant size, else (size * p) // 2^k for a dyadic scale p / 2^k.
c10::SymInt scaled(const c10::SymInt& size, double scale, const std::string& op) {
  if (std::optional<int64_t> v = size.maybe_as_int()) {
    return c10::SymInt(static_cast<int64_t>(static_cast<double>(*v) * scale));
  }
  for (int64_t q = 1; q <= (int64_t{1} << 20); q *= 2) {
    const double p = scale * static_cast<double>(q);
    if (scale > 0 && p == std::floor(p) && p < 9.0e15) {
      return size * c10::SymInt(static_cast<int64_t>(p)) / c10::SymInt(q);
    }
  }
  EMBER_UNSUPPORTED(false) << op << ": a scale factor of " << scale
                           << " over a symbolic size (only p / 2^k is exact)";
  return size;
}

void upsample_vec(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t n = schema.arguments().size();
  const size_t base = stack->size() - n;
  auto arg = [&](const char* name) -> c10::IValue& {
    std::optional<int> i = schema.argumentIndexWithName(name);
    EMBER_INTERNAL_ASSERT(i.has_value()) << schema.name() << " has no argument " << name;
    return (*stack)[base + static_cast<size_t>(*i)];
  };
  const at::Tensor input = arg("input").toTensor();
  const int64_t spatial = input.dim() - 2;
  EMBER_UNSUPPORTED(spatial >= 1) << schema.name() << " of a " << input.dim() << "-dim input";
  const c10::IValue& size_arg = arg("output_size");
  const c10::IValue& scale_arg = arg("scale_factors");
  EMBER_CHECK(size_arg.isNone() != scale_arg.isNone())
      << schema.name() << ": must specify exactly one of output_size and scale_factors";
  std::vector<c10::SymInt> osize;
  std::vector<std::optional<double>> scales(static_cast<size_t>(spatial));
  if (!size_arg.isNone()) {
    osize = size_arg.toSymIntVector();
    EMBER_CHECK(static_cast<int64_t>(osize.size()) == spatial)
        << schema.name() << ": output_size of " << osize.size() << " sizes for " << spatial
        << " spatial dims";
  } else {
    const std::vector<double> factors = scale_arg.toDoubleVector();
    EMBER_CHECK(static_cast<int64_t>(factors.size()) == spatial)
        << schema.name() << ": " << factors.size() << " scale factors for " << spatial
        << " spatial dims";
    for (int64_t i = 0; i < spatial; ++i) {
      osize.push_back(scaled(input.sym_size(i + 2), factors[i], schema.name()));
      scales[static_cast<size_t>(i)] = factors[i];
    }
  }
  const std::optional<int> align = schema.argumentIndexWithName("align_corners");
  torch::jit::Stack call;
  call.emplace_back(input);
  call.emplace_back(c10::IValue(osize));
  if (align) call.push_back((*stack)[base + static_cast<size_t>(*align)]);
  for (const std::optional<double>& s : scales) {
    call.emplace_back(s.has_value() ? c10::IValue(*s) : c10::IValue());
  }
  torch::jit::drop(*stack, n);
  c10::Dispatcher::singleton().findSchemaOrThrow(schema.name().c_str(), "").callBoxed(call);
  stack->push_back(std::move(call.front()));
}

}  // namespace

void register_symbolic_upsample() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const char* name : kUpsampleOps) {
      c10::OperatorName vec(name, "vec");
      EMBER_UNSUPPORTED(dispatcher.findOp(vec).has_value() &&
                        dispatcher.findOp(c10::OperatorName(name, "")).has_value())
          << "this torch has no operator " << name
          << ".vec or its default overload: a torch version ember does not support";
      // Leaked on purpose, as the tracer's other registrations (dispatch.cpp).
      new c10::RegistrationHandleRAII(dispatcher.registerImpl(
          vec, c10::DispatchKey::AutogradPrivateUse1,
          c10::KernelFunction::makeFromBoxedFunction<&upsample_vec>(), std::nullopt, nullptr,
          "ember tracer: upsampling over shape symbols"));
    }
  });
}

}  // namespace ember::tracer
