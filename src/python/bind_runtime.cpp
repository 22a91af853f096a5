/// \file
/// Python view of the runtime: ember._C.CompiledGraph, the callable a backend returns.
#include <algorithm>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "codegen/triton/triton_emitter.h"
#include "loop/printer.h"
#include "python/bindings.h"
#include "python/options.h"
#include "python/torch_caster.h"
#include "runtime/attention_fusion.h"
#include "runtime/bias_apart.h"
#include "runtime/causal_attention.h"
#include "runtime/collectives.h"
#include "runtime/constant_fold.h"
#include "runtime/executor.h"
#include "runtime/host_compiler.h"
#include "runtime/host_times.h"
#include "runtime/kernel_cache.h"
#include "runtime/pipeline.h"
#include "runtime/plan_cache.h"
#include "runtime/triton_background.h"
#include "runtime/triton_runtime.h"
#include "sched/fusion.h"
#include "support/error.h"

namespace nb = nanobind;

namespace ember::python {

namespace {

/// What the executor's Triton path makes of a graph, without compiling or running anything (a
/// CUDA-traced graph on a machine with no GPU): per fused group, its nodes, its loop IR and its
/// Triton form, or why it has none.
nb::list triton_plan(const tracer::TracedGraph& traced) {
  const graph::Graph& g = traced.graph;
  sched::ScheduleOptions o;
  o.index_asserts = true;  // as the executor's Triton graphs
  o.chunk_single_rows = false;
  o.keep_prologue_rows = false;
  o.min_parallel_rows = 128;
  o.min_outer_tile = 16;
  // What reads or writes CPU tensors stays ATen's (the module's state counts as on the device).
  o.extern_nodes = runtime::host_nodes(g, nullptr, /*constants_on_device=*/true);
  sched::Plan plan = sched::schedule_graph(g, o);
  const std::vector<std::vector<graph::ValueId>> private_outputs = sched::private_outputs(g, plan);
  nb::list out;
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const sched::KernelGroup& group = plan.groups[gi];
    if (group.outputs.empty()) continue;
    nb::dict d;
    nb::list ops;
    for (int32_t n : group.nodes) ops.append(g.op_of(g.nodes[n]).qualified_name());
    d["ops"] = ops;
    d["loop"] = loop::print_kernel(group.kernel);
    std::vector<std::string> private_buffers;
    for (size_t i = 0; i < group.outputs.size(); ++i) {
      const auto& p = private_outputs[gi];
      if (std::find(p.begin(), p.end(), group.outputs[i]) != p.end()) {
        private_buffers.push_back(group.kernel.buffers[group.inputs.size() + i].name);
      }
    }
    std::string why;
    std::optional<codegen::TritonKernel> t =
        codegen::emit_triton(group.kernel, &why, private_buffers);
    if (group.index_status) why = "a scatter kernel checking its indices before its loops";
    d["triton"] = t && why.empty() ? nb::cast(t->source) : nb::none();
    d["rows_per_program"] = t ? t->rows_per_program : 0;
    d["unused_buffers"] = t ? nb::cast(t->unused_buffers) : nb::list();
    d["why"] = why;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_runtime(nb::module_& m) {
  m.def(
      "run_graph_pass",
      [](const tracer::TracedGraph& traced, const std::string& name) {
        // The pipeline's graph passes (runtime/pipeline.h), one at a time on a copy: their
        // before/after text tests.
        tracer::TracedGraph out = traced;
        int changed = 0;
        if (name == "causal_attention") {
          changed = runtime::causal_attention(out);
        } else if (name == "fold_constants") {
          changed = runtime::fold_constants(out);
        } else if (name == "fuse_attention") {
          changed = runtime::fuse_attention(out);
        } else if (name == "bias_apart") {
          changed = runtime::bias_apart(out);
        } else if (name == "hoist_collectives") {
          changed = runtime::hoist_collectives(out);
        } else if (name == "sink_collective_waits") {
          changed = runtime::sink_collective_waits(out);
        } else {
          throw UserError("no graph pass named '" + name +
                          "' (causal_attention, fold_constants, fuse_attention, bias_apart, "
                          "hoist_collectives, sink_collective_waits)");
        }
        return std::make_pair(std::move(out), changed);
      },
      nb::arg("graph"), nb::arg("name"),
      "Runs one graph pass of the pipeline on a copy of `graph`: (the new graph, the number of "
      "nodes or patterns it rewrote).");
  m.def(
      "host_nodes",
      [](const tracer::TracedGraph& traced) {
        std::vector<int> out;
        const std::vector<bool> host = runtime::host_nodes(traced.graph);
        for (size_t n = 0; n < host.size(); ++n) {
          if (host[n]) out.push_back(static_cast<int>(n));
        }
        return out;
      },
      nb::arg("graph"),
      "The nodes of a graph on a CUDA device that stay ATen calls because they compute on the "
      "CPU (runtime/pipeline.h: host_nodes), by index.");
  m.def("triton_plan", &triton_plan, nb::arg("graph"),
        "Per fused group of `graph` as the executor's Triton path schedules it (nothing compiled "
        "or run, so a graph traced for cuda:0 works without a GPU): a dict of its ops, its loop "
        "IR, its Triton source (None when it has no Triton form), its rows per program, the "
        "private output buffers it never writes (unused_buffers) and why not ('' when it has "
        "one).");
  m.def(
      "kernel_cache_dir",
      [](nb::handle options) {
        (void)compile_options_from(options);  // configures the cache's root from the options
        return runtime::cache_dir();
      },
      nb::arg("options"),
      "The kernel cache's folder of CPU kernels for `options` (ember.config.compile_options()): "
      "`<cache root>/kernels`, created and checked as trusted (kernel_cache.h).");
  m.def(
      "kernel_cache_root",
      [](nb::handle options) {
        (void)compile_options_from(options);
        return runtime::cache_root();
      },
      nb::arg("options"), "The kernel cache's root for `options`, checked as trusted.");
  m.def(
      "verify_kernel_cache_entry",
      [](const std::string& so) {
        std::string why;
        return runtime::verify_entry(so, &why) ? std::string() : why;
      },
      nb::arg("so"),
      "'' when the kernel object `so` matches its sidecar (size and content hash), else what "
      "failed.");
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
  m.def(
      "set_triton_hooks",
      [](nb::callable compile, nb::callable interpret) {
        runtime::TritonHooks h;
        h.compile = [compile](const std::vector<runtime::TritonCompileJob>& jobs, bool background) {
          nb::gil_scoped_acquire gil;
          nb::list args;
          for (const runtime::TritonCompileJob& j : jobs) {
            args.append(nb::make_tuple(j.source, j.name, j.signature, j.block_param, j.block,
                                       j.device, j.num_warps));
          }
          nb::list results = nb::cast<nb::list>(compile(args, background));
          std::vector<runtime::TritonBinary> out;
          for (nb::handle item : results) {
            runtime::TritonBinary b;
            if (nb::isinstance<nb::str>(item)) {  // the compiler refused it: its message
              b.error = nb::cast<std::string>(item);
              out.push_back(std::move(b));
              continue;
            }
            nb::tuple r = nb::cast<nb::tuple>(item);
            nb::bytes cubin = nb::cast<nb::bytes>(r[0]);
            b.cubin.assign(cubin.c_str(), cubin.size());
            b.symbol = nb::cast<std::string>(r[1]);
            b.num_warps = nb::cast<int>(r[2]);
            b.shared_bytes = nb::cast<int>(r[3]);
            b.global_scratch_bytes = nb::cast<int>(r[4]);
            b.global_scratch_align = nb::cast<int>(r[5]);
            b.profile_scratch_bytes = nb::cast<int>(r[6]);
            out.push_back(std::move(b));
          }
          return out;
        };
        h.interpret = [interpret](const std::string& source, const std::string& name,
                                  int64_t programs, const std::string& block_param, int block,
                                  const std::vector<at::Tensor>& args,
                                  const std::vector<int64_t>& integers) {
          nb::gil_scoped_acquire gil;
          nb::list tensors;
          for (const at::Tensor& t : args) tensors.append(nb::steal(THPVariable_Wrap(t)));
          for (int64_t v : integers) tensors.append(nb::int_(v));
          interpret(source, name, programs, block_param, block, tensors);
        };
        runtime::set_triton_hooks(std::move(h));
      },
      nb::arg("compile"), nb::arg("interpret"),
      "Installs Triton's compiler and interpreter for generated kernels (ember._triton): "
      "compile([(source, name, signature, block_param, block, device, num_warps), ...], "
      "background) -> a list of "
      "(cubin, symbol, num_warps, shared, global_scratch_size, global_scratch_align, "
      "profile_scratch_size), one per kernel, or a str (why Triton's compiler refused it); "
      "interpret(source, name, programs, block_param, block, arguments): the tensors, then the "
      "kernel's integer arguments.");
  m.def(
      "set_cuda_graph_hook",
      [](nb::callable capture) {
        runtime::set_cuda_graph_hook([capture](int device, const std::function<void()>& body) {
          nb::gil_scoped_acquire gil;
          nb::object fn = nb::cpp_function([&body] { body(); });
          nb::tuple r = nb::cast<nb::tuple>(capture(device, fn));
          runtime::CapturedCudaGraph g;
          g.exec = reinterpret_cast<void*>(nb::cast<uintptr_t>(r[1]));
          // The torch.cuda.CUDAGraph (and its memory pool) lives while the runner holds it;
          // released with the GIL, or leaked once the interpreter is gone.
          auto* owner = new nb::object(nb::borrow(r[0]));
          g.owner = std::shared_ptr<void>(owner, [](void* p) {
            auto* o = static_cast<nb::object*>(p);
            if (!Py_IsInitialized()) return;
            nb::gil_scoped_acquire gil;
            delete o;
          });
          return g;
        });
      },
      nb::arg("capture"),
      "Installs the CUDA graph capture of mode='reduce-overhead' (ember._cudagraphs): "
      "capture(device, body) runs body() under stream capture and returns (graph, exec), the "
      "torch.cuda.CUDAGraph and its cudaGraphExec_t as an int.");
  m.def("cuda_graph_replays", &runtime::cuda_graph_replays_total,
        "CUDA graph replays of mode='reduce-overhead' in this process.");
  m.def(
      "finish_background_compiles",
      [](double timeout_s) { return runtime::finish_background_compiles(timeout_s); },
      nb::arg("timeout_s") = -1.0, nb::call_guard<nb::gil_scoped_release>(),
      "Waits until the Triton candidates compiling in the background are compiled, or timeout_s "
      "seconds pass (< 0: no limit); True when none is left.");
  m.def("stop_background_compiles", &runtime::stop_background_compiles,
        nb::call_guard<nb::gil_scoped_release>(),
        "Drops the queued background compiles, waits for the running one, ends the thread (at "
        "exit).");
  m.def(
      "background_compile_stats",
      [] {
        runtime::BackgroundCompileStats s = runtime::background_compile_stats();
        return nb::make_tuple(s.queued, s.done, s.pending);
      },
      "(queued, done, pending): Triton candidate compiles sent to the background thread.");
  m.def(
      "plan_cache_stats",
      [] {
        runtime::PlanCacheStats s = runtime::plan_cache_stats();
        return nb::make_tuple(s.hits, s.stored, s.rejected);
      },
      "(hits, stored, rejected): plans this process read from the on-disk plan cache, wrote to "
      "it, and entries or plans that failed a check (runtime/plan_cache.h).");
  m.def("num_loaded_triton_modules", &runtime::num_loaded_triton_modules,
        "Triton modules this process holds loaded (identical kernels count once).");
  m.def(
      "triton_tuning_stats",
      [] {
        runtime::TritonTuningStats s = runtime::triton_tuning_stats();
        return nb::make_tuple(s.timed, s.remembered);
      },
      "(timed, remembered): generated Triton kernels whose launch configuration this process "
      "timed, and those whose winner came from the disk cache (EMBER_TRITON_AUTOTUNE).");
  m.def(
      "host_step_times",
      [] {
        nb::dict out;
        for (const runtime::HostStepTotal& t : runtime::host_step_times()) {
          nb::dict d;
          d["count"] = t.count;
          d["seconds"] = t.seconds;
          out[t.kind.c_str()] = d;
        }
        return out;
      },
      "Host time per kind of executor step (kernel, extern, matmul, view), per run and per guard "
      "check of an ember.compile frame (guards), summed "
      "over the runs of graphs compiled with debug.host_step_times (EMBER_HOST_STEP_TIMES=1) "
      "since the last reset: {kind: {count, seconds}} (runtime/host_times.h).");
  m.def("reset_host_step_times", &runtime::reset_host_step_times,
        "Sets host_step_times() back to zero.");
  m.def("num_realigned_launches", &runtime::num_realigned_launches,
        "Triton launches that first copied a buffer whose address is not a multiple of 16 "
        "bytes to an aligned one (Note [Buffers aligned to 16 bytes]).");
  using runtime::Executor;
  nb::class_<Executor>(m, "CompiledGraph",
                       "A graph ready to run. Calling it with the graph's non-constant inputs "
                       "returns a tuple of its outputs.")
      .def(
          "__init__",
          [](Executor* self, const tracer::TracedGraph& g, std::optional<bool> codegen,
             std::optional<bool> reductions, std::optional<bool> reduction_fusion,
             std::optional<bool> triton_interpret, bool cuda_graphs, bool matmul_templates,
             std::optional<bool> fuse_attention, nb::handle options) {
            runtime::ExecutorOptions o{.compile = compile_options_from(options)};
            if (codegen.has_value()) o.compile.sched.codegen = *codegen;
            if (reductions.has_value()) o.compile.sched.reductions = *reductions;
            if (reduction_fusion.has_value()) o.compile.sched.reduction_fusion = *reduction_fusion;
            if (triton_interpret.has_value()) o.compile.triton.interpret = *triton_interpret;
            o.compile.runtime.cuda_graphs |= cuda_graphs;
            o.compile.runtime.matmul_templates |= matmul_templates;
            if (fuse_attention.has_value()) o.compile.runtime.fuse_attention = *fuse_attention;
            new (self) Executor(g, std::move(o));
          },
          nb::arg("graph"), nb::arg("codegen").none() = nb::none(),
          nb::arg("reductions").none() = nb::none(),
          nb::arg("reduction_fusion").none() = nb::none(),
          nb::arg("triton_interpret").none() = nb::none(), nb::arg("cuda_graphs") = false,
          nb::arg("matmul_templates") = false, nb::arg("fuse_attention").none() = nb::none(),
          nb::arg("options").none() = nb::none(),
          "Prepares `graph` to run with `options` (ember.config.compile_options(); None: the "
          "current ember.config), the other arguments overriding it; with codegen, fuses pointwise "
          "nodes into generated C++ "
          "kernels (CPU graphs) or Triton kernels (CUDA graphs); cuda_graphs: replays a graph on "
          "one CUDA device as a CUDA graph from its second call on (mode='reduce-overhead'); "
          "matmul_templates: its matrix products also get Triton templates, timed against cuBLAS "
          "at their first call (mode='max-autotune'); fuse_attention: eager attention (bmm, "
          "softmax, bmm) as one scaled_dot_product_attention call (default: CUDA graphs with "
          "Triton kernels).")
      .def("__call__",
           [](const Executor& e, nb::args args) { return tensor_tuple(e.run(tensor_args(args))); })
      .def(
          "run",
          [](const Executor& e, const std::vector<at::Tensor>& inputs) { return e.run(inputs); },
          nb::arg("inputs"))
      .def("mutated_inputs_alias", &Executor::mutated_inputs_alias, nb::arg("inputs"))
      .def_prop_ro("has_mutations", &Executor::has_mutations)
      .def_prop_ro("num_kernels", &Executor::num_kernels)
      .def_prop_ro("step_seconds", &Executor::step_seconds,
                   "(name, seconds) of each step of the pipeline that compiled the graph, in "
                   "order (runtime/pipeline.h).")
      .def_prop_ro("num_fused_nodes", &Executor::num_fused_nodes)
      .def_prop_ro("num_extern_steps", &Executor::num_extern_steps)
      .def_prop_ro("num_matmul_templates", &Executor::num_matmul_templates,
                   "Matrix products with a Triton template (mode='max-autotune').")
      .def_prop_ro("num_parameter_kernels", &Executor::num_parameter_kernels,
                   "Kernels of parameters only (autocast's weight casts), whose outputs are kept "
                   "from call to call while the parameters are unchanged.")
      .def_prop_ro("num_fused_attention", &Executor::num_fused_attention,
                   "Eager attention patterns (bmm, softmax, bmm) run as one "
                   "scaled_dot_product_attention call.")
      .def_prop_ro("num_bias_apart", &Executor::num_bias_apart,
                   "Products (addmm) whose bias is added by the pointwise kernel that reads them.")
      .def_prop_ro("num_fused_epilogues", &Executor::num_fused_epilogues,
                   "Of the matrix templates, those that also run the pointwise kernel after the "
                   "product (its fused epilogue).")
      .def_prop_ro("num_matmul_templates_chosen", &Executor::num_matmul_templates_chosen,
                   "Of those, the ones whose first call found the template faster than cuBLAS.")
      .def_prop_ro("refused_kernels", &Executor::refused_kernels)
      .def_prop_ro("num_view_steps", &Executor::num_view_steps)
      .def_prop_ro("num_folded_nodes", &Executor::num_folded_nodes)
      .def_prop_ro("num_causal_attention", &Executor::num_causal_attention)
      .def_prop_ro("arena_bytes", &Executor::arena_bytes)
      .def_prop_ro("num_arena_buffers", &Executor::num_arena_buffers)
      .def_prop_ro("arena_per_call", &Executor::arena_per_call,
                   "Whether the arena is planned per call, at the call's sizes (a graph over "
                   "shape symbols).")
      .def_prop_ro("num_reused_buffers", &Executor::num_reused_buffers,
                   "Kernel outputs planned to be written into a dead input's memory (in place).")
      .def_prop_ro("num_written_through", &Executor::num_written_through,
                   "Mutation values planned to be written into their input by their kernel, "
                   "with no copy at the end (Note [Mutations written in place]).")
      .def_prop_ro("num_unwritten_outputs", &Executor::num_unwritten_outputs,
                   "Kernel outputs nothing reads after their Triton kernel, which keeps them in "
                   "registers: never written nor allocated.")
      .def("describe_steps", &Executor::describe_steps,
           "One line per step: 'kernel <name>: ops', 'view <op>' or 'extern <op>'.")
      .def_prop_ro("codegen_error", &Executor::codegen_error)
      .def("size_guards_hold", &Executor::size_guards_hold, nb::arg("inputs"),
           "Whether the trace's size guards hold for a call with `inputs` (the graph's "
           "non-constant inputs): what a caller whose own guards did not cover them checks.")
      .def_prop_ro("is_symbolic", &Executor::is_symbolic,
                   "The graph's sizes are expressions over shape symbols, bound at each call.")
      .def_prop_ro("symbolic_fallback", &Executor::symbolic_fallback,
                   "For a symbolic graph compiled once per binding of its symbols, why it was not "
                   "compiled symbolically ('compiled per size: <step>: <why>'); '' otherwise.")
      .def_prop_ro("num_specializations", &Executor::num_specializations,
                   "Static programs compiled so far for a symbolic graph compiled per binding.")
      .def_prop_ro("cuda_graph_status", &Executor::cuda_graph_status,
                   "'' while the graph is (or will be) replayed as a CUDA graph, else why not "
                   "('off' without cuda_graphs).")
      .def_prop_ro("cuda_graph_replays", &Executor::cuda_graph_replays)
      .def_prop_ro("cuda_graph_recaptures", &Executor::cuda_graph_recaptures,
                   "CUDA graphs captured again because parameters or buffers moved.")
      .def_prop_ro("kernel_sources", &Executor::kernel_sources)
      .def_prop_ro("num_inputs", &Executor::num_user_inputs)
      .def_prop_ro("num_nodes", [](const Executor& e) { return e.graph().nodes.size(); });
}

}  // namespace ember::python
