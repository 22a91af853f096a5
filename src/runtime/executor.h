/// \file
/// The executor runs a traced Graph on real tensors as a C++ program of steps, with no Python per
/// step:
///  - an extern step is one node, run as a boxed dispatcher call of its ATen operator;
///  - a kernel step is a fused group of nodes (src/sched/fusion.h), run as one generated C++
///    kernel, compiled by the host compiler and called through a function pointer, with its
///    outputs allocated at the traced sizes and strides.
/// Graphs on one CUDA device get Triton kernels instead (codegen/triton/triton_emitter.h), compiled
/// and launched by runtime/triton_runtime.h, when the Python package has installed Triton's
/// compiler and CompileOptions::Triton::enabled. A kernel that has no Triton form leaves its nodes
/// to ATen calls (refused_kernels() says why); the rest of the graph is scheduled again around
/// them. Without code generation every step is extern: the executor is then the fallback path for
/// every op and the oracle for tests.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/binding_layouts.h"
#include "runtime/program.h"

namespace ember::runtime {

/// Whether the bytes `a` and `b` can reach overlap: one storage and intersecting ranges (views
/// of one tensor that touch disjoint ranges do not overlap; interleaved ones are said to).
bool memory_overlaps(const at::Tensor& a, const at::Tensor& b);

/// Whether an input at one of the positions `which` overlaps another input in memory.
bool any_shares_storage(const std::vector<at::Tensor>& inputs, const std::vector<size_t>& which);

class Executor {
 public:
  /// Runs the program compile_graph makes of `traced` (runtime/pipeline.h): extern nodes'
  /// operators resolved, constant arguments pre-built, and (with codegen) the kernels scheduled,
  /// generated and compiled, in parallel and through the kernel cache. A kernel that fails to
  /// compile makes the whole graph run unfused (see codegen_error()). Throws Unsupported if an
  /// operator is not registered in this process.
  explicit Executor(tracer::TracedGraph traced, ExecutorOptions options = {});
  /// Runs `program`. The Executor only executes: every decision is in the program.
  explicit Executor(Program program);
  ~Executor();

  const Program& program() const { return p_; }
  /// Each pipeline step's name and seconds (compile_graph), in order.
  const std::vector<std::pair<std::string, double>>& step_seconds() const {
    return p_.step_seconds;
  }
  /// Parts of steps ("schedule/build x3 (...)"): Program::phase_seconds.
  const std::vector<std::pair<std::string, double>>& phase_seconds() const {
    return p_.phase_seconds;
  }

  /// Runs the graph. `inputs` are the graph's non-constant inputs, in order. Checks that each has
  /// the dtype and sizes the graph was traced with (UserError otherwise; for a graph over shape
  /// symbols, each symbol takes its value from the input size it is, and every input's sizes
  /// must match its type under those values). Inputs whose strides differ from the traced ones
  /// run unfused (kernels bake strides in). Applies the graph's input mutations, then returns its
  /// outputs.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;
  /// The same, taking the caller's references to the inputs (see release_inputs).
  std::vector<at::Tensor> run(std::vector<at::Tensor>&& inputs) const;
  /// The same with the values of the graph's shape symbols (by id) given by the caller
  /// (ExecutorOptions::symbols_from_caller; empty for a graph without symbols).
  std::vector<at::Tensor> run(std::vector<at::Tensor>&& inputs,
                              const std::vector<int64_t>& symbols) const;
  /// run(inputs), also giving the value of each shape symbol (by id) it bound in `*symbols`
  /// (empty for a graph without symbols): what a training graph's backward takes.
  std::vector<at::Tensor> run_and_bind(const std::vector<at::Tensor>& inputs,
                                       std::vector<int64_t>* symbols) const;

  /// True when the graph mutates an input that shares memory with another input. The graph was
  /// traced assuming inputs do not alias, so such a call must run eagerly instead.
  bool mutated_inputs_alias(const std::vector<at::Tensor>& inputs) const;
  bool has_mutations() const { return !p_.traced.graph.mutations.empty(); }

  const graph::Graph& graph() const { return p_.traced.graph; }
  size_t num_user_inputs() const { return p_.input_slots.size(); }
  /// Kernel steps.
  int num_kernels() const;
  int num_fused_nodes() const { return p_.num_fused_nodes; }
  /// Memory planning: the per-call arena's size (planned at compile time; 0 when none, or when
  /// it is planned per call at the call's sizes), and how many kernel outputs live in it.
  int64_t arena_bytes() const { return p_.arena_plan ? p_.arena_plan->total_bytes : 0; }
  int num_arena_buffers() const { return static_cast<int>(p_.arena_slots.size()); }
  /// Whether the arena is planned per call (its slots' sizes are expressions over symbols).
  bool arena_per_call() const { return !p_.arena_slots.empty() && !p_.arena_plan; }
  /// Kernel outputs planned to be written into a dead input's memory (in place).
  int num_reused_buffers() const { return p_.num_reused_buffers; }
  /// Mutation values that kernels write into their input directly (no copy at the end).
  int num_written_through() const { return p_.num_written_through; }
  /// Kernel outputs that nothing reads after their kernel and that its Triton form keeps in
  /// registers: never written nor allocated (a softmax's f32 result cast to bf16 in its kernel).
  int num_unwritten_outputs() const { return p_.num_unwritten_outputs; }
  /// Calls that ran the unfused program because an input's strides differ from the traced ones.
  int64_t num_unfused_runs() const { return unfused_runs_.load(std::memory_order_relaxed); }
  /// Nodes computed once at construction by constant folding.
  int num_folded_nodes() const { return p_.num_folded_nodes; }
  /// Attention nodes whose constant causal mask became is_causal (runtime/causal_attention.h).
  int num_causal_attention() const { return p_.num_causal_attention; }
  /// Steps that are boxed ATen calls.
  int num_extern_steps() const;
  /// Extern matrix products with a Triton template (mode="max-autotune"), and how many of them
  /// run it (their first call found it faster than cuBLAS).
  int num_matmul_templates() const;
  int num_matmul_templates_chosen() const;
  /// Of the templates, those with a fused epilogue (the pointwise kernel after the product).
  int num_fused_epilogues() const;
  /// Eager attention patterns run as one ember::fused_attention node (an SDPA call).
  int num_fused_attention() const { return p_.num_fused_attention; }
  /// Products whose bias is added by the kernel reading them (runtime/bias_apart.h).
  int num_bias_apart() const { return p_.num_bias_apart; }
  /// Kernels whose outputs depend on parameters only and are kept across calls (see
  /// Kernel::parameter_cache; with CUDA graphs, outside the replay: Note [Parameter kernels
  /// outside the replay] in cuda_graph.h).
  int num_parameter_kernels() const;
  /// Steps that make views of a realized tensor directly from its storage (see View): one per
  /// chain of views the scheduler collapsed, or one per view op left outside kernels.
  int num_view_steps() const;
  /// The graph's sizes are expressions over shape symbols (issue 35, runtime/specialize.h).
  bool is_symbolic() const { return p_.symbol_sources.has_value(); }
  /// Whether the trace's size guards (TracedGraph::size_guards) hold for a call with `inputs`,
  /// each symbol read where the program binds it (its SymbolSources, found at compile time).
  /// True for a graph without guards.
  bool size_guards_hold(const std::vector<at::Tensor>& inputs) const;
  /// For a symbolic graph compiled per binding of its symbols, why no step compiled it
  /// symbolically ("compiled per size: <step>: <why>"); empty otherwise.
  const std::string& symbolic_fallback() const { return p_.symbolic_fallback; }
  /// The static programs compiled so far for a symbolic graph compiled per binding (one per
  /// distinct binding); 0 otherwise.
  int num_specializations() const {
    return p_.specializations ? p_.specializations->num_compiled() : 0;
  }
  /// Why code generation was abandoned for this graph; empty if it was not.
  const std::string& codegen_error() const { return p_.codegen_error; }
  /// Why each kernel the code generator refused has no generated form; their nodes run as ATen
  /// calls while the rest of the graph still runs in kernels (Triton graphs).
  const std::vector<std::string>& refused_kernels() const { return p_.refused_kernels; }
  /// Copies made at run time because an extern op returned another layout or dtype than its
  /// meta kernel promised (a kernel's input or a view step's root), over every call so far, and
  /// which values they were (the first few, as "<step>: input i (%v) <sizes> <strides>").
  int64_t num_layout_copies() const { return layout_copies_.load(std::memory_order_relaxed); }
  std::vector<std::string> layout_copy_notes() const;
  /// One line per step, in order: "kernel <name>: op, op, ..." for a generated kernel with the
  /// nodes it fuses, "view <op>" for a view step, "extern <op>" for a dispatcher call.
  std::vector<std::string> describe_steps() const;
  /// The generated C++ translation units (each holds one or more kernels).
  const std::vector<std::string>& kernel_sources() const { return p_.kernel_sources; }
  /// With ExecutorOptions::cuda_graphs: "" while the graph is (or will be) replayed as a CUDA
  /// graph, else why it is not. "off" without the option.
  std::string cuda_graph_status() const;
  /// Calls served by replaying the CUDA graph.
  int64_t cuda_graph_replays() const { return p_.cuda_graph ? p_.cuda_graph->replays() : 0; }
  /// CUDA graphs captured again because parameters or buffers moved to new memory.
  int64_t cuda_graph_recaptures() const { return p_.cuda_graph ? p_.cuda_graph->recaptures() : 0; }

 private:
  /// The first call of a fused step: times the fused template against the product and the
  /// kernel (on scratch outputs), after the kernel ran.
  void decide_fused_step(const Step& step, std::vector<at::Tensor>& env,
                         torch::jit::Stack& stack) const;
  /// A call's arena: its memory and where each slot (Program::arena_slots) lies in it.
  struct CallArena {
    at::Tensor memory;
    const sched::ArenaPlan* plan = nullptr;
    std::shared_ptr<const sched::ArenaPlan> held;  ///< a plan made for this call's sizes
  };
  /// The arena of a call (`layouts`: the call's, in a symbolic program): a finished call's
  /// memory when it is large enough, else new.
  CallArena take_arena(const BindingLayouts* layouts) const;
  /// A tensor in slot `slot` of `arena`.
  static at::Tensor in_arena(const CallArena& arena, int slot, c10::IntArrayRef sizes,
                             c10::IntArrayRef strides, const at::TensorOptions& options);
  /// Runs kernel step `s` as its product's fused template when that won, its outputs where the
  /// kernel's would be (their arena slots); false otherwise (the caller computes the product,
  /// if skipped, and runs the kernel).
  bool run_fused_step(const Step& step, std::vector<at::Tensor>& env, const CallArena& arena) const;
  /// Runs one kernel; false when it reported an out-of-range index (and wrote nothing).
  /// `write_through`: outputs marked Output::write_through may be written into their input.
  /// `layouts`: a symbolic kernel's layouts at this call (BindingLayouts::kernels).
  bool run_kernel(const Kernel& k, std::vector<at::Tensor>& env, const CallArena& arena,
                  bool write_through = false,
                  const BindingLayouts::KernelLayouts* layouts = nullptr) const;
  /// For a symbolic graph: whether a call should run the static program of its binding (the
  /// graph is compiled per binding, or an input's strides differ from its type's).
  bool runs_per_binding(const std::vector<at::Tensor>& inputs,
                        const std::vector<int64_t>& symbols) const;
  /// Whether no two of a call's inputs (in `env`) share a storage: mutations may then be written
  /// in place.
  bool inputs_own_their_storage(const std::vector<at::Tensor>& env) const;
  void note_layout_copy(const std::string& where, const at::Tensor& got) const;
  /// Makes a view step's views. False when the root does not have the traced layout and the step
  /// is an extern view op (then the caller makes the dispatcher call); a collapsed chain then
  /// views a copy of the root in the traced layout. `layouts`: the view's geometry at this call,
  /// required for a symbolic view (View::symbolic); without it an extern view op runs as its
  /// call.
  bool run_view(const Step& step, std::vector<at::Tensor>& env,
                const BindingLayouts::ViewLayouts* layouts = nullptr) const;
  bool strides_match(const std::vector<at::Tensor>& inputs) const;
  /// run()'s checks of the inputs. Returns the value of each shape symbol (by id) for a
  /// symbolic graph, else nothing.
  /// `given`: the symbols' values from the caller (ExecutorOptions::symbols_from_caller).
  std::vector<int64_t> check_inputs(const std::vector<at::Tensor>& inputs,
                                    const std::vector<int64_t>* given = nullptr) const;
  std::vector<at::Tensor> run_checked(const std::vector<at::Tensor>& inputs,
                                      const std::vector<int64_t>& symbols) const;
  /// The unfused program on `inputs`, with this call's symbol values when the caller gives them.
  std::vector<at::Tensor> unfused_run(const std::vector<at::Tensor>& inputs,
                                      const std::vector<int64_t>& symbols) const;
  /// `owned`: the inputs to move into the program's values (run(&&)), else nullptr.
  std::vector<at::Tensor> run_program(const std::vector<at::Tensor>& inputs,
                                      std::vector<at::Tensor>* owned = nullptr,
                                      const std::vector<int64_t>& symbols = {}) const;
  /// CompileOptions::Debug::verify_kernels (runtime/kernel_check.cpp): every value of the unfused
  /// program run on `inputs`, none released and no mutation applied, the reference for
  /// check_kernel.
  std::vector<at::Tensor> reference_values(const std::vector<at::Tensor>& inputs) const;
  /// Runs kernel `k` on the reference values of its inputs and reports (stderr) outputs that
  /// differ from the reference's beyond the tolerance of their dtype.
  void check_kernel(const Kernel& k, const std::vector<at::Tensor>& reference) const;

  Program p_;
  mutable std::atomic<int64_t> unfused_runs_{0};
  mutable std::atomic<int64_t> layout_copies_{0};
  mutable std::mutex layout_notes_mu_;
  mutable std::vector<std::string> layout_copy_notes_;
  /// Arenas of finished calls, kept for the next ones (one per call running at once): large
  /// buffers freed and allocated again on every call would be page-faulted in every time.
  mutable std::mutex arena_mu_;
  mutable std::vector<at::Tensor> free_arenas_;
  /// A symbolic program's layouts (its arena plan among them) at its last few bindings.
  BindingLayoutCache layouts_;
};

}  // namespace ember::runtime
