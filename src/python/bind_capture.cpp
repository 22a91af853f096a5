/// \file
/// Python view of capture: ember._C.CaptureCompiler (one per ember.compile call) and
/// capture_function, which wraps a callable so that its frames are captured by a compiler.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "capture/compile/capture_compiler.h"
#include "capture/hook/frame_hook.h"
#include "capture/hook/logs.h"
#include "capture/interp/interpreter.h"
#include "python/bindings.h"
#include "python/capture_core/capture_core.h"
#include "python/options.h"

namespace nb = nanobind;

namespace ember::python {

namespace {

/// `code` as a code object, or a user error naming `fn`.
PyCodeObject* code_object(nb::handle code, const char* fn) {
  EMBER_CHECK(PyCode_Check(code.ptr())) << fn << ": expected a code object";
  return reinterpret_cast<PyCodeObject*>(code.ptr());
}

nb::dict record_dict(const capture::CaptureRecord& r) {
  nb::dict d;
  d["code"] = r.code;
  d["captured"] = r.captured;
  d["graph_break"] = r.graph_break;
  d["reason"] = r.reason;
  d["nodes"] = r.nodes;
  d["kernels"] = r.kernels;
  d["extern_steps"] = r.extern_steps;
  d["view_steps"] = r.view_steps;
  d["fused_nodes"] = r.fused_nodes;
  d["folded_nodes"] = r.folded_nodes;
  d["symbolic"] = r.symbolic;
  d["parameter_kernels"] = r.parameter_kernels;
  d["fused_attention"] = r.fused_attention;
  d["causal_attention"] = r.causal_attention;
  d["symbolic_fallback"] = r.symbolic_fallback;
  d["training"] = r.training;
  d["codegen_notes"] = r.codegen_notes;
  d["kernel_sources"] = r.kernel_sources;
  d["guards"] = r.guards;
  d["inputs"] = r.inputs;
  d["seconds"] = r.seconds;
  d["capture_seconds"] = r.capture_seconds;
  nb::list steps;
  for (const auto& [name, seconds] : r.step_seconds) steps.append(nb::make_tuple(name, seconds));
  d["step_seconds"] = steps;
  d["graph"] = r.graph;
  d["guard_text"] = r.guard_text;
  return d;
}

}  // namespace

void bind_capture(nb::module_& m) {
  capture::CaptureCompiler::set_error_setter(&set_python_error);
  using capture::CaptureCompiler;
  nb::class_<capture::CaptureLog>(m, "CaptureLog",
                                  "The compiles of one CaptureCompiler; outlives it (for "
                                  "ember.metrics).")
      .def(
          "records",
          [](const capture::CaptureLog& log) {
            nb::list out;
            for (const auto& r : log.records) out.append(record_dict(r));
            return out;
          },
          "As CaptureCompiler.records.");
  nb::class_<CaptureCompiler>(m, "CaptureCompiler",
                              "Captures frames by bytecode analysis and compiles them (one per "
                              "ember.compile call).")
      .def(
          "__init__",
          [](CaptureCompiler* self, bool fullgraph, std::optional<bool> codegen,
             std::optional<bool> reductions, std::optional<bool> reduction_fusion,
             std::vector<std::string> library_prefixes, nb::object backend, bool cuda_graphs,
             bool matmul_templates, nb::handle options, std::optional<bool> dynamic) {
            capture::CaptureOptions o;
            o.fullgraph = fullgraph;
            o.dynamic = dynamic;
            if (!backend.is_none()) o.backend = std::move(backend);
            o.executor.compile = compile_options_from(options);
            CompileOptions& c = o.executor.compile;
            if (codegen.has_value()) c.sched.codegen = *codegen;
            if (reductions.has_value()) c.sched.reductions = *reductions;
            if (reduction_fusion.has_value()) c.sched.reduction_fusion = *reduction_fusion;
            c.runtime.cuda_graphs |= cuda_graphs;
            c.runtime.matmul_templates |= matmul_templates;
            o.library_prefixes = std::move(library_prefixes);
            new (self) CaptureCompiler(std::move(o));
          },
          nb::arg("fullgraph") = false, nb::arg("codegen").none() = nb::none(),
          nb::arg("reductions").none() = nb::none(),
          nb::arg("reduction_fusion").none() = nb::none(),
          nb::arg("library_prefixes") = std::vector<std::string>{},
          nb::arg("backend").none() = nb::none(), nb::arg("cuda_graphs") = false,
          nb::arg("matmul_templates") = false, nb::arg("options").none() = nb::none(),
          nb::arg("dynamic").none() = nb::none(),
          "dynamic: torch.compile's dynamic= (True: every dim of a tensor input symbolic; False: "
          "none; None: automatic, a dim becomes symbolic once a recompile sees it change). "
          "backend: None (ember's compiler) or a callable(gm, example_inputs) -> callable, "
          "torch.compile's backend convention (src/capture/compile/graph_runner.h). cuda_graphs: "
          "graphs "
          "on one CUDA device are replayed as CUDA graphs (mode='reduce-overhead'). "
          "matmul_templates: matrix products also get Triton templates timed against cuBLAS "
          "(mode='max-autotune').")
      .def(
          "records",
          [](const CaptureCompiler& c) {
            nb::list out;
            for (const auto& r : c.records()) out.append(record_dict(r));
            return out;
          },
          "One dict per frame compile, in order: code, captured, reason, nodes, kernels, "
          "extern_steps, fused_attention, codegen_notes, guards, inputs, seconds, capture_seconds, "
          "step_seconds ([(pipeline step, seconds), ...]), "
          "graph, guard_text, kernel_sources.")
      .def_prop_ro(
          "log", [](const CaptureCompiler& c) { return c.log(); },
          "The CaptureLog of this compiler's records, which stays readable after the compiler "
          "is freed.");
  m.def(
      "capture_function",
      [](nb::object fn, nb::object top_code, std::shared_ptr<CaptureCompiler> compiler) {
        PyObject* code = top_code.is_none() ? nullptr : top_code.ptr();
        PyObject* f = capture::make_compiled_function(fn.ptr(), code, std::move(compiler));
        if (f == nullptr) throw nb::python_error();
        return nb::steal(f);
      },
      nb::arg("fn"), nb::arg("top_code").none(), nb::arg("compiler"),
      "A callable that calls `fn` with `compiler` capturing its frames.");
  m.def(
      "capture_run_unhooked",
      [](nb::handle code) { capture::run_unhooked(code_object(code, "capture_run_unhooked")); },
      nb::arg("code"),
      "Frames of `code` and every frame they call run with the frame hook off "
      "(torch.compiler.disable's wrapper).");
  m.def(
      "capture_disable_closure_function",
      [](nb::handle code, int cell) {
        capture::disable_closure_function(code_object(code, "capture_disable_closure_function"),
                                          cell);
      },
      nb::arg("code"), nb::arg("cell"),
      "A frame of `code` disables the code of the function in its closure cell `cell` "
      "(torch.compiler.disable(recursive=False)'s wrapper).");
  m.def("set_capture_skip_prefixes", &capture::set_skip_prefixes, nb::arg("prefixes"));
  m.def("set_capture_cache_size_limit", &capture::set_cache_size_limit, nb::arg("limit"));
  m.def("set_capture_log_topics", &capture::set_log_topics, nb::arg("topics"),
        "What capture logs: a comma list of recompiles, graph_breaks, guards, graph, or all.");
  m.def("capture_hook_stats", &hook_stats_dict, "Counters of the frame hook.");
  m.def("capture_handled_ops", &capture::Interpreter::handled_ops,
        "The bytecode ops the capture interpreter has a handler for (every other op of ops.def "
        "is unsupported), in ops.def order.");
  m.def("capture_call_kinds", &capture::Interpreter::call_kind_names,
        "The kinds of callables of the capture interpreter's call policy, in the order they are "
        "tried.");
  m.def("reset_capture_hook_stats", &capture::reset_hook_stats);
  m.def(
      "clear_capture_cache",
      [](nb::object code) {
        capture::clear_cache(code.is_none() ? nullptr
                                            : reinterpret_cast<PyCodeObject*>(code.ptr()));
      },
      nb::arg("code").none() = nb::none());
}

}  // namespace ember::python
