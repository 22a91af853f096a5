#include "capture/compile/graph_runner.h"

#include <nanobind/stl/string.h>
#include <torch/csrc/autograd/python_variable.h>

#include <string>

#include "capture/compile/fx_export.h"
#include "capture/hook/frame_hook.h"
#include "support/error.h"

namespace nb = nanobind;

namespace ember::capture {

std::vector<size_t> GraphRunner::mutated_input_positions() const {
  const graph::Graph& g = graph();
  std::vector<size_t> mutated;  // positions in `inputs`
  size_t position = 0;
  for (const graph::Input& in : g.inputs) {
    if (in.kind == graph::InputKind::Constant) continue;
    for (const graph::Mutation& m : g.mutations) {
      if (m.input == in.value) mutated.push_back(position);
    }
    ++position;
  }
  return mutated;
}

namespace {

std::vector<std::pair<std::string, double>> steps_and_phases(const runtime::Executor& e) {
  std::vector<std::pair<std::string, double>> out = e.step_seconds();
  out.insert(out.end(), e.phase_seconds().begin(), e.phase_seconds().end());
  return out;
}

class ExecutorRunner final : public GraphRunner {
 public:
  ExecutorRunner(tracer::TracedGraph traced, const runtime::ExecutorOptions& options)
      : executor_(std::move(traced), options) {}

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const override {
    // Python that the graph's steps reach (ops implemented in Python, Triton's interpreter) is
    // not the program's: its frames are not captured.
    HookPause pause;
    return executor_.run(inputs);
  }
  const graph::Graph& graph() const override { return executor_.graph(); }
  int num_kernels() const override { return executor_.num_kernels(); }
  int num_extern_steps() const override { return executor_.num_extern_steps(); }
  int num_view_steps() const override { return executor_.num_view_steps(); }
  int num_fused_nodes() const override { return executor_.num_fused_nodes(); }
  int num_folded_nodes() const override { return executor_.num_folded_nodes(); }
  int num_parameter_kernels() const override { return executor_.num_parameter_kernels(); }
  int num_fused_attention() const override { return executor_.num_fused_attention(); }
  int num_causal_attention() const override { return executor_.num_causal_attention(); }
  std::string symbolic_fallback() const override { return executor_.symbolic_fallback(); }
  std::vector<std::string> codegen_notes() const override {
    std::vector<std::string> notes = executor_.refused_kernels();
    if (!executor_.codegen_error().empty()) notes.push_back(executor_.codegen_error());
    const std::string cuda_graph = executor_.cuda_graph_status();
    if (!cuda_graph.empty() && cuda_graph != "off") notes.push_back("no CUDA graph: " + cuda_graph);
    return notes;
  }
  std::vector<std::string> kernel_sources() const override { return executor_.kernel_sources(); }
  std::vector<std::pair<std::string, double>> step_seconds() const override {
    return steps_and_phases(executor_);
  }

 private:
  runtime::Executor executor_;
};

class TrainingRunner final : public GraphRunner {
 public:
  TrainingRunner(tracer::TracedGraph joint, runtime::JointSignature signature,
                 const runtime::ExecutorOptions& options)
      : function_(std::move(joint), std::move(signature), options,
                  [](const std::function<void()>& body) {
                    HookPause pause;  // the backward's Python (Triton) is not the program's
                    body();
                  }) {}

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const override {
    HookPause pause;
    return function_.run(inputs);
  }
  const graph::Graph& graph() const override { return function_.forward().graph(); }
  int num_kernels() const override {
    return function_.forward().num_kernels() + function_.backward().num_kernels();
  }
  int num_extern_steps() const override {
    return function_.forward().num_extern_steps() + function_.backward().num_extern_steps();
  }
  int num_view_steps() const override {
    return function_.forward().num_view_steps() + function_.backward().num_view_steps();
  }
  int num_fused_nodes() const override {
    return function_.forward().num_fused_nodes() + function_.backward().num_fused_nodes();
  }
  bool training() const override { return true; }
  std::vector<std::string> kernel_sources() const override {
    std::vector<std::string> out = function_.forward().kernel_sources();
    for (const std::string& s : function_.backward().kernel_sources()) out.push_back(s);
    return out;
  }
  std::vector<std::pair<std::string, double>> step_seconds() const override {
    std::vector<std::pair<std::string, double>> out = steps_and_phases(function_.forward());
    for (const auto& [name, s] : steps_and_phases(function_.backward())) {
      out.emplace_back("backward:" + name, s);
    }
    return out;
  }
  std::string symbolic_fallback() const override {
    const std::string& f = function_.forward().symbolic_fallback();
    return f.empty() ? function_.backward().symbolic_fallback() : f;
  }
  std::vector<std::string> codegen_notes() const override {
    std::vector<std::string> notes;
    for (const runtime::Executor* e : {&function_.forward(), &function_.backward()}) {
      for (const std::string& n : e->refused_kernels()) notes.push_back(n);
      if (!e->codegen_error().empty()) notes.push_back(e->codegen_error());
    }
    return notes;
  }

 private:
  runtime::CompiledFunction function_;
};

class BackendRunner final : public GraphRunner {
 public:
  BackendRunner(tracer::TracedGraph traced, nb::object compiled)
      : traced_(std::move(traced)), compiled_(std::move(compiled)) {}

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const override {
    HookPause pause;  // the backend's code is not the program's: its frames are not captured
    std::vector<nb::object> args;
    std::vector<PyObject*> arg_ptrs;
    args.reserve(inputs.size());
    arg_ptrs.reserve(inputs.size());
    for (const at::Tensor& t : inputs) {
      args.push_back(nb::steal(THPVariable_Wrap(t)));
      if (!args.back().is_valid()) throw nb::python_error();
      arg_ptrs.push_back(args.back().ptr());
    }
    nb::object result =
        nb::steal(PyObject_Vectorcall(compiled_.ptr(), arg_ptrs.data(), arg_ptrs.size(), nullptr));
    if (!result.is_valid()) throw nb::python_error();
    const size_t n = traced_.graph.outputs.size();
    PyObject* r = result.ptr();
    EMBER_CHECK((PyTuple_Check(r) || PyList_Check(r)) &&
                static_cast<size_t>(PySequence_Fast_GET_SIZE(r)) == n)
        << "the callable a backend compiled for a graph returned " << describe(result)
        << ", expected a tuple or list of " << n << " tensors";
    std::vector<at::Tensor> outs;
    outs.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(r, static_cast<Py_ssize_t>(i));
      EMBER_CHECK(THPVariable_Check(item))
          << "the callable a backend compiled for a graph returned a " << Py_TYPE(item)->tp_name
          << " as output " << i << ", expected a tensor";
      outs.push_back(THPVariable_Unpack(item));
    }
    return outs;
  }
  const graph::Graph& graph() const override { return traced_.graph; }

 private:
  static std::string describe(nb::handle v) {
    std::string s = std::string("a ") + Py_TYPE(v.ptr())->tp_name;
    if (PyTuple_Check(v.ptr()) || PyList_Check(v.ptr())) {
      s += " of " + std::to_string(PySequence_Fast_GET_SIZE(v.ptr())) + " items";
    }
    return s;
  }

  tracer::TracedGraph traced_;
  nb::object compiled_;
};

/// `backend`'s name for messages: its __qualname__ or __name__, else its repr.
std::string backend_name(nb::handle backend) {
  for (const char* attr : {"__qualname__", "__name__"}) {
    if (nb::hasattr(backend, attr)) return nb::cast<std::string>(nb::str(backend.attr(attr)));
  }
  return nb::cast<std::string>(nb::repr(backend));
}

}  // namespace

std::unique_ptr<GraphRunner> make_executor_runner(tracer::TracedGraph traced,
                                                  const runtime::ExecutorOptions& options) {
  return std::make_unique<ExecutorRunner>(std::move(traced), options);
}

std::unique_ptr<GraphRunner> make_training_runner(tracer::TracedGraph joint,
                                                  runtime::JointSignature signature,
                                                  const runtime::ExecutorOptions& options) {
  return std::make_unique<TrainingRunner>(std::move(joint), std::move(signature), options);
}

std::unique_ptr<GraphRunner> make_backend_runner(tracer::TracedGraph traced, nb::handle backend,
                                                 const std::vector<at::Tensor>& example_inputs) {
  nb::object gm = to_graph_module(traced);
  nb::list examples;
  for (const at::Tensor& t : example_inputs) examples.append(nb::steal(THPVariable_Wrap(t)));
  nb::object compiled;
  try {
    HookPause pause;  // the backend's code is not the program's: its frames are not captured
    compiled = backend(gm, examples);
  } catch (nb::python_error& e) {
    throw UserError("the backend " + backend_name(backend) + " failed on a graph of " +
                    std::to_string(traced.graph.nodes.size()) +
                    " nodes: " + nb::cast<std::string>(nb::str(e.type().attr("__name__"))) + ": " +
                    nb::cast<std::string>(nb::str(e.value())));
  }
  EMBER_CHECK(PyCallable_Check(compiled.ptr()))
      << "the backend " << backend_name(backend) << " returned a "
      << Py_TYPE(compiled.ptr())->tp_name << " for a graph, expected a callable";
  return std::make_unique<BackendRunner>(std::move(traced), std::move(compiled));
}

}  // namespace ember::capture
