#include "tracer/dispatch.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <mutex>

#include "support/error.h"
#include "tracer/trace_session.h"

namespace ember::tracer {

namespace {

void tracer_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  TraceSession* session = TraceSession::current();
  EMBER_CHECK(session != nullptr)
      << "a tracer tensor reached " << op.schema().name()
      << " outside of its trace: a tensor escaped the traced function (was it stored globally?)";
  try {
    session->record(op, stack);
  } catch (const ember::Error&) {
    session->note_error(std::current_exception());
    throw;
  }
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
