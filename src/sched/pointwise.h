/// \file
/// Pointwise lowering: the table from an ATen pointwise operator to a loop-IR expression of one
/// output element, given the elements of its tensor inputs.
///
/// Semantics are those of eager PyTorch's CPU kernels:
///  - The node's output dtype is authoritative. Arithmetic runs in the output dtype, except that
///    bf16/f16 results are computed in f32 and rounded once at the end of the op (as eager's
///    opmath does per op). Comparisons run in torch's promoted dtype of their operands (a 0-dim
///    input that might be a wrapped Python number must promote the same either way; the default
///    float dtype is taken to be f32).
///  - Operands of another dtype than the computation's are converted as eager's TensorIterator
///    does on the CPU (a reduced-precision result rounds them to its dtype first, except the
///    one-element `other` of mul/div, which eager reads in f32). Nodes where CPU and CUDA eager
///    differ that way are pointwise only on the CPU.
///  - Scalar arguments are converted like `Scalar::to<T>()` of the computation type.
#pragma once

#include <optional>
#include <vector>

#include "graph/graph.h"
#include "loop/expr.h"

namespace ember::sched {

/// The loop-IR element type for a graph dtype, or nullopt when the loop IR has none (complex, fp8,
/// unsigned 16/32/64-bit, ...).
std::optional<loop::DType> to_loop_dtype(graph::DType t);

/// `e` converted to `t` (`e` itself when it has that dtype).
loop::Expr cast_to(loop::DType t, loop::Expr e);

/// The type a fold of float dtype `t` accumulates in: f64 for f64, else f32 (halves sum in f32,
/// as eager's kernels do). Pools and depthwise convolutions.
loop::DType float_compute_type(loop::DType t);

/// True when node `n` of `g` computes each output element from the elements at the same
/// (broadcast) position of its tensor inputs, and lower_pointwise supports it with these argument
/// values and dtypes. Conservative: when unsure it returns false (the node then runs as an ATen
/// call, which is always right). Never throws for a verifier-valid graph.
bool is_pointwise(const graph::Graph& g, const graph::Node& n);

/// The value of one output element of pointwise node `n`, given the element values of its tensor
/// arguments in argument order (one loop::Expr per ValueRef argument, with the loop dtype of that
/// input). The result has the loop dtype of the node's output.
/// Requires: is_pointwise(g, n) (an internal error otherwise), inputs as described.
/// Guarantees: a well-typed expression that reads only `inputs`; it matches eager bit for bit
/// except for the last-ulp differences of libm functions and of eager's fused multiply-adds.
loop::Expr lower_pointwise(const graph::Graph& g, const graph::Node& n,
                           const std::vector<loop::Expr>& inputs);

}  // namespace ember::sched
