#include "tracer/dispatch.h"

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <mutex>
#include <string>

#include "graph/ops.h"
#include "support/error.h"
#include "tracer/symbolic_matmul.h"
#include "tracer/symbolic_pool.h"
#include "tracer/symbolic_upsample.h"
#include "tracer/trace_session.h"
#include "tracer/tracer_tensor.h"

namespace ember::tracer {

namespace {

// The session of a tracer tensor among the op's arguments (tensor lists included), when it is
// entered (on some thread), else nullptr.
TraceSession* session_of_arguments(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  const size_t n = op.schema().arguments().size();
  auto entered = [](const at::Tensor& x) -> TraceSession* {
    TracerTensorImpl* t = as_tracer(x);
    return t != nullptr && t->session() != nullptr && t->session()->active() ? t->session()
                                                                             : nullptr;
  };
  for (size_t i = stack.size() - n; i < stack.size(); ++i) {
    if (stack[i].isTensor()) {
      if (TraceSession* s = entered(stack[i].toTensor())) return s;
    } else if (stack[i].isTensorList()) {  // cat, stack
      for (const at::Tensor& x : stack[i].toTensorList().vec()) {
        if (TraceSession* s = entered(x)) return s;
      }
    }
  }
  return nullptr;
}

void tracer_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // The trace's own thread, or another that works for it while it waits: autograd's engine runs
  // a CUDA tensor's backward on its device thread, with the dispatch state of the caller's
  // thread but not ember's thread-local session (the joint graph of a CUDA program). A factory
  // op there has no tracer tensor to find its session by: it records into the one entered.
  TraceSession* session = TraceSession::current();
  if (session == nullptr) session = session_of_arguments(op, *stack);
  if (session == nullptr) session = TraceSession::only_entered();
  EMBER_CHECK(session != nullptr)
      << "a tracer tensor reached " << op.schema().name()
      << " outside of its trace: a tensor escaped the traced function (was it stored globally?)";
  try {
    std::lock_guard<std::recursive_mutex> one_at_a_time(session->record_mutex());
    session->record(op, stack);
  } catch (const ember::Error&) {
    session->note_error(std::current_exception());
    throw;
  }
}

// Composite ops whose decomposition reads tensor data only to validate it (one_hot checks its
// class values with .item()): traced, the decomposition would be a data-dependent graph break
// although the result's shape is static. They are recorded whole instead (an extern call at run
// time, which validates as eager does): the autograd kernel steps below autograd, where
// functionalization unwraps the arguments and ember's kernel records the op. One that this torch
// lacks is never skipped: it would trace as its decomposition again, a data-dependent break, with
// nothing said. ember's op table (graph/ops.def) names it, so this torch is not one ember
// supports (tests/python/graph checks every row against the installed torch): Unsupported at
// import, naming the op.
constexpr graph::OpKind kRecordedWhole[] = {graph::OpKind::one_hot};

void below_autograd_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::AutoDispatchBelowADInplaceOrView below;
  op.callBoxed(stack);
}

}  // namespace

void register_tracer_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    // Leaked on purpose: deregistering at interpreter exit races the dispatcher's own teardown.
    auto* handles = new std::vector<c10::RegistrationHandleRAII>();
    handles->push_back(dispatcher.registerFallback(
        c10::DispatchKey::PrivateUse1, c10::KernelFunction::makeFromBoxedFunction<&tracer_kernel>(),
        "ember tracer fallback"));
    for (graph::OpKind kind : kRecordedWhole) {
      c10::OperatorName name(std::string(graph::op_name(kind)), "");
      EMBER_UNSUPPORTED(dispatcher.findOp(name).has_value())
          << "this torch has no operator " << name.name << ", which ember's tracer records whole "
          << "(tracer/dispatch.cpp): a torch version ember does not support";
      handles->push_back(dispatcher.registerImpl(
          name, c10::DispatchKey::AutogradPrivateUse1,
          c10::KernelFunction::makeFromBoxedFunction<&below_autograd_kernel>(), std::nullopt,
          nullptr, "ember tracer: recorded whole"));
      handles->push_back(
          dispatcher.registerImpl(name, c10::DispatchKey::PrivateUse1,
                                  c10::KernelFunction::makeFromBoxedFunction<&tracer_kernel>(),
                                  std::nullopt, nullptr, "ember tracer: recorded whole"));
    }
    register_symbolic_matmul();
    register_symbolic_pool();
    register_symbolic_upsample();
    for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
      auto op = dispatcher.findOp(name);
      if (!op || !op->hasSchema()) continue;
      if (op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) continue;
      if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
          !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) {
        continue;
      }
      handles->push_back(
          dispatcher.registerImpl(name, c10::DispatchKey::PrivateUse1,
                                  c10::KernelFunction::makeFromBoxedFunction<&tracer_kernel>(),
                                  std::nullopt, nullptr, "ember tracer"));
    }
  });
}

}  // namespace ember::tracer
