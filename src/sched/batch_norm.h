/// \file
/// Batch norm in inference mode as an index function (index_ops.h): output 0 of
/// `native_batch_norm(training=False)` and `_native_batch_norm_legit_no_training` at an index is
/// `x * alpha[c] + beta[c]`, with the per-channel terms read at the index's channel (dim 1), so it
/// fuses with its producers and consumers (conv -> bn -> relu is the conv and one kernel).
/// index_ops.cpp dispatches here; this file knows only the op and reads through an ElementReader.
/// See docs/design/scheduler.md ("Batch norm").
#pragma once

#include "graph/graph.h"
#include "loop/expr.h"
#include "sched/index_ops.h"

namespace ember::sched {

/// True when eager's CPU batch norm takes its contiguous path for input `x` (contiguous or
/// channels-last contiguous) and `y`, output 0, has the layout that path gives it. Other inputs
/// take eager's TensorIterator path, whose output layout and formula differ. Requires constant
/// sizes and strides.
bool batch_norm_takes_fast_path(const graph::TensorType& x, const graph::TensorType& y);

/// True when `n` is a batch norm in inference mode that lower_batch_norm_inference supports:
/// `native_batch_norm` with training=False or `_native_batch_norm_legit_no_training`; input of
/// rank >= 2 (channels at dim 1) in f32, f64 or bf16; running_mean and running_var tensors of
/// [C], contiguous; weight and bias absent or [C], contiguous; every parameter of the input's
/// dtype, or all f32 for a bf16 input (eager's mixed type); the input contiguous or channels-last
/// contiguous and output 0 traced with eager's layout for it (other inputs take eager's
/// TensorIterator path, another layout and formula); constant sizes; outputs 1 and 2 (save_mean,
/// save_invstd: empty in eval on the CPU) unread, not graph outputs, not mutation values.
/// Conservative; never throws for a verifier-valid graph. Does not check devices (the scheduler
/// does).
bool is_batch_norm_inference(const graph::Graph& g, const graph::Node& n);

/// Output 0 of batch norm node `n` at `index`, reading its tensor arguments through `reader`.
/// Eager's CPU formula for contiguous inputs, in the compute type (f32 for bf16, else the
/// input's): `invstd = 1 / sqrt(var + eps)`, `alpha = invstd * w`, `beta = b - mean * alpha`,
/// `y = x * alpha + beta`, rounded once to the output dtype. Requires is_batch_norm_inference.
loop::Expr lower_batch_norm_inference(const graph::Graph& g, const graph::Node& n,
                                      const Index& index, ElementReader& reader);

}  // namespace ember::sched
