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

#include "runtime/attention_fusion.h"
#include "runtime/cuda_graph.h"
#include "runtime/extern_call.h"
#include "runtime/host_compiler.h"
#include "runtime/matmul_template.h"
#include "runtime/triton_runtime.h"
#include "support/options.h"
#include "tracer/trace_session.h"

namespace ember::sched {
struct KernelGroup;
struct Plan;
}  // namespace ember::sched

namespace ember::runtime {

struct ParameterCache;  // executor.cpp: a kernel of parameters' outputs, kept across calls

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
};

/// Whether the bytes `a` and `b` can reach overlap: one storage and intersecting ranges (views
/// of one tensor that touch disjoint ranges do not overlap; interleaved ones are said to).
bool memory_overlaps(const at::Tensor& a, const at::Tensor& b);

/// Whether an input at one of the positions `which` overlaps another input in memory.
bool any_shares_storage(const std::vector<at::Tensor>& inputs, const std::vector<size_t>& which);

class Executor {
 public:
  /// Resolves every extern node's operator, pre-builds constant arguments, and (with codegen)
  /// schedules, generates and compiles the kernels, in parallel and through the kernel cache. A
  /// kernel that fails to compile makes the whole graph run unfused (see codegen_error()).
  /// Throws Unsupported if an operator is not registered in this process.
  explicit Executor(tracer::TracedGraph traced, ExecutorOptions options = {});
  ~Executor();

  /// Runs the graph. `inputs` are the graph's non-constant inputs, in order. Checks that each has
  /// the dtype and sizes the graph was traced with (UserError otherwise). Inputs whose strides
  /// differ from the traced ones run unfused (kernels bake strides in). Applies the graph's input
  /// mutations, then returns its outputs.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;
  /// The same, taking the caller's references to the inputs (see release_inputs).
  std::vector<at::Tensor> run(std::vector<at::Tensor>&& inputs) const;

  /// True when the graph mutates an input that shares memory with another input. The graph was
  /// traced assuming inputs do not alias, so such a call must run eagerly instead.
  bool mutated_inputs_alias(const std::vector<at::Tensor>& inputs) const;
  bool has_mutations() const { return !traced_.graph.mutations.empty(); }

  const graph::Graph& graph() const { return traced_.graph; }
  size_t num_user_inputs() const { return input_slots_.size(); }
  /// Kernel steps (a kernel replaced by a fused attention call is not one).
  int num_kernels() const;
  int num_fused_nodes() const { return num_fused_nodes_; }
  /// Memory planning: the per-call arena's size, and how many kernel outputs live in it.
  int64_t arena_bytes() const { return arena_bytes_; }
  int num_arena_buffers() const { return num_arena_buffers_; }
  /// Kernel outputs planned to be written into a dead input's memory (in place).
  int num_reused_buffers() const { return num_reused_buffers_; }
  /// Mutation values that kernels write into their input directly (no copy at the end).
  int num_written_through() const { return num_written_through_; }
  /// Kernel outputs that nothing reads after their kernel and that its Triton form keeps in
  /// registers: never written nor allocated (a softmax's f32 result cast to bf16 in its kernel).
  int num_unwritten_outputs() const { return num_unwritten_outputs_; }
  /// Calls that ran the unfused program because an input's strides differ from the traced ones.
  int64_t num_unfused_runs() const { return unfused_runs_.load(std::memory_order_relaxed); }
  /// Nodes computed once at construction by constant folding.
  int num_folded_nodes() const { return num_folded_nodes_; }
  /// Attention nodes whose constant causal mask became is_causal (runtime/causal_attention.h).
  int num_causal_attention() const { return num_causal_attention_; }
  /// Steps that are boxed ATen calls.
  int num_extern_steps() const;
  /// Extern matrix products with a Triton template (mode="max-autotune"), and how many of them
  /// run it (their first call found it faster than cuBLAS).
  int num_matmul_templates() const;
  int num_matmul_templates_chosen() const;
  /// Of the templates, those with a fused epilogue (the pointwise kernel after the product).
  int num_fused_epilogues() const;
  /// Eager attention patterns run as one scaled_dot_product_attention call.
  int num_fused_attention() const { return num_fused_attention_; }
  /// Kernels whose outputs depend on parameters only and are kept across calls (see
  /// Kernel::parameter_cache; not with CUDA graphs).
  int num_parameter_kernels() const;
  /// Steps that make views of a realized tensor directly from its storage (see View): one per
  /// chain of views the scheduler collapsed, or one per view op left outside kernels.
  int num_view_steps() const;
  /// Why code generation was abandoned for this graph; empty if it was not.
  const std::string& codegen_error() const { return codegen_error_; }
  /// Why each kernel the code generator refused has no generated form; their nodes run as ATen
  /// calls while the rest of the graph still runs in kernels (Triton graphs).
  const std::vector<std::string>& refused_kernels() const { return refused_kernels_; }
  /// Copies made at run time because an extern op returned another layout or dtype than its
  /// meta kernel promised (a kernel's input or a view step's root), over every call so far, and
  /// which values they were (the first few, as "<step>: input i (%v) <sizes> <strides>").
  int64_t num_layout_copies() const { return layout_copies_.load(std::memory_order_relaxed); }
  std::vector<std::string> layout_copy_notes() const;
  /// One line per step, in order: "kernel <name>: op, op, ..." for a generated kernel with the
  /// nodes it fuses, "view <op>" for a view step, "extern <op>" for a dispatcher call.
  std::vector<std::string> describe_steps() const;
  /// The generated C++ translation units (each holds one or more kernels).
  const std::vector<std::string>& kernel_sources() const { return kernel_sources_; }
  /// With ExecutorOptions::cuda_graphs: "" while the graph is (or will be) replayed as a CUDA
  /// graph, else why it is not. "off" without the option.
  std::string cuda_graph_status() const;
  /// Calls served by replaying the CUDA graph.
  int64_t cuda_graph_replays() const { return cuda_graph_ ? cuda_graph_->replays() : 0; }

 private:
  struct Kernel {
    using Fn = void (*)(void* const*, const int64_t*);
    /// How to allocate one output: traced sizes and strides, decided at compile time.
    struct Output {
      std::vector<int64_t> sizes, strides;
      at::TensorOptions options;
      /// Byte offset in the per-call arena (sched/memory_plan.h), or -1: its own allocation
      /// (graph outputs, values a mutation writes back, and what aliases them).
      int64_t arena_offset = -1;
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
  };
  struct View {
    graph::ValueId root = -1;
    std::vector<int64_t> root_sizes, root_strides;  ///< traced layout the views assume
    std::vector<ViewOutput> outputs;
    std::string description;  ///< "view <op>"
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
    /// An extern step that runs eager attention's three steps as one SDPA call instead of its
    /// node (the second product).
    std::optional<FusedAttention> attention;
    int fused_into = -1;  ///< the product's step: the kernel step its epilogue fuses into
  };
  /// mode="max-autotune": gives the extern matrix products of a graph on CUDA device `device`
  /// their templates (one compile batch); `device` -1: a CPU graph whose Triton kernels run in
  /// Triton's interpreter (tests), the templates too.
  /// A pointwise kernel that is the only reader of a product becomes the template's epilogue
  /// (`group_of_kernel`: each kernel's group in `plan`).
  void attach_matmul_templates(int device, const sched::Plan& plan,
                               const std::vector<int>& group_of_kernel);
  /// Replaces the plan's eager attention patterns (runtime/attention_fusion.h) in steps_, which
  /// must be the plan's steps in order.
  void fuse_attention(const sched::Plan& plan);
  /// The value of a 0-dim floating constant graph input (an attention's scale).
  std::function<std::optional<double>(graph::ValueId)> attention_constant() const;
  /// Runs kernel step `s` as its product's fused template when that won; false otherwise
  /// (the caller computes the product, if skipped, and runs the kernel).
  bool run_fused_step(const Step& step, std::vector<at::Tensor>& env) const;
  /// The first call of a fused step: times the fused template against the product and the
  /// kernel (on scratch outputs), after the kernel ran.
  void decide_fused_step(const Step& step, std::vector<at::Tensor>& env,
                         torch::jit::Stack& stack) const;

  Step extern_step(int32_t node) const;
  /// The values a step reads: a kernel's inputs, a view's root, a fused attention's q, k^T, v
  /// and mask, an extern call's arguments.
  std::vector<graph::ValueId> step_reads(const Step& step) const;
  /// The Triton kernel of a group, named by its content. Throws Unsupported when the group has
  /// no Triton form.
  /// `private_outputs`: the group's outputs nothing reads after it (sched::private_outputs).
  codegen::TritonKernel triton_form(const sched::KernelGroup& group,
                                    const std::vector<graph::ValueId>& private_outputs,
                                    const CompileOptions::Triton& options) const;
  /// The element types of a group's buffers: its inputs, then its outputs.
  std::vector<at::ScalarType> buffer_types(const sched::KernelGroup& group) const;
  Step view_step(int32_t node, graph::ValueId root) const;
  std::optional<View> view_of(const graph::Node& node, const c10::FunctionSchema& schema) const;
  /// Runs one kernel; false when it reported an out-of-range index (and wrote nothing).
  /// `write_through`: outputs marked Output::write_through may be written into their input.
  bool run_kernel(const Kernel& k, std::vector<at::Tensor>& env, const at::Tensor& arena,
                  bool write_through = false) const;
  /// Places kernel outputs that only live inside a call in one arena (memory planning).
  void plan_memory(const std::vector<int>& last_use);
  /// Gives Kernel::parameter_cache to kernels that read parameters only (not ones the graph
  /// mutates) and write nothing the caller sees.
  void mark_parameter_kernels();
  /// Lets kernel outputs take over dead inputs' memory (Kernel::Output::reuse_input): an input
  /// that an extern step returned as fresh memory, that nothing reads after the kernel, and that
  /// nothing aliases.
  void plan_reuse(const std::vector<int>& last_use, const std::vector<int>& defined_at);
  int num_reused_buffers_ = 0;
  /// Note [Mutations written in place] (executor_memory.cpp).
  void plan_mutation_writes(const std::vector<int>& defined_at);
  /// Whether no two of a call's inputs (in `env`) share a storage: mutations may then be written
  /// in place.
  bool inputs_own_their_storage(const std::vector<at::Tensor>& env) const;
  int num_written_through_ = 0;
  int num_unwritten_outputs_ = 0;
  mutable std::atomic<int64_t> unfused_runs_{0};
  mutable std::atomic<int64_t> layout_copies_{0};
  mutable std::mutex layout_notes_mu_;
  mutable std::vector<std::string> layout_copy_notes_;
  void note_layout_copy(const std::string& where, const at::Tensor& got) const;
  int num_fused_attention_ = 0;
  /// Makes a view step's views. False when the root does not have the traced layout and the step
  /// is an extern view op (then the caller makes the dispatcher call); a collapsed chain then
  /// views a copy of the root in the traced layout.
  bool run_view(const Step& step, std::vector<at::Tensor>& env) const;
  bool strides_match(const std::vector<at::Tensor>& inputs) const;
  /// run() after its checks of the inputs: the program of steps.
  void check_inputs(const std::vector<at::Tensor>& inputs) const;
  /// `owned`: the inputs to move into the program's values (run(&&)), else nullptr.
  std::vector<at::Tensor> run_program(const std::vector<at::Tensor>& inputs,
                                      std::vector<at::Tensor>* owned = nullptr) const;
  /// CompileOptions::Debug::verify_kernels (runtime/kernel_check.cpp): every value of the unfused
  /// program run on `inputs`, none released and no mutation applied, the reference for
  /// check_kernel.
  std::vector<at::Tensor> reference_values(const std::vector<at::Tensor>& inputs) const;
  /// Runs kernel `k` on the reference values of its inputs and reports (stderr) outputs that
  /// differ from the reference's beyond the tolerance of their dtype.
  void check_kernel(const Kernel& k, const std::vector<at::Tensor>& reference) const;

  tracer::TracedGraph traced_;
  CompileOptions options_;
  std::vector<graph::ValueId> input_slots_;  ///< value of each non-constant input
  std::vector<std::pair<graph::ValueId, int>> constant_slots_;  ///< value, index in constants
  std::vector<Step> steps_;
  std::vector<Kernel> kernels_;
  std::vector<std::shared_ptr<KernelLibrary>> libraries_;
  std::vector<std::string> kernel_sources_;
  std::vector<size_t> mutated_input_positions_;  ///< positions in `inputs` of mutated inputs
  int num_fused_nodes_ = 0;
  int num_folded_nodes_ = 0;
  int num_causal_attention_ = 0;
  bool release_inputs_ = false;
  int64_t arena_bytes_ = 0;  ///< 0: no arena
  int num_arena_buffers_ = 0;
  /// Arenas of finished calls, kept for the next ones (one per call running at once): large
  /// buffers freed and allocated again on every call would be page-faulted in every time.
  mutable std::mutex arena_mu_;
  mutable std::vector<at::Tensor> free_arenas_;
  std::string codegen_error_;
  std::vector<std::string> refused_kernels_;
  bool triton_ = false;  ///< kernels are Triton kernels
  /// The same graph without kernels, for calls whose input strides differ from the traced ones.
  std::unique_ptr<Executor> unfused_;
  std::unique_ptr<CudaGraphRunner> cuda_graph_;
  std::string cuda_graph_note_ = "off";  ///< why cuda_graph_ is null
};

}  // namespace ember::runtime
