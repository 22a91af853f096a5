/// \file
/// The Triton emitter's loops over blocks (triton_emitter_internal.h): an inner loop of a row
/// program as a loop over masked blocks (or one block, persistent), its row accumulators, and a
/// column reduction's loop over rows as 2D tiles.
#include <functional>

#include "codegen/triton/triton_emitter_internal.h"
#include "loop/equality.h"
#include "loop/traverse.h"

namespace ember::codegen::triton_detail {

void Emitter::collect_row_accumulators(const Stmt& s, const std::string& var) {
  switch (s.kind()) {
    case StmtKind::Block:
      for (const Stmt& c : s.as<Block>()->stmts) collect_row_accumulators(c, var);
      return;
    case StmtKind::Let:
      collect_row_accumulators(s.as<Let>()->body, var);
      return;
    case StmtKind::Accumulate: {
      const auto* a = s.as<Accumulate>();
      const bool arg = a->op == ReduceOp::ArgMax || a->op == ReduceOp::ArgMin;
      if (arg) refuse_in_row_tile("an argmax");
      if (a->buffers.size() != 1 && !arg) {
        refuse(std::string("the ") + reduce_op_name(a->op) + " reduction");
      }
      if (uses_any(a->index, {var}) || uses_any(a->index, block_vars_)) {
        if (arg) refuse("an elementwise " + std::string(reduce_op_name(a->op)));
        return;  // elementwise
      }
      for (const RowAcc& r : row_accs_) {
        if (r.buffer == a->buffers[0] && r.op == a->op) return;  // one block per accumulator
      }
      DType t = a->values[0].dtype();
      RowAcc r{a->op, a->buffers[0], a->index, fresh("acc"), t, "", ""};
      if (arg) {
        r.index_buffer = a->buffers[1];
        r.index_block = fresh("acci");
      }
      row_accs_.push_back(r);
      return;
    }
    default:
      return;
  }
}

void Emitter::block_loop(const For& f) {
  const std::string& var = f.var.as<Var>()->name;
  row_accs_.clear();
  collect_row_accumulators(f.body, var);
  std::string ext = fresh("ext");
  line(ext + " = " + expr(f.extent));
  for (const RowAcc& r : row_accs_) {
    line(r.block + " = tl.full(" + block_shape() + ", " +
         expr(reduction_identity(r.op, 0, r.dtype)) + ", " + tl_dtype(r.dtype) + ")");
    if (!r.index_block.empty()) {
      line(r.index_block + " = tl.full([RBLOCK], " +
           expr(reduction_identity(r.op, 1, DType::Int64)) + ", tl.int64)");
    }
  }
  std::string rmask, off;
  if (persistent_) {
    // One block holds the whole loop: no loop, and lanes and masks shared by every loop of
    // this extent, so that their loads are the same expressions (load()'s cache).
    std::string key = expr(f.extent);
    auto [it, added] = persistent_lanes_.emplace(key, std::make_pair(std::string(), std::string()));
    if (added) {
      it->second = {fresh("roff"), fresh("rmask")};
      if (rows_ > 1) {  // lanes along axis 1 of the row tile, masked by its rows too
        const std::string lanes = fresh("lmask");
        line(it->second.first + " = tl.arange(0, RBLOCK)" + index_cast_ + "[None, :]");
        line(lanes + " = " + it->second.first + " < " + ext);
        line(it->second.second + " = " + lanes + " & " + row_mask_);
        lane_masks_[it->second.second] = lanes;
      } else {
        line(it->second.first + " = tl.arange(0, RBLOCK)" + index_cast_);
        line(it->second.second + " = " + it->second.first + " < " + ext);
      }
    }
    off = it->second.first;
    rmask = it->second.second;
    ++indent_;  // balanced below; persistent code keeps the program's indentation
    --indent_;
  } else {
    std::string r0 = fresh("r");
    rmask = fresh("rmask");
    line("for " + r0 + " in range(0, " + ext + ", RBLOCK):");
    ++indent_;
    memory_.enter_loop();
    off = fresh("roff");
    line(off + " = " + r0 + " + tl.arange(0, RBLOCK)" + index_cast_);
    line(rmask + " = " + off + " < " + ext);
  }
  // The loop's variable and its Lets are blocks inside it only: a later loop may reuse the
  // name for a scalar (a serial loop over rows after a column tile).
  const std::set<std::string> outer_block_vars = block_vars_;
  row_level_vars_ = outer_block_vars;
  block_vars_.insert(var);
  line(var_name(var) + " = " + expr(f.min) + " + " + off);
  block_mask_ = rmask;
  block_var_ = var;
  const auto* mn = f.min.as<IntImm>();
  block_min_zero_ = mn != nullptr && mn->value == 0;
  block_stmt(f.body, rmask);
  block_vars_ = outer_block_vars;
  row_level_vars_.clear();
  block_mask_.clear();
  block_var_.clear();
  if (!persistent_) {
    memory_.exit_loop();
    --indent_;
  }
  for (const RowAcc& r : row_accs_) {
    if (!r.index_block.empty()) {
      const bool larger = r.op == ReduceOp::ArgMax;
      std::string rv = fresh("rv"), ri = fresh("ri");
      line(rv + ", " + ri + " = tl.reduce((" + r.block + ", " + r.index_block + "), 0, " +
           (larger ? "_ember_argmax_pair" : "_ember_argmin_pair") + ")");
      std::string cv = fresh("cv"), ci = fresh("ci");
      line(cv + " = " + acc_read(r.buffer, r.index));
      line(ci + " = " + acc_read(r.index_buffer, r.index));
      arg_update(larger, cv, ci, rv, ri, "");
      acc_write(r.buffer, r.index, cv);
      acc_write(r.index_buffer, r.index, ci);
      continue;
    }
    ReduceText t = reduce_text(r.op);
    // A row tile reduces along axis 1, keeping it: one value per row, a [rows, 1] block.
    std::string red = std::string(t.reduce) + (rows_ > 1 ? "_rows(" : "(") + r.block + ")";
    if (auto it = scalars_.find(r.buffer); it != scalars_.end()) {
      line(it->second + " = " +
           half_wrap(scalar_types_[r.buffer],
                     std::string(t.combine) + "(" + it->second + ", " + red + ")"));
    } else {
      acc_write(r.buffer, r.index,
                std::string(t.combine) + "(" + acc_read(r.buffer, r.index) + ", " + red + ")");
    }
  }
  row_accs_.clear();
  // The extent that picks RBLOCK: the longest inner loop (a Max over the kernel's loops). An
  // extent over loop variables (a tile's) is bounded by the arrays it walks.
  if (uses_any(f.extent, {}, true)) {
    if (!array_extent_.defined()) refuse("an inner loop whose extent depends on a loop variable");
  } else {
    block_extent_ =
        block_extent_.defined() ? make_binary(ExprKind::Max, block_extent_, f.extent) : f.extent;
  }
}

bool Emitter::column_tiles(const For& rows) {
  const Stmt* body = &rows.body;
  while (const auto* b = body->as<Block>()) {
    if (b->stmts.size() != 1) return false;
    body = &b->stmts[0];
  }
  const For* cols = body->as<For>();
  if (cols == nullptr || has_loop(cols->body) || !block_mask_.empty()) return false;
  const auto* cmin = cols->min.as<IntImm>();
  if (cmin == nullptr || cmin->value != 0) return false;
  const std::string& col = cols->var.as<Var>()->name;
  const std::string& row = rows.var.as<Var>()->name;
  // Only Lets, folds into arrays at the lane's own element, and stores to memory at an element
  // of the row and the lane (a channels-last softmax's exp and normalize passes), whose buffer
  // the loop reads only at the element it stores: a tile's rows then run at once with no
  // order between them to keep.
  bool ok = true;
  std::map<std::string, std::vector<Expr>> stored;  // buffer -> the indices it is stored at
  std::function<void(const Stmt&)> check = [&](const Stmt& st) {
    if (const auto* b = st.as<Block>()) {
      for (const Stmt& c : b->stmts) check(c);
    } else if (const auto* l = st.as<Let>()) {
      check(l->body);
    } else if (const auto* w = st.as<Store>()) {
      ok = ok && arrays_.count(w->buffer) == 0 && scalars_.count(w->buffer) == 0 &&
           uses_any(w->index, {row}) && uses_any(w->index, {col});
      stored[w->buffer].push_back(w->index);
    } else if (const auto* a = st.as<Accumulate>()) {
      const auto* idx = a->index.as<Var>();
      const bool plain = a->op == ReduceOp::Sum || a->op == ReduceOp::Prod ||
                         a->op == ReduceOp::Max || a->op == ReduceOp::Min ||
                         a->op == ReduceOp::Any || a->op == ReduceOp::All;
      ok = ok && plain && a->buffers.size() == 1 && arrays_.count(a->buffers[0]) != 0 &&
           idx != nullptr && idx->name == col;
    } else {
      ok = false;
    }
  };
  check(cols->body);
  if (ok && !stored.empty()) {
    std::function<void(const Expr&)> reads = [&](const Expr& e) {
      if (const auto* l = e.as<Load>(); l != nullptr && stored.count(l->buffer) != 0) {
        for (const Expr& index : stored.at(l->buffer)) {
          ok = ok && structurally_equal(index, l->index);
        }
      }
      for_each_child(e, reads);
    };
    std::function<void(const Stmt&)> walk = [&](const Stmt& st) {
      for_each_stmt_child(st, reads, walk);
    };
    walk(cols->body);
  }
  if (!ok) return false;

  // Tiles of 4096 elements: 4096 // RBLOCK rows (RBLOCK covers the arrays and the lanes).
  // Note [Column tiles fold in two dimensions]
  // Each tile is folded along axis 0 in the loop (a reduction across the program's warps every
  // iteration), not kept as a [tile rows, RBLOCK] block of partials per array reduced once after
  // the loop as Inductor's looped reductions do: such blocks (two of 4096 elements for batch
  // norm's sibling sums) make CNN training slower (figures in docs/benchmarks.md).
  const std::string tile_rows = "(4096 // RBLOCK)";
  const std::string mn = expr(rows.min), ext = fresh("ext");
  line(ext + " = " + mn + " + " + expr(rows.extent));
  std::string x0 = fresh("x");
  line("for " + x0 + " in range(" + mn + ", " + ext + ", " + tile_rows + "):");
  ++indent_;
  memory_.enter_loop();
  load_cache_.clear();  // loads in the loop are per tile
  pending_stores_.clear();
  persistent_lanes_.clear();
  const std::string xs = fresh("xs"), xm = fresh("xmask");
  line(xs + " = " + x0 + " + tl.arange(0, " + tile_rows + ")" + index_cast_ + "[:, None]");
  line(xm + " = " + xs + " < " + ext);
  const std::set<std::string> outer_block_vars = block_vars_;  // as in block_loop
  block_vars_.insert(rows.var.as<Var>()->name);
  line(var_name(rows.var.as<Var>()->name) + " = " + xs);
  const std::string cext = fresh("ext"), coff = fresh("coff"), cm = fresh("cmask");
  line(cext + " = " + expr(cols->extent));
  line(coff + " = tl.arange(0, RBLOCK)" + index_cast_ + "[None, :]");
  line(cm + " = " + coff + " < " + cext);
  block_vars_.insert(col);
  line(var_name(col) + " = " + coff);
  block_mask_ = "(" + xm + " & " + cm + ")";
  block_var_ = col;
  block_min_zero_ = true;
  std::function<void(const Stmt&)> emit = [&](const Stmt& st) {
    if (const auto* b = st.as<Block>()) {
      for (const Stmt& c : b->stmts) emit(c);
    } else if (const auto* l = st.as<Let>()) {
      block_vars_.insert(l->var.as<Var>()->name);
      line(var_name(l->var.as<Var>()->name) + " = " + expr(l->value));
      emit(l->body);
    } else if (st.as<Store>() != nullptr) {
      stmt(st);  // each element of the tile its own, masked by the tile's mask
    } else {
      // A fold of the tile's rows into the array: lanes past the columns fold the identity.
      const auto* a = st.as<Accumulate>();
      const std::string& arr = arrays_.at(a->buffers[0]);
      const DType t = array_types_.at(a->buffers[0]);
      ReduceText r = reduce_text(a->op);
      const std::string id = expr(reduction_identity(a->op, 0, a->values[0].dtype()));
      const std::string part = std::string(r.reduce) + "(tl.where(" + block_mask_ + ", " +
                               expr(a->values[0]) + ", " + id + "))";
      line(arr + " = " + half_wrap(t, std::string(r.combine) + "(" + arr + ", " + part + ")"));
    }
  };
  emit(cols->body);
  block_vars_ = outer_block_vars;
  row_level_vars_.clear();
  block_mask_.clear();
  block_var_.clear();
  load_cache_.clear();
  pending_stores_.clear();
  persistent_lanes_.clear();
  memory_.exit_loop();
  line("pass");
  --indent_;
  if (uses_any(cols->extent, {}, true)) {
    if (!array_extent_.defined()) refuse("an inner loop whose extent depends on a loop variable");
  } else {
    block_extent_ = block_extent_.defined()
                        ? make_binary(ExprKind::Max, block_extent_, cols->extent)
                        : cols->extent;
  }
  return true;
}

void Emitter::block_stmt(const Stmt& s, const std::string& rmask) {
  if (s.kind() == StmtKind::Accumulate) {
    const auto* a = s.as<Accumulate>();
    for (const RowAcc& r : row_accs_) {
      if (r.buffer != a->buffers[0] || r.op != a->op) continue;
      if (!r.index_block.empty()) {
        std::string cv = fresh("cand"), ci = fresh("candi");
        line(cv + " = " + expr(a->values[0]));
        line(ci + " = " + expr(a->values[1]));
        arg_update(a->op == ReduceOp::ArgMax, r.block, r.index_block, cv, ci, mask());
        return;
      }
      ReduceText t = reduce_text(a->op);
      std::string v = expr(a->values[0]);
      std::string m = mask();
      std::string id = expr(reduction_identity(a->op, 0, r.dtype));
      line(r.block + " = " +
           half_wrap(r.dtype, std::string(t.combine) + "(" + r.block + ", tl.where(" + m + ", " +
                                  v + ", " + id + "))"));
      return;
    }
    stmt(s);  // elementwise: each lane its own element
    return;
  }
  if (s.kind() == StmtKind::Block) {
    for (const Stmt& c : s.as<Block>()->stmts) block_stmt(c, rmask);
    return;
  }
  if (s.kind() == StmtKind::Let) {
    const auto* l = s.as<Let>();
    block_vars_.insert(l->var.as<Var>()->name);
    line(var_name(l->var.as<Var>()->name) + " = " + expr(l->value));
    block_stmt(l->body, rmask);
    return;
  }
  stmt(s);
}

}  // namespace ember::codegen::triton_detail
