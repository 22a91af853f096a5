/// \file
/// Python view of the runtime: ember._C.CompiledGraph, the callable a backend returns.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "python/bindings.h"
#include "python/torch_caster.h"
#include "runtime/executor.h"
#include "support/error.h"

namespace nb = nanobind;

namespace ember::python {

void bind_runtime(nb::module_& m) {
  m.def("clear_kernel_memory_cache", &runtime::clear_memory_cache,
        "Forgets the kernels loaded in this process (they stay loaded while in use), so the next "
        "compile reads the on-disk cache (EMBER_CACHE_DIR) or compiles.");
  m.def(
      "host_compiler_stats",
      [] {
        runtime::HostCompilerStats s = runtime::host_compiler_stats();
        return nb::make_tuple(s.compiles, s.disk_hits, s.memory_hits);
      },
      "(compiles, disk_hits, memory_hits) of the kernel cache in this process.");
  using runtime::Executor;
  nb::class_<Executor>(m, "CompiledGraph",
                       "A graph ready to run. Calling it with the graph's non-constant inputs "
                       "returns a tuple of its outputs.")
      .def(
          "__init__",
          [](Executor* self, const tracer::TracedGraph& g, bool codegen, bool reductions,
             bool reduction_fusion) {
            new (self) Executor(g, runtime::ExecutorOptions{codegen, reductions, reduction_fusion});
          },
          nb::arg("graph"), nb::arg("codegen") = true, nb::arg("reductions") = true,
          nb::arg("reduction_fusion") = true,
          "Prepares `graph` to run; with codegen, fuses pointwise nodes into generated C++ "
          "kernels (CPU graphs).")
      .def("__call__",
           [](const Executor& e, nb::args args) {
             std::vector<at::Tensor> inputs;
             inputs.reserve(args.size());
             for (size_t i = 0; i < args.size(); ++i) {
               PyObject* a = args[i].ptr();
               EMBER_CHECK(THPVariable_Check(a))
                   << "argument " << i << " is a " << Py_TYPE(a)->tp_name << ", not a tensor";
               inputs.push_back(THPVariable_Unpack(a));
             }
             std::vector<at::Tensor> outs = e.run(inputs);
             nb::object result = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(outs.size())));
             for (size_t i = 0; i < outs.size(); ++i) {
               PyTuple_SET_ITEM(result.ptr(), static_cast<Py_ssize_t>(i),
                                THPVariable_Wrap(outs[i]));
             }
             return result;
           })
      .def("run", &Executor::run, nb::arg("inputs"))
      .def("mutated_inputs_alias", &Executor::mutated_inputs_alias, nb::arg("inputs"))
      .def_prop_ro("has_mutations", &Executor::has_mutations)
      .def_prop_ro("num_kernels", &Executor::num_kernels)
      .def_prop_ro("num_fused_nodes", &Executor::num_fused_nodes)
      .def_prop_ro("num_extern_steps", &Executor::num_extern_steps)
      .def_prop_ro("num_view_steps", &Executor::num_view_steps)
      .def_prop_ro("num_folded_nodes", &Executor::num_folded_nodes)
      .def_prop_ro("arena_bytes", &Executor::arena_bytes)
      .def_prop_ro("num_arena_buffers", &Executor::num_arena_buffers)
      .def_prop_ro("num_reused_buffers", &Executor::num_reused_buffers,
                   "Kernel outputs planned to be written into a dead input's memory (in place).")
      .def("describe_steps", &Executor::describe_steps,
           "One line per step: 'kernel <name>: ops', 'view <op>' or 'extern <op>'.")
      .def_prop_ro("codegen_error", &Executor::codegen_error)
      .def_prop_ro("kernel_sources", &Executor::kernel_sources)
      .def_prop_ro("num_inputs", &Executor::num_user_inputs)
      .def_prop_ro("num_nodes", [](const Executor& e) { return e.graph().nodes.size(); });
}

}  // namespace ember::python
