/// \file
/// A compiled program: what compile_graph (runtime/pipeline.h) makes of a traced graph, and what
/// an Executor (runtime/executor.h) runs, per call, with no Python. Plain data: the steps (kernel
/// calls, views made from storage, boxed ATen calls and matmul templates), the
/// kernels and the libraries that hold their code, where each graph input and constant lives,
/// the memory plan, what the pipeline decided (and why it gave up on something), and what each
/// step of the pipeline cost.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda_graph.h"
#include "runtime/extern_call.h"
#include "runtime/host_compiler.h"
#include "runtime/matmul_template.h"
#include "runtime/specialize.h"
#include "runtime/triton_runtime.h"
#include "sched/memory_plan.h"
#include "support/options.h"
#include "tracer/trace_session.h"

namespace ember::runtime {

class Executor;
struct ParameterCache;  // executor_internal.h: a kernel of parameters' outputs, kept across calls

struct ExecutorOptions {
  /// The knobs of compilation (support/options.h): scheduling, code generation, Triton, the
  /// runtime's choices (constant folding, CUDA graphs, matmul templates, attention fusion, the
  /// parameter cache) and debugging.
  CompileOptions compile;
  /// Inputs are dropped at their last use, not kept to the end of the call: with run(&&), which
  /// takes the caller's references, an input's memory goes as soon as the program is done with
  /// it. For the backward of a training graph, whose saved activations eager autograd frees node
  /// by node. (A kernel that finds an out-of-range index then raises instead of rerunning the
  /// call unfused.)
  bool release_inputs = false;
  /// For a graph over shape symbols: the caller passes the symbols' values (run(inputs, symbols))
  /// and an input need not have a bare symbol as a size. The backward of a training graph, whose
  /// inputs (saved values, tangents) may show a symbol only inside a product (a flattened
  /// [s0*s1, C]), gets the forward call's values.
  bool symbols_from_caller = false;
};

/// A generated kernel of the program (C++ through a function pointer, or Triton).
struct Kernel {
  using Fn = void (*)(void* const*, const int64_t*);
  /// How to allocate one output: traced sizes and strides, decided at compile time.
  struct Output {
    std::vector<int64_t> sizes, strides;
    at::TensorOptions options;
    /// Its slot in the per-call arena (Program::arena), or -1: its own allocation (graph
    /// outputs, values a mutation writes back, and what aliases them).
    int arena_slot = -1;
    /// Index in `inputs` of a dead input whose memory this output takes over (written in
    /// place, see sched::KernelGroup::reuse), or -1. Checked per call: the input must be the
    /// only reference to its storage, in the traced layout; else a fresh allocation.
    int reuse_input = -1;
    /// reuse_input is the graph input this output is written back into (a mutation), which
    /// the caller holds: written there directly instead of copied at the end
    /// (plan_mutation_writes). Checked per call: the traced layout, and no other input shares
    /// its storage.
    bool write_through = false;
    /// A private output the Triton kernel never writes (codegen::TritonKernel::unused_buffers):
    /// an empty tensor stands in for it.
    bool unused = false;
  };
  Fn fn = nullptr;
  std::shared_ptr<TritonLaunchable> triton;  ///< instead of `fn`: a Triton kernel
  std::vector<graph::ValueId> inputs, outputs;
  std::vector<Output> allocations;  ///< one per output
  bool index_status = false;        ///< see sched::KernelGroup::index_status
  /// The traced sizes and strides of each input: the kernel reads inputs at these strides, so
  /// an input that arrives with others (an extern op whose result's layout differs from its
  /// meta kernel's) is first copied into this layout.
  std::vector<Output> input_layouts;
  std::string description;  ///< "kernel <name>: <ops of its nodes>"
  /// Its range in torch.profiler's host timeline: "ember::<kernel name>" (run_program records
  /// one per launch while a profiler is on; otherwise the range costs a flag test).
  std::string profile_name;
  /// A kernel over shape symbols (sched/size_expr.h): the symbol id of each size argument it
  /// takes (loop::Kernel::size_vars, in order), and its inputs' and outputs' sizes and strides as
  /// expressions (`allocations` then hold only the options and the arena slot, and
  /// `input_layouts` is empty: inputs are checked, and outputs made, per call at that call's
  /// sizes; never written into a dead input).
  bool symbolic = false;
  std::vector<int> size_symbols;
  std::vector<std::pair<graph::Dims, graph::Dims>> symbolic_inputs, symbolic_outputs;
  /// sched::KernelGroup::reuse: candidates, decided by plan_reuse.
  std::vector<std::pair<graph::ValueId, graph::ValueId>> reuse;
  /// A kernel of parameters and buffers only (autocast's casts of the weights, a batch norm's
  /// per-channel terms in inference): its outputs are kept from call to call while every input
  /// is the same tensor at the same version (ParameterCache).
  std::shared_ptr<ParameterCache> parameter_cache;
};
/// Views made directly from a realized tensor's storage (a TensorImpl with the traced sizes and
/// strides), without a dispatcher call: the outputs of a chain of views the scheduler collapsed
/// (sched::PlanStep::Kind::View), or of one view op (its schema's results alias its first
/// argument) left as an extern step.
struct ViewOutput {
  graph::ValueId value = -1;
  std::vector<int64_t> sizes, strides;
  int64_t offset_delta = 0;  ///< the view's traced storage offset minus the root's
  /// A view over shape symbols (View::symbolic): its sizes, strides and offset delta as
  /// expressions, evaluated under each call's bindings (the int64 fields are unused).
  graph::Dims symbolic_sizes, symbolic_strides;
  graph::DimExpr symbolic_offset_delta;
};
struct View {
  graph::ValueId root = -1;
  std::vector<int64_t> root_sizes, root_strides;  ///< traced layout the views assume
  std::vector<ViewOutput> outputs;
  std::string description;  ///< "view <op>"
  /// The root's or an output's type has shape symbols: the geometry is the symbolic_ fields.
  bool symbolic = false;
  graph::Dims symbolic_root_sizes, symbolic_root_strides;
};
struct Step {
  // Extern step: `call` is set (and `view` too for a view op with a fast path). Kernel step:
  // `kernel` >= 0. View step: only `view` is set.
  std::optional<ExternCall> call;
  int kernel = -1;
  std::optional<View> view;
  bool may_alias = false;               ///< its results may share memory with its arguments
  std::vector<graph::ValueId> release;  ///< values whose last use is this step
  int32_t node = -1;                    ///< an extern step's node
  /// mode="max-autotune": an extern matrix product's template, run instead of the call when
  /// it beat cuBLAS (runtime/matmul_template.h), and where its operands are.
  std::shared_ptr<MatmulTemplate> matmul;
  MatmulOperands matmul_operands;
  std::vector<int64_t> matmul_sizes, matmul_strides;  ///< the result's traced layout
  /// A kernel step whose kernel is a product's fused epilogue (MatmulTemplate::run_fused):
  /// the template, and the product's extern step (`matmul_operands` says where its operands
  /// are). Once the template won, that step is skipped and this one runs both.
  std::shared_ptr<MatmulTemplate> fused;
  int fused_product_step = -1;
  int fused_into = -1;  ///< the product's step: the kernel step its epilogue fuses into
};

/// The compiled form of one graph.
struct Program {
  tracer::TracedGraph traced;  ///< after the graph passes (causal attention, constant folding,
                               ///< attention fusion)
  CompileOptions options;
  bool symbols_from_caller = false;         ///< ExecutorOptions::symbols_from_caller
  std::vector<graph::ValueId> input_slots;  ///< value of each non-constant input
  std::vector<std::pair<graph::ValueId, int>> constant_slots;  ///< value, index in constants
  std::vector<size_t> mutated_input_positions;  ///< positions in `inputs` of mutated inputs
  std::vector<Step> steps;
  std::vector<Kernel> kernels;
  std::vector<std::shared_ptr<KernelLibrary>> libraries;
  std::vector<std::string> kernel_sources;
  bool triton = false;  ///< kernels are Triton kernels
  /// Non-constant inputs are released at their last use (ExecutorOptions::release_inputs).
  bool release_inputs = false;
  /// Kernel outputs that live inside a call only share one arena per call (plan_memory): each
  /// slot's layout (expressions over shape symbols in a symbolic program) and lifetime in steps.
  struct ArenaSlot {
    graph::Dims sizes, strides;
    int64_t itemsize = 1;
    int32_t first = 0, last = 0;
  };
  std::vector<ArenaSlot> arena_slots;
  /// Where each slot lies in the arena, when every slot's size is a constant (planned once);
  /// else planned per call at the call's sizes (Executor::arena_plan).
  std::optional<sched::ArenaPlan> arena_plan;
  /// Where the arena lives: the kernels' device (Note [An arena on the GPU]).
  c10::Device arena_device = c10::kCPU;
  int num_fused_nodes = 0;
  int num_folded_nodes = 0;
  int num_causal_attention = 0;
  int num_reused_buffers = 0;
  int num_written_through = 0;
  int num_unwritten_outputs = 0;
  int num_fused_attention = 0;
  int num_bias_apart = 0;
  std::string codegen_error;                 ///< why code generation was abandoned, or ""
  std::vector<std::string> refused_kernels;  ///< why each refused kernel has no generated form
  /// The same graph without kernels, for calls whose input strides differ from the traced ones
  /// (and the reference of verify_kernels).
  std::shared_ptr<Executor> unfused;
  std::unique_ptr<CudaGraphRunner> cuda_graph;
  std::string cuda_graph_note = "off";  ///< why cuda_graph is null
  /// Each pipeline step's name and seconds, in order (compile_graph).
  std::vector<std::pair<std::string, double>> step_seconds;
  /// Parts of steps, for compile-time reports: the scheduler's phases (sched::Plan::phase_seconds).
  std::vector<std::pair<std::string, double>> phase_seconds;
  /// A graph over shape symbols (issue 35): where each symbol takes its value at a call (every
  /// call binds them and checks its inputs' sizes). Unset for a static graph.
  std::optional<SymbolSources> symbol_sources;
  /// A symbolic graph that is compiled per binding of its symbols (runtime/specialize.h): the
  /// program then has no steps and each call runs the static program of its binding.
  std::shared_ptr<Specializations> specializations;
  std::string symbolic_fallback;  ///< why `specializations` is set, or ""
};

/// The values a step reads: a kernel's inputs, a view's root, an extern call's arguments.
std::vector<graph::ValueId> step_reads(const Program& p, const Step& step);

}  // namespace ember::runtime
