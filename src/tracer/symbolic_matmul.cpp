#include "tracer/symbolic_matmul.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/matmul_native.h>

#include <mutex>

#include "support/error.h"

namespace ember::tracer {

namespace {

bool symbolic(const at::Tensor& t) {
  return t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

// matmul's semantics (torch.matmul's documentation) over SymInts.
at::Tensor matmul_over_symbols(const at::Tensor& a, const at::Tensor& b) {
  const int64_t da = a.dim(), db = b.dim();
  if (da == 1 && db == 1) return a.dot(b);
  if (da == 2 && db == 1) return a.mv(b);
  if (da == 1 && db == 2) return a.unsqueeze(0).mm(b).squeeze(0);
  if (da == 2 && db == 2) return a.mm(b);
  c10::SymIntArrayRef as = a.sym_sizes(), bs = b.sym_sizes();
  if (da >= 3 && db <= 2) {
    // [..., n, m] @ [m, p] (or [m]): one product over the flattened rows.
    at::Tensor rows = a.reshape_symint({-1, as.back()});
    at::Tensor out = db == 2 ? rows.mm(b) : rows.mv(b);
    c10::SymDimVector shape(as.begin(), as.end() - 1);
    if (db == 2) shape.push_back(bs.back());
    return out.view_symint(shape);
  }
  // Batched: both operands expanded to the broadcast batch, as [batch, n, m] @ [batch, m, p].
  const c10::SymInt n = da > 1 ? as[da - 2] : c10::SymInt(1), m = as.back();
  const c10::SymInt p = db > 1 ? bs.back() : c10::SymInt(1), k = db > 1 ? bs[db - 2] : bs[0];
  c10::SymIntArrayRef batch_a(as.data(), static_cast<size_t>(std::max<int64_t>(da - 2, 0)));
  c10::SymIntArrayRef batch_b(bs.data(), static_cast<size_t>(std::max<int64_t>(db - 2, 0)));
  const c10::SymDimVector batch = at::infer_size_symdimvector(batch_a, batch_b);
  c10::SymInt batch_numel = 1;
  for (const c10::SymInt& s : batch) batch_numel = batch_numel * s;
  auto three_d = [&](const at::Tensor& t, const c10::SymInt& r, const c10::SymInt& c) {
    c10::SymDimVector full(batch.begin(), batch.end());
    full.push_back(r);
    full.push_back(c);
    return t.expand_symint(full).reshape_symint({batch_numel, r, c});
  };
  at::Tensor out =
      three_d(da == 1 ? a.unsqueeze(0) : a, n, m).bmm(three_d(db == 1 ? b.unsqueeze(-1) : b, k, p));
  c10::SymDimVector shape(batch.begin(), batch.end());
  if (da > 1) shape.push_back(n);
  if (db > 1) shape.push_back(p);
  return out.view_symint(shape);
}

at::Tensor matmul_kernel(const at::Tensor& a, const at::Tensor& b) {
  if ((symbolic(a) || symbolic(b)) && a.dim() >= 1 && b.dim() >= 1) {
    return matmul_over_symbols(a, b);
  }
  return at::native::matmul(a, b);
}

}  // namespace

void register_symbolic_matmul() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    c10::OperatorName name("aten::matmul", "");
    EMBER_UNSUPPORTED(dispatcher.findOp(name).has_value())
        << "this torch has no operator aten::matmul: a torch version ember does not support";
    // Leaked on purpose, as the tracer's other registrations (dispatch.cpp).
    new c10::RegistrationHandleRAII(dispatcher.registerImpl(
        name, c10::DispatchKey::AutogradPrivateUse1,
        c10::KernelFunction::makeFromUnboxedFunction(TORCH_FN(matmul_kernel)), std::nullopt,
        nullptr, "ember tracer: matmul over shape symbols"));
  });
}

}  // namespace ember::tracer
