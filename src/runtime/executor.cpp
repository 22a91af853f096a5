/// \file
/// The executor's construction from a program (built by runtime/pipeline.h) and what describes
/// that program. Running it per call is executor_run.cpp.
#include "runtime/executor.h"

#include <algorithm>

#include "runtime/pipeline.h"

namespace ember::runtime {

Executor::Executor(tracer::TracedGraph traced, ExecutorOptions options)
    : Executor(compile_graph(std::move(traced), options)) {}

Executor::Executor(Program program) : p_(std::move(program)) {}

Executor::~Executor() = default;

std::string Executor::cuda_graph_status() const {
  if (!p_.cuda_graph) return p_.cuda_graph_note;
  return p_.cuda_graph->disabled_reason();
}

std::vector<std::string> Executor::describe_steps() const {
  std::vector<std::string> out;
  for (const Step& s : p_.steps) {
    if (s.kernel >= 0) {
      out.push_back(p_.kernels[s.kernel].description);
    } else if (s.call) {
      out.push_back(std::string(s.view ? "view " : "extern ") +
                    c10::toString(s.call->op->schema().operator_name()));
    } else {
      out.push_back(s.view->description);
    }
  }
  return out;
}

int Executor::num_view_steps() const {
  return static_cast<int>(std::count_if(p_.steps.begin(), p_.steps.end(),
                                        [](const Step& s) { return s.view.has_value(); }));
}

std::vector<graph::ValueId> step_reads(const Program& p, const Step& step) {
  if (step.kernel >= 0) return p.kernels[step.kernel].inputs;
  if (!step.call) return {step.view->root};
  return step.call->reads();
}

int Executor::num_kernels() const {
  int n = 0;
  for (const Step& s : p_.steps) n += s.kernel >= 0 ? 1 : 0;
  return n;
}

int Executor::num_extern_steps() const {
  return static_cast<int>(std::count_if(p_.steps.begin(), p_.steps.end(), [](const Step& s) {
    return s.call.has_value() && !s.view.has_value();
  }));
}

}  // namespace ember::runtime
