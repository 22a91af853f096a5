/// \file
/// Python view of compiled training graphs: ember._C.CompiledFunction
/// (runtime/compiled_function.h).
#include <algorithm>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "graph/printer.h"
#include "graph/types.h"
#include "python/bindings.h"
#include "python/options.h"
#include "python/torch_caster.h"
#include "runtime/compiled_function.h"
#include "support/error.h"

namespace nb = nanobind;

namespace ember::python {

void bind_autograd(nb::module_& m) {
  using runtime::CompiledFunction;
  m.def(
      "split_training_graph",
      [](const tracer::TracedGraph& joint, int num_primals, int num_forward_outputs,
         std::vector<int> tangent_outputs, std::vector<int> grad_inputs, nb::handle options,
         const std::vector<int>& /*rebased_inputs: the split does not read them*/) {
        runtime::TrainingGraphs g = runtime::split_training_graph(
            joint,
            runtime::joint_signature(joint.graph, num_primals, num_forward_outputs,
                                     std::move(tangent_outputs), std::move(grad_inputs)),
            compile_options_from(options).training);
        return nb::make_tuple(std::move(g.forward), std::move(g.backward), g.split.saved_bytes);
      },
      nb::arg("joint"), nb::arg("num_primals"), nb::arg("num_forward_outputs"),
      nb::arg("tangent_outputs"), nb::arg("grad_inputs"), nb::arg("options").none() = nb::none(),
      nb::arg("rebased_inputs") = std::vector<int>{},
      "(forward, backward, saved bytes): `joint` split as CompiledFunction splits it, nothing "
      "compiled (so a joint traced for cuda:0 works without a GPU: pass each to triton_plan).");
  nb::class_<CompiledFunction>(
      m, "CompiledFunction",
      "A joint forward-and-backward graph split in two and compiled. Calling it with the "
      "program's inputs returns a tuple of its outputs; when grad mode is on and an input "
      "requires grad, the differentiable outputs' grad_fn runs the compiled backward.")
      .def(
          "__init__",
          [](CompiledFunction* self, const tracer::TracedGraph& joint, int num_primals,
             int num_forward_outputs, std::vector<int> tangent_outputs,
             std::vector<int> grad_inputs, std::optional<bool> codegen,
             std::optional<bool> reductions, std::optional<bool> reduction_fusion,
             nb::handle options, std::vector<int> rebased_inputs) {
            runtime::JointSignature sig =
                runtime::joint_signature(joint.graph, num_primals, num_forward_outputs,
                                         std::move(tangent_outputs), std::move(grad_inputs));
            sig.rebased_inputs = std::move(rebased_inputs);
            runtime::ExecutorOptions o{.compile = compile_options_from(options)};
            if (codegen.has_value()) o.compile.sched.codegen = *codegen;
            if (reductions.has_value()) o.compile.sched.reductions = *reductions;
            if (reduction_fusion.has_value()) o.compile.sched.reduction_fusion = *reduction_fusion;
            new (self) CompiledFunction(joint, std::move(sig), std::move(o));
          },
          nb::arg("joint"), nb::arg("num_primals"), nb::arg("num_forward_outputs"),
          nb::arg("tangent_outputs"), nb::arg("grad_inputs"),
          nb::arg("codegen").none() = nb::none(), nb::arg("reductions").none() = nb::none(),
          nb::arg("reduction_fusion").none() = nb::none(), nb::arg("options").none() = nb::none(),
          nb::arg("rebased_inputs") = std::vector<int>{},
          "Splits `joint` (ember.tracing.trace_joint) into a forward and a backward graph and "
          "compiles both. `rebased_inputs`: per forward output after the program's (the last "
          "ones), the input it is the new value of (modified in place; JointSignature).")
      .def("__call__", [](const CompiledFunction& f,
                          nb::args args) { return tensor_tuple(f.run(tensor_args(args))); })
      .def("size_guards_hold", &CompiledFunction::size_guards_hold, nb::arg("inputs"),
           "Whether a call with `inputs` meets the size relations the joint graph's trace relied "
           "on (always for a static graph).")
      .def_prop_ro("num_zero_tangent_programs", &CompiledFunction::num_zero_tangent_programs,
                   "Backward programs compiled for calls where some outputs got no gradient "
                   "(each such tangent one zero, read by broadcast).")
      .def_prop_ro("num_saved", &CompiledFunction::num_saved,
                   "Values the forward keeps for the backward.")
      .def_prop_ro("saved_bytes", &CompiledFunction::saved_bytes,
                   "Bytes of the values the forward keeps for the backward.")
      .def_prop_ro(
          "saved_values",
          [](const CompiledFunction& f) {
            // The forward's outputs after the program's own are the saved values that are not
            // primal inputs (graph/partition.h).
            const graph::Graph& g = f.forward().graph();
            nb::list out;
            for (size_t i = static_cast<size_t>(f.num_forward_outputs()); i < g.outputs.size();
                 ++i) {
              const graph::Value& v = g.values.at(g.outputs[i]);
              const std::string op =
                  v.node < 0 ? "input" : g.op_of(g.nodes.at(v.node)).qualified_name();
              out.append(nb::make_tuple(op, graph::type_str(v.type), graph::nbytes(v.type)));
            }
            return out;
          },
          "(producing op, type, bytes) of each value the forward saves for the backward that is "
          "not "
          "a primal input (those are saved as they are).")
      .def_prop_ro("forward_steps",
                   [](const CompiledFunction& f) { return f.forward().describe_steps(); })
      .def_prop_ro("backward_steps",
                   [](const CompiledFunction& f) { return f.backward().describe_steps(); })
      .def_prop_ro(
          "refused_kernels",
          [](const CompiledFunction& f) {
            std::vector<std::string> out = f.forward().refused_kernels();
            for (const std::string& r : f.backward().refused_kernels()) out.push_back(r);
            return out;
          },
          "Why the Triton path refused kernels of the forward, then the backward graph (their "
          "nodes ran as ATen calls).")
      .def_prop_ro(
          "layout_copies",
          [](const CompiledFunction& f) {
            std::vector<std::string> notes = f.forward().layout_copy_notes();
            for (const std::string& n : f.backward().layout_copy_notes()) notes.push_back(n);
            return nb::make_tuple(f.forward().num_layout_copies(), f.backward().num_layout_copies(),
                                  notes);
          },
          "(forward copies, backward copies, notes): copies made at run time because an extern "
          "returned another layout or dtype than traced (Executor::num_layout_copies).")
      .def_prop_ro(
          "graphs",
          [](const CompiledFunction& f) {
            return nb::make_tuple(graph::print_graph(f.forward().graph()),
                                  graph::print_graph(f.backward().graph()));
          },
          "The forward and backward graphs as text (graph/printer.h), as the partition made them.")
      .def(
          "set_eager_backward",
          [](CompiledFunction& f, nb::callable fn) {
            // Held by backward nodes, which autograd may free on its own threads: released
            // under the GIL.
            auto held =
                std::shared_ptr<nb::object>(new nb::object(std::move(fn)), [](nb::object* o) {
                  nb::gil_scoped_acquire gil;
                  delete o;
                });
            f.set_eager_backward([held](const std::vector<at::Tensor>& primals,
                                        const std::vector<at::Tensor>& grads) {
              nb::gil_scoped_acquire gil;
              nb::object r = (*held)(tensor_tuple(primals), tensor_tuple(grads));
              std::vector<at::Tensor> out;
              for (nb::handle item : r) {
                out.push_back(item.is_none() ? at::Tensor() : THPVariable_Unpack(item.ptr()));
              }
              return out;
            });
          },
          nb::arg("fn"),
          "Installs double backward's fallback: fn(primals, grads) runs the program eagerly and "
          "returns the inputs' gradients (create_graph=True), in grad_inputs order.")
      .def_prop_ro("replayable", &CompiledFunction::replayable,
                   "No input mutations and no random ops: double backward may run the program "
                   "again eagerly.")
      .def_prop_ro(
          "backward_unfused_runs",
          [](const CompiledFunction& f) { return f.backward().num_unfused_runs(); },
          "Backward calls that ran unfused: a gradient's strides differed from the traced "
          "ones.")
      .def_prop_ro("num_parameter_kernels",
                   [](const CompiledFunction& f) {
                     return f.forward().num_parameter_kernels() +
                            f.backward().num_parameter_kernels();
                   })
      .def_prop_ro("num_kernels", [](const CompiledFunction& f) {
        return f.forward().num_kernels() + f.backward().num_kernels();
      });
}

}  // namespace ember::python
