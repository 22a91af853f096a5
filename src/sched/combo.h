/// \file
/// Horizontal fusion of a finished Plan: independent pointwise kernels merged into combo kernels
/// (loop::Kernel::combo), each one step and one launch. An optimizer step over N parameters is N
/// kernels of scalars and N kernels over the parameters' shapes (Note [Held kernels] in
/// fusion.cpp); merged, it is two. See Note [Combo kernels] in combo.cpp and
/// docs/design/scheduler.md, "Combo kernels".
#pragma once

#include "graph/graph.h"
#include "sched/fusion.h"

namespace ember::sched {

/// The most parts one combo kernel holds, and the most buffers (inputs and outputs of all its
/// parts): a Triton launch passes every buffer as a kernel argument (4 KiB of parameters on CUDA),
/// and the time to compile a kernel grows with its source.
constexpr int kMaxComboParts = 32;
constexpr int kMaxComboBuffers = 256;
/// The most iterations of one part. A larger kernel's launch is small beside its memory traffic
/// (4M f32 elements read and written take about 8 us at the H200's 4 TB/s), and on its own it
/// keeps its Triton form (2D tiles for a transposing read) and its own tuned block size, where a
/// combo's parts are flat and share one.
constexpr int64_t kMaxComboPartElements = int64_t{1} << 22;

/// Whether group `group` of a plan of `g` may be a part of a combo kernel: a pointwise kernel (a
/// perfect loop nest whose innermost body only binds values and stores, or such straight-line
/// code alone for 0-dim values) of at most kMaxComboPartElements iterations (extents over shape
/// symbols taken at the symbols' hints), with outputs, no index
/// status buffer, and not a kernel of parameters only (the executor keeps those kernels' outputs
/// across calls).
bool combinable(const graph::Graph& g, const KernelGroup& group);

/// Requires `plan` to be a plan of `g` made by schedule_graph without combos. Merges combinable
/// kernel steps into combo kernels: a kernel step joins the earliest combo opened after every
/// step that writes a value it reads, as long as no extern step lies between the combo and it and
/// the combo stays within kMaxComboParts and kMaxComboBuffers; the merged step runs where the
/// combo was opened. Guarantees:
///  - a combo's parts read no value another part writes (they are independent), and its kernel is
///    a loop::Kernel with `combo` set, whose parts are the parts' loop nests in step order, its
///    buffers the parts' inputs (each once) then their outputs; its nodes, inputs and outputs are
///    the union of the parts'; reuse pairs are kept where no other part reads the input;
///  - a kernel step that joins no other keeps its group unchanged, extern and view steps are
///    unchanged and keep their relative order, and no kernel moves across an extern step;
///  - every step still reads only values written by earlier steps or graph inputs (schedule_graph's
///    guarantees hold), and a plan with no two kernels to merge comes back as it was.
Plan combine_kernels(const graph::Graph& g, Plan plan);

}  // namespace ember::sched
