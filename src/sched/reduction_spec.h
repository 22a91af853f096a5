/// \file
/// Which ATen nodes ember runs as generated reduction kernels, and what each one computes: the
/// analysis half of reduction.h, with no loop IR. A supported node becomes a ReductionSpec: an
/// iteration space (the input's dims, or a view of them: group_norm splits channels into groups),
/// the dims it reduces, and how every tensor operand is indexed by the iteration space.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/graph.h"

namespace ember::sched {

/// The reductions with kernels. See reduction.h for the ATen overloads and conditions.
enum class ReductionKind : uint8_t {
  Sum,
  Mean,
  Prod,
  Amax,
  Amin,
  ArgMax,
  ArgMin,
  MaxDim,  ///< aten::max.dim: (values, indices)
  MinDim,  ///< aten::min.dim
  Any,
  All,
  Var,
  Std,
  VarMean,  ///< (var, mean)
  StdMean,  ///< (std, mean)
  LogSumExp,
  Softmax,
  LogSoftmax,
  SafeSoftmax,  ///< softmax, 0 for a row whose every element is -inf (SDPA's math path)
  LayerNorm,    ///< (out, mean, rstd)
  GroupNorm,    ///< (out, mean, rstd)
  /// Training-mode batch norm: (out, save_mean, save_invstd[, new running_mean, new running_var])
  BatchNorm,
};

/// A tensor operand of a reduction, indexed by the iteration space: element (i_0, ..., i_k-1)
/// of the space reads or writes element sum(i_d * strides[d]) of `value`. A stride is 0 where
/// the operand does not vary with the dim: a broadcast dim, a reduced dim of a reduced output,
/// a dim of size 1. Sizes and strides are expressions over the graph's shape symbols in a
/// symbolic graph (docs/design/symbolic.md), constants otherwise.
struct ReductionOperand {
  graph::ValueId value = -1;
  graph::Dims strides;
};

/// What a supported node computes.
struct ReductionSpec {
  ReductionKind kind = ReductionKind::Sum;
  graph::Dims sizes;          ///< the iteration space (x's sizes, or its view)
  std::vector<bool> reduced;  ///< per dim of the space: reduced, or kept (one result per value)
  ReductionOperand x;         ///< the input
  std::optional<ReductionOperand> weight, bias;  ///< layer_norm, group_norm, batch_norm
  /// batch_norm: the running statistics that outputs 3 and 4 update (absent: no update).
  std::optional<ReductionOperand> running_mean, running_var;
  /// Per output of the node, in order. Element outputs (softmax, the normalized output) vary
  /// with every dim, reduced outputs only with the kept ones.
  std::vector<ReductionOperand> outputs;
  double eps = 0;         ///< layer_norm, group_norm, batch_norm
  double momentum = 0;    ///< batch_norm
  double correction = 1;  ///< var, std, var_mean, std_mean
  bool last_dim = false;  ///< softmax, log_softmax: over the input's last dim

  /// Elements per reduction: the product of the reduced sizes.
  graph::DimExpr reduced_numel() const;
};

/// The spec of node `n`, or nullopt when ember has no kernel for it (it then runs as an ATen
/// call). Conservative: anything unsure is nullopt. Requires a verifier-valid graph; never throws.
/// Over shape symbols: softmax, log_softmax, _safe_softmax, layer_norm and the reductions over
/// dims (sum ... logsumexp); group_norm and batch_norm need constant sizes.
/// The space comes coalesced: size-1 dims dropped, and two neighbouring dims (both reduced or
/// both kept) merged into one wherever every operand walks them as one run, so a contiguous
/// softmax over [B, H, S, S] is a [B*H*S, S] space.
/// With `coalesce` false the space is exactly the input's dims (group_norm: its view), size-1 dims
/// included (every operand has stride 0 there): what a kernel that computes the input inline or
/// stores values of its shape (reduction.h, ReductionFusion) indexes by.
std::optional<ReductionSpec> analyze_reduction(const graph::Graph& g, const graph::Node& n,
                                               bool coalesce = true);

}  // namespace ember::sched
