#include "rewrite/sdp_choice.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#include <exception>
#include <vector>

#include "tracer/convert.h"
#include "tracer/trace_session.h"

namespace ember::rewrite {

bool choose_sdp_backend(tracer::RewriteCall& call) {
  if (tracer::op_kind(call.op.schema()) != graph::OpKind::_fused_sdp_choice) return false;
  torch::jit::Stack* stack = call.stack;
  if (!(*stack)[call.base].isTensor()) return false;  // the query
  std::vector<c10::IValue> saved(stack->begin() + static_cast<std::ptrdiff_t>(call.base),
                                 stack->end());
  c10::impl::ForceDispatchKeyGuard untraced(call.session.outer_tls());
  try {
    call.op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CUDA), stack);
    return true;
  } catch (const std::exception&) {
    stack->resize(call.base);
    stack->insert(stack->end(), saved.begin(), saved.end());
  }
  return false;
}

}  // namespace ember::rewrite
