#include "tracer/symbolic_pool.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/max_pool1d_native.h>

#include <mutex>

#include "support/error.h"

namespace ember::tracer {

namespace {

// max_pool1d(self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False) over a
// symbolic length: the [.., L] input pooled as [.., 1, L] by a [1, k] window.
at::Tensor max_pool1d_kernel(const at::Tensor& self, at::IntArrayRef kernel_size,
                             at::IntArrayRef stride, at::IntArrayRef padding,
                             at::IntArrayRef dilation, bool ceil_mode) {
  const bool one =
      kernel_size.size() == 1 && padding.size() == 1 && dilation.size() == 1 && stride.size() <= 1;
  if (!self.unsafeGetTensorImpl()->has_symbolic_sizes_strides() || !one ||
      (self.dim() != 2 && self.dim() != 3)) {
    return at::native::max_pool1d(self, kernel_size, stride, padding, dilation, ceil_mode);
  }
  const int64_t k = kernel_size[0];
  const int64_t s = stride.empty() ? k : stride[0];
  at::Tensor pooled = std::get<0>(at::max_pool2d_with_indices(
      self.unsqueeze(-2), {1, k}, {1, s}, {0, padding[0]}, {1, dilation[0]}, ceil_mode));
  return pooled.squeeze(-2);
}

}  // namespace

void register_symbolic_pool() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    c10::OperatorName name("aten::max_pool1d", "");
    EMBER_UNSUPPORTED(dispatcher.findOp(name).has_value())
        << "this torch has no operator aten::max_pool1d: a torch version ember does not support";
    // Leaked on purpose, as the tracer's other registrations (dispatch.cpp).
    new c10::RegistrationHandleRAII(dispatcher.registerImpl(
        name, c10::DispatchKey::AutogradPrivateUse1,
        c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(max_pool1d_kernel)), std::nullopt,
        nullptr, "ember tracer: max_pool1d over shape symbols"));
  });
}

}  // namespace ember::tracer
