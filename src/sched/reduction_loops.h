/// \file
/// The loop nests of reduction kernels. A reduction kernel is written as a RowProgram: steps over
/// one "row" (the elements that reduce to one result), in terms of placeholder variables; this
/// file places those steps in loops over the iteration space, choosing the loop order from the
/// input's strides, which loops are vectorized and parallel, and where per-row values live.
/// See docs/design/scheduler.md ("Reductions") for the layouts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/types.h"
#include "loop/stmt.h"
#include "sym/shape_env.h"

namespace ember::sched {

/// A per-row value (an accumulator or a value derived from accumulators), kept in a scratch
/// buffer `name` indexed by row_index(). With `per_element`, a scratch row instead: one value
/// per element of the row, indexed by the element's row-major position among the reduced dims
/// (inner layout only, see uses_inner_layout).
struct RowValue {
  std::string name;
  loop::DType dtype;
  bool per_element = false;
};

/// One step of a row program, run for every row, in order.
///  - Elements: `body` runs once per element of the row (the reduced dims), in an unspecified
///    order: it reads the element (element_var(d)), per-row values, and Stores elements of
///    outputs or Accumulates into per-row values at row_index().
///  - Row: `body` runs once per row: it reads and Stores per-row values at row_index(), and
///    Stores reduced outputs (indexed by the kept element_vars).
/// Per-row values are initialised by Row steps before Accumulates touch them.
struct RowStep {
  enum class Kind : uint8_t { Elements, Row };
  Kind kind = Kind::Row;
  loop::Stmt body;
};

struct RowProgram {
  std::vector<RowValue> values;
  std::vector<RowStep> steps;
};

/// The variable of dim `d` of the iteration space in RowStep bodies ("x<d>", i64).
loop::Expr element_var(size_t d);
/// The index of per-row values in RowStep bodies ("row", i64).
loop::Expr row_index();

/// The iteration space: `sizes`, which dims are reduced, and the strides of the input (which
/// decide the loop order and the vectorized dim). Sizes and strides may be expressions over shape
/// symbols (a symbolic graph): loops then run over their exact extents at every size, and the
/// symbols' hints in `symbols` decide only heuristics (loop order, which loop is parallel, tile
/// and block sizes), never what the kernel computes. `symbols` may be null for constant spaces.
struct ReductionSpace {
  graph::Dims sizes;
  std::vector<bool> reduced;
  graph::Dims x_strides;
  const sym::ShapeEnv* symbols = nullptr;
};

/// Whether build_reduction_loops lays `space` out with rows outside and their elements inside
/// (the input's smallest-stride dim is reduced); see below.
bool uses_inner_layout(const ReductionSpace& space);

/// The kernel body running `program` over `space`:
///  - inner layout (the input's smallest-stride dim is reduced): an outer loop over rows, the
///    reduced dims inside in memory order (contiguous ones merged into one loop), the innermost
///    vectorized; per-row values are one-element buffers. A single large row is split into
///    chunks that run in parallel with per-chunk partial accumulators, combined in chunk order
///    (with `chunk_single_rows`, constant sizes only). Per-element row values need a constant
///    row size.
///  - outer layout (a kept dim is the smallest-stride one): rows of that dim are processed in
///    tiles: loops over the reduced dims with the tile's dim innermost and vectorized; per-row
///    values are tile-sized buffers.
/// The outermost loop runs in parallel when the kernel touches at least
/// `options.parallel_threshold` elements. Requires: a program whose bodies use only
/// element_var(d) for d < rank, row_index() and the kernel's buffers. Deterministic for given
/// inputs (no dependence on thread count).
struct ReductionLoopOptions {
  int64_t parallel_threshold = 32768;
  /// A single large row in parallel chunks (inner layout; ScheduleOptions::chunk_single_rows).
  bool chunk_single_rows = true;
  /// Outer layout: iterations the parallel loop should have at least. Fewer tiles than this cut
  /// the tiles smaller, down to `min_outer_tile` columns: a few for a CPU's threads, about a
  /// GPU's SM count for Triton's programs (ScheduleOptions::min_parallel_rows).
  int64_t min_parallel_rows = 4;
  int64_t min_outer_tile = 32;
};
loop::Stmt build_reduction_loops(const ReductionSpace& space, const RowProgram& program,
                                 const ReductionLoopOptions& options);

}  // namespace ember::sched
