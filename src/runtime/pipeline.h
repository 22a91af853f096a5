/// \file
/// The pipeline: how a traced graph becomes a Program (runtime/program.h), as one ordered list of
/// named steps. compile_graph runs them in this order:
///
///   1. causal_attention      graph pass: a constant causal mask becomes is_causal
///                            (runtime/causal_attention.h)
///   2. fold_constants        graph pass: nodes that depend on no input run once, now
///                            (runtime/constant_fold.h)
///   3. choose_target         C++ kernels on the CPU, Triton on one CUDA device, or none
///   4. fuse_attention        graph pass: eager attention (bmm, softmax, bmm) becomes one
///                            ember::fused_attention node, an SDPA call
///                            (runtime/attention_fusion.h); then, on Triton graphs with
///      bias_apart            CompileOptions::Runtime::bias_apart (off by default), graph
///                            pass: an addmm only pointwise ops read becomes mm and an add
///                            (runtime/bias_apart.h)
///   5. hoist_collectives,    graph passes: a functional collective goes just after what it
///      sink_collective_waits depends on, its wait just before the first node that reads its
///                            result (runtime/collectives.h)
///   6. bind_inputs           where each graph input and constant lives in the program
///   7. schedule              fused kernel groups and the order of steps (sched/fusion.h)
///   8. generate_kernels      emit, compile and load the kernels (C++ or Triton, in rounds
///                            around the kernels Triton refuses) and build the steps: extern
///                            calls, views, kernels, matmul templates
///   9. plan_lifetimes        each value's last use: where the program releases it (a
///                            collective's inputs: at its wait)
///  10. mark_parameter_kernels, plan_reuse, plan_mutation_writes, plan_memory
///                            what the kernels' outputs are written into (executor_memory.cpp)
///  11. decide_cuda_graphs    whether calls replay a CUDA graph (mode="reduce-overhead")
///
/// Steps 1 and 2 run only with CompileOptions::Runtime::fold_constants, step 4 where
/// fuses_attention says (bias_apart where its option is on). After each step one hook records its
/// time (Program::step_seconds); after a graph pass (1, 2, 4, 5: the only steps that change the
/// graph) that rewrote nodes, it runs the
/// verifier (an InternalError names the step) and with CompileOptions::Debug::dump_pipeline
/// prints the graph to stderr. Each step is a free function
/// with its contract below; the Executor (runtime/executor.h) only executes the program.
#pragma once

#include <c10/core/Device.h>

#include <vector>

#include "runtime/program.h"
#include "sched/fusion.h"

namespace ember::runtime {

/// Compiles `traced` with `options`: the steps above, in order. Throws Unsupported if an
/// operator is not registered in this process; a kernel that cannot be generated or compiled
/// leaves its nodes (or, past a few rounds, the whole graph) to ATen calls, with the reason in
/// Program::refused_kernels or Program::codegen_error.
Program compile_graph(tracer::TracedGraph traced, const ExecutorOptions& options);

/// Where a graph's kernels run.
struct Target {
  bool cpu = false;      ///< every value is on the CPU
  int cuda_device = -1;  ///< the one CUDA device every value not on the CPU is on
  bool triton = false;   ///< kernels are Triton kernels (a CUDA device, or the interpreter)
  c10::Device device = c10::Device(c10::DeviceType::CPU);  ///< where kernels' buffers live
};

/// Step 6. Fills p.input_slots, p.constant_slots and p.mutated_input_positions from the graph's
/// inputs and mutations. Requires: p.traced has one constant tensor per constant input.
void bind_inputs(Program& p);

/// Step 3. The target of p's kernels; for Triton on a CUDA device, moves the CPU scalars the
/// graph holds as constants to the device (kernels read constants from device memory), but
/// those a host node reads. A graph on one CUDA device that also computes on the CPU (an index
/// made by `torch.arange(n)` without a device, a mask built on the host) gets kernels for the
/// rest: its host nodes (host_nodes(), found again by step 7 on the graph the passes between
/// leave) stay ATen calls, and it gets no CUDA graph.
Target choose_target(Program& p);

/// The nodes of `g` that read or write a CPU tensor other than a 0-dim graph input, and the
/// nodes that read a 0-dim CPU input that such a node reads (to a fixed point): kernels never
/// read host memory, and ATen on the CPU never reads device memory. Empty when there are none.
/// `kept_on_cpu` (by value id): the 0-dim CPU inputs a host node reads. `constants_on_device`:
/// constant inputs count as on the device whatever their type says (ember._C.triton_plan: a
/// graph traced for cuda:0 from a CPU module holds the module's state as CPU constants).
std::vector<bool> host_nodes(const graph::Graph& g, std::vector<bool>* kept_on_cpu = nullptr,
                             bool constants_on_device = false);

/// Whether step 4 runs: CompileOptions::Runtime::fuse_attention 1, or -1 (the default) for
/// Triton kernels on a CUDA device; and only where the graph gets kernels (sched.codegen, on the
/// CPU or with Triton), as the fused kernels replace the softmax's. Graphs over shape symbols
/// follow the same rule as static ones (their softmax is a reduction kernel too).
bool fuses_attention(const CompileOptions& o, const Target& t);

/// Step 7. The schedule options the target and p.options give, and the plan.
sched::Plan schedule(const Program& p, const Target& t, sched::ScheduleOptions* options);

/// Step 8. Emits, compiles and loads the kernels of `plan` and fills p.steps, p.kernels,
/// p.libraries, p.kernel_sources and the counters; builds p.unfused (the same graph without
/// kernels). A kernel Triton refuses leaves its nodes to ATen and the graph is scheduled again
/// (`plan`, `options` updated), a few rounds at most; a kernel that fails to compile, or the last
/// round, makes the whole graph unfused (p.codegen_error says why). Guarantees: p.steps holds
/// every node of the graph exactly once, as a kernel's, a view's or an extern call's.
void generate_kernels(Program& p, const Target& t, sched::Plan& plan,
                      sched::ScheduleOptions& options);

/// mode="max-autotune", within step 7: gives the extern matrix products of a graph on CUDA
/// device `device` their templates (one compile batch); `device` -1: a CPU graph whose Triton
/// kernels run in Triton's interpreter (tests), the templates too. A pointwise kernel that is the
/// only reader of a product becomes the template's epilogue (`group_of_kernel`: each kernel's
/// group in `plan`). `max_products` > 0: only the products of at most that many multiply-adds,
/// each with the configurations of small products (Note [Launch-bound products]).
/// (executor_matmul.cpp)
void attach_matmul_templates(Program& p, int device, const sched::Plan& plan,
                             const std::vector<int>& group_of_kernel, int64_t max_products = 0);

/// The element types of a group's buffers: its inputs, then its outputs (a Triton kernel's
/// signature).
std::vector<at::ScalarType> buffer_types(const Program& p, const sched::KernelGroup& group);

/// For each value, the step that defines it and the step of its last use (p.steps.size(): kept
/// to the end of the call; -1: none).
struct Lifetimes {
  std::vector<int> last_use, defined_at;
};

/// Step 9. Each value's lifetime, and the release list of each step: an intermediate goes after
/// its last reader (or where it is defined, if nothing reads it), a functional collective's
/// inputs after its wait (the collective may read them until then); outputs, mutation values and
/// constants stay; inputs stay unless `release_inputs` (and the graph mutates no input).
Lifetimes plan_lifetimes(Program& p, bool release_inputs);

/// Step 10, executor_memory.cpp. Gives Kernel::parameter_cache to kernels that read parameters
/// only (not ones the graph mutates) and write nothing the caller sees.
void mark_parameter_kernels(Program& p);
/// Lets kernel outputs take over dead inputs' memory (Kernel::Output::reuse_input): an input
/// that an extern step returned as fresh memory, that nothing reads after the kernel, and that
/// nothing aliases.
void plan_reuse(Program& p, const Lifetimes& life);
/// Note [Mutations written in place] (executor_memory.cpp).
void plan_mutation_writes(Program& p, const Lifetimes& life);
/// Places kernel outputs that only live inside a call in one arena (sched/memory_plan.h), planned
/// here when every size is a constant, else per call (Note [An arena over shape symbols]). C++
/// kernels only (the arena is host memory).
void plan_memory(Program& p, const Lifetimes& life);

/// Step 11. With CompileOptions::Runtime::cuda_graphs, a CudaGraphRunner for a graph on one CUDA
/// device that mutates no input, draws no random numbers and is not verified; else
/// p.cuda_graph_note says why not.
void decide_cuda_graphs(Program& p, const Target& t);

}  // namespace ember::runtime
