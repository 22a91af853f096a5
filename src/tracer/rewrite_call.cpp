#include "tracer/rewrite_call.h"

#include <algorithm>
#include <utility>

#include "tracer/trace_session.h"

namespace ember::tracer {

const char* where_name(Where w) {
  switch (w) {
    case Where::Any:
      return "any";
    case Where::Cuda:
      return "cuda";
    case Where::Cpu:
      return "cpu";
    case Where::Nowhere:
      return "nowhere";
  }
  return "?";
}

const char* widening_option(Widening w) {
  switch (w) {
    case Widening::None:
      return "";
    case Widening::SplitsEverywhere:
      return "trace.splits_everywhere";
    case Widening::DecomposeBackwardEverywhere:
      return "trace.decompose_backward_everywhere";
  }
  return "?";
}

bool widened(Widening w, const CompileOptions::Trace& options) {
  switch (w) {
    case Widening::None:
      return false;
    case Widening::SplitsEverywhere:
      return options.splits_everywhere;
    case Widening::DecomposeBackwardEverywhere:
      return options.decompose_backward_everywhere;
  }
  return false;
}

c10::Device target_device(c10::ArrayRef<c10::IValue> args) {
  std::optional<c10::Device> first;
  std::optional<c10::Device> found;
  auto note = [&](const at::Tensor& t) {
    if (found || !t.defined()) return;
    if (!first) first = t.device();
    if (!(t.dim() == 0 && t.device().is_cpu())) found = t.device();
  };
  for (const c10::IValue& v : args) {
    if (v.isTensor()) {
      note(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) note(t);
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) note(e.toTensor());
      }
    }
  }
  return found.value_or(first.value_or(c10::Device(c10::kCPU)));
}

void RewriteCall::push_results(std::vector<at::Tensor> results) {
  torch::jit::drop(*stack, num_args);
  for (at::Tensor& r : results) stack->emplace_back(std::move(r));
}

void RewriteCall::record_as_is() {
  session.record_skipping(row, op, stack);
}

bool Rewrite::matches(graph::OpKind kind, std::string_view op_name) const {
  if (!prefix.empty() && op_name.substr(0, prefix.size()) == prefix) return true;
  return kind != graph::OpKind::Unknown && std::find(ops.begin(), ops.end(), kind) != ops.end();
}

bool Rewrite::applies_on(c10::Device target, const CompileOptions::Trace& options) const {
  switch (where) {
    case Where::Any:
      return true;
    case Where::Cuda:
      if (target.is_cuda()) return true;
      break;
    case Where::Cpu:
      if (target.is_cpu()) return true;
      break;
    case Where::Nowhere:
      break;
  }
  return widened(widened_by, options);
}

bool rewrite_disabled(std::string_view disabled, std::string_view name) {
  size_t start = 0;
  while (start <= disabled.size()) {
    size_t comma = disabled.find(',', start);
    if (comma == std::string_view::npos) comma = disabled.size();
    if (disabled.substr(start, comma - start) == name) return true;
    start = comma + 1;
  }
  return false;
}

}  // namespace ember::tracer
