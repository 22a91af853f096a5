/// \file
/// Reductions as generated kernels. Each supported node is its own kernel group (see fusion.h);
/// reduction_spec.h decides which nodes qualify and what they compute, this file writes each
/// kind's kernel as a row program, and reduction_loops.h lays it out in loops. See
/// docs/design/scheduler.md ("Reductions") for the numerics and the measurements.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "loop/stmt.h"
#include "sched/fusion.h"
#include "sched/reduction_spec.h"

namespace ember::sched {

/// True when node `n` of `g` runs as a generated reduction kernel. The overloads:
///  - aten::sum, sum.dim_IntList, mean, mean.dim, prod, prod.dim_int (dtype argument None or the
///    output's), amax, amin, max, min, argmax, argmin, max.dim, min.dim, any, any.dim, any.dims,
///    all, all.dim, all.dims, var.correction, std.correction, var_mean.correction,
///    std_mean.correction, logsumexp: over any dims, keepdim either way (an empty dim list
///    reduces every dim, except for any.dims / all.dims, which reduce none);
///  - aten::_softmax, aten::_log_softmax over any one dim (half_to_float false);
///    aten::_safe_softmax (SDPA's math path: a row of -inf only is 0) with dtype None or the
///    output's (the input's, or f32 from bf16);
///  - aten::native_layer_norm, aten::native_group_norm (weight and bias absent, of the input's
///    dtype, or f32);
///  - training-mode batch norm: aten::_native_batch_norm_legit_functional (the new running
///    statistics as outputs 3 and 4), and aten::native_batch_norm and
///    aten::_native_batch_norm_legit.no_stats without running statistics; on eager's contiguous
///    path only (reduction_spec.cpp, batch_norm()).
/// Dtypes: f32, f64 and bf16 (computed in f32, as eager) everywhere; integer and bool inputs
/// where eager takes them (sum and prod give int64, any/all, amax/amin, argmax/argmin,
/// logsumexp). Every tensor must be on a kernel device; sizes and strides may be symbolic except
/// for group_norm and batch_norm (reduction_spec.h). Conservative:
/// when unsure it returns false (the node then runs as an ATen call). Never throws for a
/// verifier-valid graph. Inference-mode batch norm is not here: it is an index function
/// (batch_norm.h); native_batch_norm(training=True) with running statistics (which eager updates
/// in place) stays an ATen call (docs/design/scheduler.md, "Batch norm").
bool is_reduction_kernel_node(const graph::Graph& g, const graph::Node& n);

/// What a reduction kernel computes besides node `n` itself (the scheduler's prologue and
/// epilogue fusion, docs/design/scheduler.md). Expressions index the space of
/// analyze_reduction(g, n, /*coalesce=*/false), which is the input's dims, by element_var(d)
/// (reduction_loops.h), and name the kernel's buffers.
///  - `x`: the input's element, computed inline (after `x_lets`, in order) instead of loaded;
///    undefined: the input is a buffer of the group.
///  - `epilogue`: a statement run once per element of the space after the node's own steps (it
///    stores values of the input's shape); it may read the node's outputs, at the element's own
///    row (reduced outputs) or element (element outputs) only. Undefined: none.
///  - `siblings`: further reduction nodes over the same space (sizes and reduced dims), each one
///    more accumulator folded in the same pass (Note [Sibling reductions], reduction_fusion.cpp).
///    Each is a sum, mean, prod, amax or amin (takes_siblings), and so is `n`; a sibling's `x`
///    is its input computed inline (after `x_lets`), or undefined when it is a buffer of the
///    group.
struct ReductionSibling {
  const graph::Node* node = nullptr;
  loop::Expr x;
};

struct ReductionFusion {
  loop::Expr x;
  std::vector<std::pair<loop::Expr, loop::Expr>> x_lets;
  loop::Stmt epilogue;
  std::vector<ReductionSibling> siblings;
};

/// True when node `n` is a reduction kernel of one accumulator and one output (sum, mean, prod,
/// amax, amin): what may share a kernel with siblings of the same space.
bool takes_siblings(const graph::Graph& g, const graph::Node& n);
/// The same for an analyzed node (analyze_reduction).
bool takes_siblings(const ReductionSpec& spec);

/// True when node `n`'s kernel can take a ReductionFusion: its space is the input's dims (every
/// kernel node but native_group_norm, whose space is a view of them).
bool supports_reduction_fusion(const graph::Graph& g, const graph::Node& n);

/// The kernel of the group `group` of node `n`: buffers are group.inputs then group.outputs (a
/// subset of n's outputs, those needed, then whatever `fusion` stores), read and written at their
/// traced strides. Loops as build_reduction_loops (reduction_loops.h), parallel from
/// options.parallel_threshold elements. Requires is_reduction_kernel_node(g, n) and a non-empty
/// group.outputs; with a non-empty `fusion`, supports_reduction_fusion(g, n).
loop::Kernel build_reduction_kernel(const graph::Graph& g, const graph::Node& n,
                                    const KernelGroup& group, const std::string& name,
                                    const ScheduleOptions& options,
                                    const ReductionFusion& fusion = {});

}  // namespace ember::sched
