/// \file
/// The fusion scheduler: partitions a traced Graph into steps, each an extern ATen call (one node)
/// or a generated kernel, and builds each kernel's loop IR. The sched stage sees both IRs: it
/// depends on graph and loop.
///
/// Every fusible value (pointwise ops, and the view, layout and indexing ops of index_ops.h) is an
/// index function: its element at an index, an expression of its inputs' elements. Producers are
/// inlined into their consumers with the index substituted, so fusion goes through views. A
/// value is realized (written to memory by a kernel) only where something outside the fused code
/// needs it, or where recomputing it would cost too much; views needed outside stay ATen calls
/// (they cost no copy and keep eager's aliasing). Reductions (softmax, layer_norm, sum, var,
/// argmax, ...) are one-node kernel groups (reduction.h). See docs/design/scheduler.md.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "loop/stmt.h"

namespace ember::sched {

/// A fused group (values of one shape written by one loop nest), or one reduction node, and its
/// kernel.
struct KernelGroup {
  /// Graph nodes computed in the kernel, in graph order. A node may be in several groups (a cheap
  /// value recomputed by each of its readers), and views read through are listed too.
  std::vector<int32_t> nodes;
  std::vector<graph::ValueId> inputs;  ///< realized values read, in buffer order
  /// Values written, buffer order after the inputs: in node order, and for a node with several
  /// outputs (native_layer_norm) the needed ones in output order.
  std::vector<graph::ValueId> outputs;
  loop::Kernel kernel;  ///< buffers: inputs then outputs (then the status); no size variables
  /// The kernel reads elements at indices loaded from index tensors (embedding, gather, ...). Its
  /// last buffer, after the outputs, is a b8[1] status: the kernel first checks every index and
  /// sets it to true, writing nothing else, when one is out of range (eager raises there); the
  /// runtime then reruns the call unfused so that the ATen op raises eager's error.
  bool index_status = false;
  /// (input, output) pairs where the output may be written into the input's memory: same dtype,
  /// sizes and strides, and the kernel reads the input only at the element it writes of the
  /// output (and not as an index tensor). Whether it is, is the runtime's choice (the input must
  /// be dead after the kernel and own its memory alone). Each value at most once.
  std::vector<std::pair<graph::ValueId, graph::ValueId>> reuse;
};

/// One step of the program:
///  - Extern: run node `index` as an ATen call;
///  - Kernel: run group `index`;
///  - View: make each output of view node `index` (a chain of views) as a view of `root`, the
///    realized value at the end of the chain, at the output's traced sizes and strides and at
///    root's storage offset plus the difference of their traced offsets (as_strided): one cheap
///    step instead of one ATen call per view of the chain.
struct PlanStep {
  enum class Kind : uint8_t { Extern, Kernel, View };
  Kind kind = Kind::Extern;
  int32_t index = -1;
  graph::ValueId root = -1;  ///< View steps only
};

struct Plan {
  std::vector<KernelGroup> groups;
  std::vector<PlanStep> steps;
  int num_fused_nodes = 0;  ///< distinct graph nodes inside kernels
  /// Where schedule_graph's time went, for compile-time reports: ("schedule/<phase>", seconds),
  /// the build phase's name counting its builds ("schedule/build x3 (2 for instance limits)").
  std::vector<std::pair<std::string, double>> phase_seconds;
};

/// Whether kernels may read or write a tensor on `d`: the CPU (C++ kernels) or a CUDA device
/// (Triton kernels). The executor schedules with fuse only a graph on one of them (0-dim CPU
/// scalars aside, which it moves to the graph's device).
inline bool kernel_device(const graph::Device& d) {
  return d.kind == graph::DeviceKind::CPU || d.kind == graph::DeviceKind::CUDA;
}

struct ScheduleOptions {
  /// Outer loops of kernels with at least this many elements run in parallel (OpenMP).
  int64_t parallel_threshold = 32768;
  /// Whether to fuse at all; false gives a plan of extern steps only.
  bool fuse = true;
  /// Whether reductions (softmax, layer_norm, sum, ...) become kernels (reduction.h); false leaves
  /// them to ATen.
  bool reductions = true;
  /// Whether reduction kernels also compute their input inline (a prologue) and store the values
  /// of its shape that follow (epilogues); see docs/design/scheduler.md.
  bool reduction_fusion = true;
  /// How a kernel that gathers through an index tensor checks its indices. false (the CPU): every
  /// index first, serially, and the loops only when all are in range, the result in a status
  /// buffer (KernelGroup::index_status) so the runtime can run the unfused ops, which raise.
  /// true (Triton): each index read is wrapped in check_index (loop/calls.def), which stops the
  /// kernel with a device-side assert, as eager's CUDA index kernels do; no status buffer.
  bool index_asserts = false;
  /// Nodes (by index) that stay ATen calls whatever their kind: those of kernels a code generator
  /// refused (the executor schedules again without them). Shorter than the graph: the rest fuse.
  std::vector<bool> extern_nodes;
  /// Whether a reduction to a single row (a full sum) runs its elements in parallel chunks with
  /// partial accumulators (OpenMP on the CPU). The Triton emitter runs a row in one program and
  /// refuses the chunks, so its graphs set it false (the tracer splits large CUDA reductions in
  /// stages instead: rewrite/split_reduction.h).
  bool chunk_single_rows = true;
  /// Whether independent pointwise kernels are merged into combo kernels (combo.h: horizontal
  /// fusion), one launch each.
  bool combo_kernels = true;
  /// Whether a reduction kernel may also store a value of its input's shape that its prologue
  /// reads and that the open kernel would store alone (Note [Stored prologues] in fusion.cpp: a
  /// residual add before its layer's RMSNorm). CompileOptions::Sched::stored_prologues.
  bool stored_prologues = true;
  /// Whether a reduction kernel that passes over its row more than once (layer norm, softmax,
  /// variance, logsumexp) computes a fused prologue once per element, keeping it in a scratch
  /// row that the later passes read, instead of computing it again in each pass (Note [A
  /// prologue kept in a scratch row] in reduction.cpp). The C++ kernels; the Triton emitter keeps
  /// a persistent row in registers already, and its graphs set it false.
  bool keep_prologue_rows = true;
  /// A reduction kernel over a kept dim of stride 1 (column tiles; reduction_loops.h) with fewer
  /// tiles than `min_parallel_rows` cuts its tiles smaller, to `min_outer_tile` columns at the
  /// least, so that its parallel loop has work for the machine: 4 iterations for a CPU's threads,
  /// 128 programs for a GPU (Triton graphs set 128 and 16: a tile of 16 halves is one 32-byte
  /// sector of each row).
  int64_t min_parallel_rows = 4;
  int64_t min_outer_tile = 32;
  /// Whether depthwise convolutions (depthwise_conv.h) are computed in the kernels that read them
  /// instead of as ATen calls (off by default: Note [Depthwise kernels, measured] there).
  bool depthwise_convolutions = false;
};

/// Requires a verifier-valid graph whose tensors are all on the CPU (C++ kernels) or all on one
/// CUDA device but 0-dim CPU scalars (Triton kernels). Guarantees:
///  - every extern node is exactly one extern step; a view that something outside the kernels
///    needs is one view step; every other node is computed inside the kernels that need it, or
///    dropped when nothing needs it (fusible nodes have no side effects);
///  - steps are in an order where each reads only values defined by earlier steps or graph
///    inputs;
///  - every graph output, mutation value and argument of an extern step is a graph input, the
///    output of an extern or view step, or a kernel output; a view needed there is a view step,
///    so outputs alias as in eager;
///  - a kernel writes its outputs with the traced sizes and strides and reads realized values at
///    their traced strides and storage offsets relative to the buffer it reads (the runtime
///    checks graph inputs' strides);
///  - with `combo_kernels`, independent pointwise kernels are merged (combine_kernels, combo.h).
Plan schedule_graph(const graph::Graph& g, const ScheduleOptions& options = {});

/// Who reads and writes each value in `plan` (requires a plan of `g`).
struct PlanUses {
  /// Per value, the steps reading it in step order (a kernel's inputs, an extern node's tensor
  /// arguments, a view step's root), then -1 when it is a graph output or mutation value.
  std::vector<std::vector<int>> readers;
  /// Per value, the step writing it (a kernel's output, an extern or view node's output); -1
  /// for graph inputs and values no step writes (computed inside kernels only).
  std::vector<int> producer;
};
PlanUses plan_uses(const graph::Graph& g, const Plan& plan);

/// Per group of `plan`, its outputs that nothing reads after its kernel: no later step takes them
/// (as a kernel input, an extern argument or a view's root) and they are not graph outputs or
/// mutation values. Only the kernel's own fused nodes read them (a softmax's f32 result that its
/// epilogue casts to bf16), so a backend that keeps those reads in registers need not write them
/// (codegen::emit_triton's private buffers). Requires `plan` to be a plan of `g`.
std::vector<std::vector<graph::ValueId>> private_outputs(const graph::Graph& g, const Plan& plan);

}  // namespace ember::sched
