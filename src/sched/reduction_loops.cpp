#include "sched/reduction_loops.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "loop/equality.h"
#include "loop/simplify.h"
#include "loop/traverse.h"
#include "sched/size_expr.h"
#include "support/error.h"

namespace ember::sched {

namespace {

using graph::DimExpr;
using loop::Expr;
using loop::ForKind;
using loop::Stmt;

// Tile of the vectorized kept dim in the outer layout: per-row values are buffers of this size.
constexpr int64_t kOuterTile = 256;
// Most chunks a single row is split into (inner layout, one row).
constexpr int64_t kMaxChunks = 64;
// Fewest elements per chunk worth a thread's time.
constexpr int64_t kMinChunkElements = 8192;
// Chunks of a vectorized loop start at multiples of this (whole blocks of vector lanes).
constexpr int64_t kChunkAlign = 64;
// Elements per row summed into one per-block partial in the outer layout (see blocked_sums).
constexpr int64_t kOuterBlock = 4096;

std::string x_name(size_t d) {
  return "x" + std::to_string(d);
}

// `d` at the symbols' hints: for heuristics only.
int64_t hint(const ReductionSpace& s, const DimExpr& d) {
  if (std::optional<int64_t> c = d.as_constant()) return *c;
  EMBER_INTERNAL_ASSERT(s.symbols != nullptr) << "a symbolic reduction space without symbols";
  return hint_of(d, *s.symbols);
}

// Dims of size other than 1 (size-0 dims give loops that never run), in memory order of the
// input: largest stride first, at the hints (ties: lower dim first).
std::vector<size_t> memory_order(const ReductionSpace& s, bool reduced) {
  std::vector<size_t> dims;
  for (size_t d = 0; d < s.sizes.size(); ++d) {
    if (!is_constant(s.sizes[d], 1) && s.reduced[d] == reduced) dims.push_back(d);
  }
  std::stable_sort(dims.begin(), dims.end(), [&](size_t a, size_t b) {
    return hint(s, s.x_strides[a]) > hint(s, s.x_strides[b]);
  });
  return dims;
}

// A loop of the nest: a group of dims the input reads as one contiguous run, so one loop
// variable walks them all (x<d> = (var // inner) % size).
struct LoopDims {
  std::vector<size_t> dims;  // outer to inner
  DimExpr extent = 1;
  std::string var;
};

std::vector<LoopDims> merge_contiguous(const ReductionSpace& s, const std::vector<size_t>& dims,
                                       const std::string& prefix) {
  std::vector<LoopDims> loops;
  for (size_t d : dims) {
    if (!loops.empty()) {
      size_t prev = loops.back().dims.back();
      // As expressions: a run at every size of the symbols.
      if (s.x_strides[prev] == s.sizes[d] * s.x_strides[d]) {
        loops.back().dims.push_back(d);
        loops.back().extent = loops.back().extent * s.sizes[d];
        continue;
      }
    }
    loops.push_back({{d}, s.sizes[d], ""});
  }
  for (size_t i = 0; i < loops.size(); ++i) {
    loops[i].var =
        loops[i].dims.size() == 1 ? x_name(loops[i].dims[0]) : prefix + std::to_string(i);
  }
  return loops;
}

// x<d> for every dim of `dims` (outer to inner) as digits of the flat index `flat`.
void decompose(const ReductionSpace& s, const std::vector<size_t>& dims, const Expr& flat,
               std::map<std::string, Expr>& subst) {
  DimExpr inner = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    Expr digit = loop::floordiv(flat, dim_expr(inner));
    if (i > 0) digit = loop::mod(digit, dim_expr(s.sizes[dims[i]]));
    subst[x_name(dims[i])] = digit;
    inner = inner * s.sizes[dims[i]];
  }
}

void bind_loop_dims(const ReductionSpace& s, const LoopDims& l,
                    std::map<std::string, Expr>& subst) {
  if (l.dims.size() > 1) decompose(s, l.dims, loop::var(l.var), subst);
}

Stmt nest(const std::vector<LoopDims>& loops, Stmt body, bool vectorize_innermost) {
  for (size_t i = loops.size(); i-- > 0;) {
    ForKind kind =
        vectorize_innermost && i + 1 == loops.size() ? ForKind::Vectorized : ForKind::Serial;
    body = loop::For::make(loop::var(loops[i].var), loop::idx(0), dim_expr(loops[i].extent), kind,
                           body);
  }
  return body;
}

// `body` inside Lets binding each of `values` (row-level index digits, computed once per row
// instead of inside the element loops).
Stmt bind_all(const std::map<std::string, Expr>& values, Stmt body) {
  for (auto it = values.rbegin(); it != values.rend(); ++it) {
    body = loop::Let::make(loop::var(it->first), it->second, body);
  }
  return body;
}

// Per-row values of `size` each (per-element ones: `row_elements`, which must be constant).
Stmt allocate_all(const std::vector<RowValue>& values, int64_t size, const DimExpr& row_elements,
                  Stmt body) {
  for (size_t i = values.size(); i-- > 0;) {
    EMBER_INTERNAL_ASSERT(!values[i].per_element || row_elements.is_constant())
        << "per-element row value " << values[i].name << " over a row of symbolic size";
    int64_t n = values[i].per_element ? row_elements.constant() : size;
    body = loop::Allocate::make(values[i].name, values[i].dtype, {loop::idx(n)}, body);
  }
  return body;
}

DimExpr product(const graph::Dims& v) {
  DimExpr p = 1;
  for (const DimExpr& d : v) p = p * d;
  return p;
}

// The Accumulates of `body` into per-row values (index row_index()), one per accumulator.
std::vector<const loop::Accumulate*> row_accumulates(const Stmt& body) {
  std::vector<const loop::Accumulate*> out;
  std::set<std::string> seen;
  std::function<void(const Stmt&)> walk = [&](const Stmt& s) {
    if (!s.defined()) return;
    if (auto* a = s.as<loop::Accumulate>()) {
      if (loop::structurally_equal(a->index, row_index()) && seen.insert(a->buffers[0]).second) {
        out.push_back(a);
      }
    }
    loop::for_each_stmt_child(
        s, [](const Expr&) {}, walk);
  };
  walk(body);
  return out;
}

std::string part_name(const std::string& buffer) {
  return buffer + "_part";
}

// `body` with its Accumulates into per-row values redirected to the partials at `chunk`.
Stmt to_partials(const Stmt& body, const Expr& chunk) {
  std::function<Stmt(const Stmt&)> rewrite = [&](const Stmt& s) -> Stmt {
    if (auto* a = s.as<loop::Accumulate>()) {
      if (!loop::structurally_equal(a->index, row_index())) return s;
      std::vector<std::string> parts;
      for (const std::string& b : a->buffers) parts.push_back(part_name(b));
      return loop::Accumulate::make(a->op, parts, chunk, a->values);
    }
    return loop::map_stmt_children(
        s, [](const Expr& e) { return e; }, rewrite);
  };
  return rewrite(body);
}

class Builder {
 public:
  Builder(const ReductionSpace& s, const RowProgram& p, const ReductionLoopOptions& o)
      : s_(s),
        p_(p),
        threshold_(o.parallel_threshold),
        chunk_(o.chunk_single_rows),
        min_rows_(o.min_parallel_rows),
        min_tile_(o.min_outer_tile) {}

  Stmt build() {
    std::vector<size_t> kept = memory_order(s_, false);
    std::vector<size_t> reduced = memory_order(s_, true);
    for (size_t d = 0; d < s_.sizes.size(); ++d) {
      if (is_constant(s_.sizes[d], 1)) size1_[x_name(d)] = loop::idx(0);
    }
    int64_t element_steps = 0;
    for (const RowStep& st : p_.steps) element_steps += st.kind == RowStep::Kind::Elements;
    // At the largest size the symbols allow (Note [Parallel loops over symbols], size_expr.cpp).
    const int64_t largest =
        s_.symbols == nullptr ? product(s_.sizes).constant() : largest_numel(s_.sizes, *s_.symbols);
    work_ = largest > INT64_MAX / 8 ? INT64_MAX : largest * std::max<int64_t>(element_steps, 1);
    if (s_.symbols != nullptr) {
      when_ = parallel_when(product(s_.sizes) * DimExpr(std::max<int64_t>(element_steps, 1)),
                            threshold_, *s_.symbols);
    }
    // The layout follows the dim the input walks contiguously.
    for (size_t d : kept) {
      if (is_constant(s_.sizes[d], 0)) return loop::Block::make({});  // no rows
    }
    if (!uses_inner_layout(s_)) return loop::simplify(outer(kept, reduced));
    return loop::simplify(inner(kept, reduced));
  }

 private:
  bool parallel(int64_t iterations) const { return iterations >= 2 && work_ >= threshold_; }
  // The same for a loop of `iterations` that may be symbolic: one of at least 2 at some size.
  bool parallel(const DimExpr& iterations) const {
    if (std::optional<int64_t> c = iterations.as_constant()) return parallel(*c);
    return work_ >= threshold_ && largest_numel({iterations}, *s_.symbols) >= 2;
  }

  Stmt substituted(const Stmt& body, std::map<std::string, Expr> subst) const {
    for (const auto& [name, e] : size1_) subst[name] = e;
    return loop::substitute(body, subst);
  }

  // Rows outside, the row's elements inside; see reduction_loops.h.
  Stmt inner(const std::vector<size_t>& kept, const std::vector<size_t>& reduced) {
    std::vector<LoopDims> loops = merge_contiguous(s_, reduced, "m");
    DimExpr rows = 1;
    for (size_t d : kept) rows = rows * s_.sizes[d];
    std::map<std::string, Expr> subst = {{row_index().as<loop::Var>()->name, loop::idx(0)}};
    std::map<std::string, Expr> digits;  // kept dims of the row, bound once per row
    Expr p = loop::var("p");
    if (kept.size() == 1) {
      subst[x_name(kept[0])] = p;
    } else if (!kept.empty()) {
      decompose(s_, kept, p, digits);
    }
    for (const LoopDims& l : loops) bind_loop_dims(s_, l, subst);

    const bool split = chunk_ && graph::all_constant(s_.sizes) && rows == DimExpr(1) &&
                       !loops.empty() && parallel(loops[0].extent.constant()) &&
                       product(s_.sizes).constant() >= 2 * kMinChunkElements;
    std::vector<Stmt> steps;
    for (const RowStep& st : p_.steps) {
      if (st.kind == RowStep::Kind::Row) {
        steps.push_back(substituted(st.body, subst));
      } else if (split) {
        steps.push_back(split_elements(loops, st.body, subst));
      } else {
        steps.push_back(nest(loops, substituted(st.body, subst), /*vectorize_innermost=*/true));
      }
    }
    DimExpr row_elements = 1;
    for (size_t d : reduced) row_elements = row_elements * s_.sizes[d];
    Stmt body =
        bind_all(digits, allocate_all(p_.values, 1, row_elements, loop::Block::make(steps)));
    if (kept.empty()) return body;
    ForKind kind = !split && parallel(rows) ? ForKind::Parallel : ForKind::Serial;
    return loop::For::make(p, loop::idx(0), dim_expr(rows), kind, body,
                           kind == ForKind::Parallel ? when_ : Expr());
  }

  // One row's Elements step in chunks of the outermost loop, run in parallel: each chunk
  // accumulates into its own partials (initialised in the chunk's iteration, so the emitter
  // runs it in parallel), combined into the row's values in chunk order afterwards.
  Stmt split_elements(const std::vector<LoopDims>& loops, const Stmt& body,
                      const std::map<std::string, Expr>& subst) {
    const int64_t extent = loops[0].extent.constant();
    const int64_t inner_elements = product(s_.sizes).constant() / extent;
    int64_t chunks = std::min<int64_t>(
        {kMaxChunks, extent, std::max<int64_t>(2, extent * inner_elements / kMinChunkElements)});
    int64_t q = (extent + chunks - 1) / chunks;
    if (loops.size() == 1 && q > kChunkAlign) q = (q + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
    chunks = (extent + q - 1) / q;
    Expr c = loop::var("s");
    std::vector<const loop::Accumulate*> accs = row_accumulates(body);
    std::vector<Stmt> chunk_body;
    for (const loop::Accumulate* a : accs) {
      for (size_t j = 0; j < a->buffers.size(); ++j) {
        loop::DType t = j == 0 ? a->values[0].dtype() : loop::kIndexType;
        chunk_body.push_back(loop::Store::make(
            part_name(a->buffers[j]), c, loop::reduction_identity(a->op, static_cast<int>(j), t)));
      }
    }
    std::vector<LoopDims> rest(loops.begin() + 1, loops.end());
    Stmt inner_loops =
        nest(rest, substituted(to_partials(body, c), subst), /*vectorize_innermost=*/true);
    Expr start = c * q;
    Expr len = extent % q == 0 ? loop::idx(q) : loop::min(loop::idx(q), loop::idx(extent) - start);
    ForKind first_kind = rest.empty() ? ForKind::Vectorized : ForKind::Serial;
    chunk_body.push_back(
        loop::For::make(loop::var(loops[0].var), start, len, first_kind, inner_loops));
    Stmt chunked = loop::For::make(c, loop::idx(0), loop::idx(chunks), ForKind::Parallel,
                                   loop::Block::make(chunk_body));
    if (accs.empty()) return chunked;
    std::vector<Stmt> combine = {chunked};
    Expr cc = loop::var("s_");
    std::vector<Stmt> folds;
    for (const loop::Accumulate* a : accs) {
      std::vector<Expr> vals;
      for (size_t j = 0; j < a->buffers.size(); ++j) {
        loop::DType t = j == 0 ? a->values[0].dtype() : loop::kIndexType;
        vals.push_back(loop::Load::make(t, part_name(a->buffers[j]), cc));
      }
      folds.push_back(loop::Accumulate::make(a->op, a->buffers, row_index(), vals));
    }
    combine.push_back(loop::For::make(cc, loop::idx(0), loop::idx(chunks), ForKind::Serial,
                                      substituted(loop::Block::make(folds), subst)));
    Stmt out = loop::Block::make(combine);
    for (const loop::Accumulate* a : accs) {
      for (size_t j = a->buffers.size(); j-- > 0;) {
        loop::DType t = j == 0 ? a->values[0].dtype() : loop::kIndexType;
        out = loop::Allocate::make(part_name(a->buffers[j]), t, {loop::idx(chunks)}, out);
      }
    }
    return out;
  }

  // Tiles of the innermost kept dim, the reduced dims looped over around it; see
  // reduction_loops.h.
  Stmt outer(const std::vector<size_t>& kept, const std::vector<size_t>& reduced) {
    const size_t cd = kept.back();  // the kept dim of smallest stride
    std::vector<size_t> others(kept.begin(), kept.end() - 1);
    const DimExpr size_c = s_.sizes[cd];
    DimExpr others_rows = 1;
    for (size_t d : others) others_rows = others_rows * s_.sizes[d];
    // The tile is a constant (per-row values are buffers of its size): for a symbolic size_c the
    // full tile, its last one partial at every size.
    int64_t tile = kOuterTile;
    if (std::optional<int64_t> c = size_c.as_constant()) {
      tile = std::min(*c, kOuterTile);
      // Few tiles of a large reduction (a sum over the leading dim of [4096, 256]; on the GPU,
      // squeeze-and-excitation's pool of a channels-last [1, 72, 28, 28] at batch 1, 3 programs
      // of 32 channels over 784 rows): smaller tiles, so that the parallel loop has iterations
      // for every thread or SM.
      if (work_ >= threshold_ && hint(s_, others_rows) * ((*c + tile - 1) / tile) < min_rows_) {
        tile = std::max<int64_t>(min_tile_, (*c / min_rows_ + 15) / 16 * 16);
        tile = std::min(tile, *c);
      }
    }
    const DimExpr tiles = graph::floordiv(size_c + (tile - 1), tile);
    const DimExpr rows = tiles * others_rows;
    const bool one_tile = tiles == DimExpr(1);

    Expr p = loop::var("p");
    std::map<std::string, Expr> digits;  // bound once per tile
    if (!one_tile) digits["t"] = loop::mod(p, dim_expr(tiles));
    Expr t = one_tile ? loop::idx(0) : loop::var("t");
    Expr c = loop::var("c");
    std::map<std::string, Expr> subst = {{row_index().as<loop::Var>()->name, c},
                                         {x_name(cd), t * tile + c}};
    if (others.size() == 1 && one_tile) {
      subst[x_name(others[0])] = p;
    } else if (!others.empty()) {
      decompose(s_, others, loop::floordiv(p, dim_expr(tiles)), digits);
    }
    std::vector<LoopDims> loops = merge_contiguous(s_, reduced, "m");
    for (const LoopDims& l : loops) bind_loop_dims(s_, l, subst);
    Expr extent = graph::mod(size_c, tile) == DimExpr(0)
                      ? loop::idx(tile)
                      : loop::min(loop::idx(tile), dim_expr(size_c) - t * tile);

    auto tile_loop = [&](const Stmt& body) {
      return loop::For::make(c, loop::idx(0), extent, ForKind::Vectorized,
                             substituted(body, subst));
    };
    std::vector<Stmt> steps;
    std::vector<RowValue> blocks;  // per-block partial sums (see blocked_sums)
    for (const RowStep& st : p_.steps) {
      if (st.kind == RowStep::Kind::Row) {
        steps.push_back(tile_loop(st.body));
      } else {
        steps.push_back(blocked_sums(loops, st.body, tile_loop, blocks));
      }
    }
    for (const RowValue& v : p_.values) {
      EMBER_INTERNAL_ASSERT(!v.per_element)
          << "per-element row value " << v.name << " in the outer layout";
    }
    std::vector<RowValue> values = p_.values;
    values.insert(values.end(), blocks.begin(), blocks.end());
    Stmt body = bind_all(digits, allocate_all(values, tile, 0, loop::Block::make(steps)));
    ForKind kind = parallel(rows) ? ForKind::Parallel : ForKind::Serial;
    return loop::For::make(p, loop::idx(0), dim_expr(rows), kind, body,
                           kind == ForKind::Parallel ? when_ : Expr());
  }

  // An Elements step of the outer layout: the reduced loops around the tile loop. Its float sums
  // would add every reduced element into one lane per column, in sequence; with more than
  // kOuterBlock elements per row, the outermost reduced loop is cut in blocks of about
  // kOuterBlock elements whose sums are accumulated in per-block partials (`<name>_blk`, added
  // into the row value after each block): a two-level cascade.
  template <typename TileLoop>
  Stmt blocked_sums(const std::vector<LoopDims>& loops, const Stmt& body, TileLoop tile_loop,
                    std::vector<RowValue>& blocks) {
    std::vector<const loop::Accumulate*> sums;
    for (const loop::Accumulate* a : row_accumulates(body)) {
      if (a->op == loop::ReduceOp::Sum && loop::is_float(a->values[0].dtype())) sums.push_back(a);
    }
    DimExpr per_row = 1;
    for (const LoopDims& l : loops) per_row = per_row * l.extent;
    // A symbolic row may be long at some size: blocked whatever its hint (one block when short).
    if (sums.empty() || (per_row.is_constant() && per_row.constant() <= kOuterBlock)) {
      return nest(loops, tile_loop(body), false);
    }
    // Elements per iteration of the first loop (at the hints: the block is a constant).
    DimExpr inner_elements = 1;
    for (size_t i = 1; i < loops.size(); ++i) inner_elements = inner_elements * loops[i].extent;
    const int64_t inner = std::max<int64_t>(1, hint(s_, inner_elements));
    const int64_t b = std::max<int64_t>(1, kOuterBlock / inner);
    const DimExpr extent0 = loops[0].extent;
    const DimExpr nblocks = graph::floordiv(extent0 + (b - 1), b);
    std::map<std::string, std::string> renamed;
    std::vector<Stmt> init, fold;
    for (const loop::Accumulate* a : sums) {
      const std::string blk = a->buffers[0] + "_blk";
      renamed[a->buffers[0]] = blk;
      loop::DType t = a->values[0].dtype();
      if (std::none_of(blocks.begin(), blocks.end(),
                       [&](const RowValue& v) { return v.name == blk; })) {
        blocks.push_back({blk, t});
      }
      init.push_back(loop::Store::make(blk, row_index(), loop::reduction_identity(a->op, 0, t)));
      fold.push_back(loop::Accumulate::make(a->op, a->buffers, row_index(),
                                            {loop::Load::make(t, blk, row_index())}));
    }
    std::function<Stmt(const Stmt&)> rewrite = [&](const Stmt& st) -> Stmt {
      if (auto* a = st.as<loop::Accumulate>()) {
        auto it = renamed.find(a->buffers[0]);
        if (it == renamed.end() || !loop::structurally_equal(a->index, row_index())) return st;
        return loop::Accumulate::make(a->op, {it->second}, a->index, a->values);
      }
      return loop::map_stmt_children(
          st, [](const Expr& e) { return e; }, rewrite);
    };
    std::vector<LoopDims> rest(loops.begin() + 1, loops.end());
    Stmt inner_loops = nest(rest, tile_loop(rewrite(body)), false);
    Expr blk = loop::var("blk");
    Expr start = blk * b;
    Expr len = graph::mod(extent0, b) == DimExpr(0)
                   ? loop::idx(b)
                   : loop::min(loop::idx(b), dim_expr(extent0) - start);
    Stmt block = loop::Block::make(
        {tile_loop(loop::Block::make(init)),
         loop::For::make(loop::var(loops[0].var), start, len, ForKind::Serial, inner_loops),
         tile_loop(loop::Block::make(fold))});
    return loop::For::make(blk, loop::idx(0), dim_expr(nblocks), ForKind::Serial, block);
  }

  const ReductionSpace& s_;
  const RowProgram& p_;
  const int64_t threshold_;
  const bool chunk_;        // a single row in parallel chunks (ScheduleOptions::chunk_single_rows)
  const int64_t min_rows_;  // ReductionLoopOptions::min_parallel_rows
  const int64_t min_tile_;  // ReductionLoopOptions::min_outer_tile
  int64_t work_ = 0;
  Expr when_;  // the parallel loop's run-time condition, over symbols (parallel_when)
  std::map<std::string, Expr> size1_;  // x<d> of size-1 dims: 0
};

}  // namespace

bool uses_inner_layout(const ReductionSpace& s) {
  std::vector<size_t> kept = memory_order(s, false);
  std::vector<size_t> reduced = memory_order(s, true);
  if (kept.empty()) return true;
  if (reduced.empty()) return false;
  // The dim of smallest stride (ties: the later dim, as memory_order orders them).
  std::vector<size_t> all = kept;
  all.insert(all.end(), reduced.begin(), reduced.end());
  std::stable_sort(all.begin(), all.end(), [&](size_t a, size_t b) {
    return hint(s, s.x_strides[a]) > hint(s, s.x_strides[b]);
  });
  return s.reduced[all.back()];
}

Expr element_var(size_t d) {
  return loop::var(x_name(d));
}

Expr row_index() {
  return loop::var("row");
}

Stmt build_reduction_loops(const ReductionSpace& space, const RowProgram& program,
                           const ReductionLoopOptions& options) {
  EMBER_INTERNAL_ASSERT(space.sizes.size() == space.reduced.size() &&
                        space.sizes.size() == space.x_strides.size())
      << "build_reduction_loops: inconsistent space";
  return Builder(space, program, options).build();
}

}  // namespace ember::sched
