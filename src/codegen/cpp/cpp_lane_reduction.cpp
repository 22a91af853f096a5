// Reductions over a vectorized loop: the lane form of the C++ emitter (see
// cpp_emitter_internal.h and docs/design/cpp_codegen.md).
#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "codegen/cpp/cpp_emitter_internal.h"
#include "loop/traverse.h"
#include "support/error.h"

namespace ember::codegen::detail {

using namespace loop;

std::string Emitter::acc_key(const Accumulate& a, const std::string& index) {
  return a.buffers[0] + "[" + index + "]";
}

bool Emitter::lane_op(ReduceOp op) {
  return op != ReduceOp::WelfordReduce && op != ReduceOp::WelfordCombine;
}

int64_t Emitter::lane_bytes(const Accumulate& a) {
  int64_t bytes = std::max(1, dtype_bits(a.values[0].dtype()) / 8);
  if (is_low_float(a.values[0].dtype())) bytes = 4;
  if (a.op == ReduceOp::ArgMax || a.op == ReduceOp::ArgMin) bytes = 8;
  return bytes;
}

Emitter::LaneReduction Emitter::analyze_lane_reduction(const For& f) {
  LaneReduction lr;
  std::set<std::string> inner_vars = {f.var.as<Var>()->name};
  std::vector<const Accumulate*> accs;
  std::set<std::string> loaded, stored;
  bool simple = true;  // no nested loops, allocations or conditionals
  std::function<void(const Expr&)> walk_expr = [&](const Expr& e) {
    if (auto* l = e.as<Load>()) loaded.insert(l->buffer);
    for_each_child(e, walk_expr);
  };
  std::function<void(const Stmt&)> walk = [&](const Stmt& s) {
    if (!s.defined()) return;
    switch (s.kind()) {
      case StmtKind::For:
      case StmtKind::Allocate:
      case StmtKind::IfThenElse:
        simple = false;
        break;
      case StmtKind::Let:
        inner_vars.insert(s.as<Let>()->var.as<Var>()->name);
        break;
      case StmtKind::Accumulate:
        accs.push_back(s.as<Accumulate>());
        break;
      case StmtKind::Store:
        stored.insert(s.as<Store>()->buffer);
        break;
      case StmtKind::Block:
        break;
    }
    for_each_stmt_child(s, walk_expr, walk);
  };
  walk(f.body);
  std::set<std::string> seen;
  bool uses_inner = false;
  for (const Accumulate* a : accs) {
    bool invariant = true;
    std::function<void(const Expr&)> check = [&](const Expr& e) {
      if (auto* v = e.as<Var>()) invariant &= !inner_vars.count(v->name);
      for_each_child(e, check);
    };
    check(a->index);
    if (!invariant) {
      uses_inner = true;
      continue;
    }
    if (seen.insert(acc_key(*a, expr(a->index))).second) lr.accs.push_back(a);
  }
  if (lr.accs.empty()) return lr;  // elementwise accumulates vectorize as they are
  lr.kind = LaneReduction::Kind::Serial;
  if (!simple || uses_inner) return lr;
  int64_t bytes = 1;
  for (const Accumulate* a : lr.accs) {
    if (!lane_op(a->op)) return lr;
    for (const std::string& b : a->buffers) {
      if (loaded.count(b) || stored.count(b)) return lr;  // the loop reads its own result
    }
    for (const Accumulate* o : accs) {
      if (o->buffers[0] == a->buffers[0] && o->op != a->op) return lr;
    }
    bytes = std::max(bytes, lane_bytes(*a));
  }
  // K lanes of 256 bytes (eight AVX2 registers, four AVX-512 ones) hide the latency of the
  // combining op. A short loop takes fewer, down to one 64-byte vector, so that it runs about
  // four blocks and its final tree is short (on short softmax rows, fewer lanes are faster than
  // a full set).
  int64_t k = std::clamp<int64_t>(256 / bytes, 8, 64);
  const int64_t min_k = std::max<int64_t>(4, 64 / bytes);
  if (std::optional<int64_t> n = as_const_int(f.extent)) {
    while (k > min_k && 4 * k > *n) k /= 2;
    while (k > 1 && k > *n) k /= 2;
  } else if (min_k < k) {
    lr.short_lanes = min_k;
  }
  if (k < 4) return lr;  // a handful of elements: the plain loop is best
  lr.kind = LaneReduction::Kind::Lanes;
  lr.lanes = k;
  return lr;
}

// Note [Lanes over a symbolic extent]
// A constant extent picks its lanes K for its length: a short row takes fewer, so that the
// lanes' setup and final tree (O(K) per row) stay small against the row (O(n)). A symbolic
// extent cannot, and K for long rows cost the short ones much: a softmax over 16 tokens in 64
// lanes ran 3-4x slower than the static kernel's 16 (BERT layer, width 32, 6 tokens: 5.6 us
// against 1.6 for its masked softmax). So the loop is emitted twice, in a branch on the
// extent: rows under four blocks of the long K run in the short K (one 64-byte vector's
// worth), the others in the long K.
void Emitter::emit_vectorized_reduction(const For& f, const LaneReduction& lr, int ind) {
  if (lr.short_lanes == 0) {
    emit_lane_reduction(f, lr, ind);
    return;
  }
  const int64_t split = 4 * lr.lanes;
  LaneReduction short_rows = lr, long_rows = lr;
  short_rows.lanes = lr.short_lanes;
  short_rows.max_extent = split - 1;
  short_rows.short_lanes = long_rows.short_lanes = 0;
  line(ind, "if ((" + expr(f.extent) + ") < " + std::to_string(split) + ") {");
  emit_lane_reduction(f, short_rows, ind + 1);
  line(ind, "} else {");
  emit_lane_reduction(f, long_rows, ind + 1);
  line(ind, "}");
}

void Emitter::combine(int ind, ReduceOp op, const std::string& ct,
                      const std::vector<std::string>& dst, const std::vector<std::string>& src) {
  switch (op) {
    case ReduceOp::Sum:
      line(ind, dst[0] + " = " + dst[0] + " + " + src[0] + ";");
      return;
    case ReduceOp::Prod:
      line(ind, dst[0] + " = " + dst[0] + " * " + src[0] + ";");
      return;
    case ReduceOp::Max:
      line(ind, dst[0] + " = ember_max_acc<" + ct + ">(" + dst[0] + ", " + src[0] + ");");
      return;
    case ReduceOp::Min:
      line(ind, dst[0] + " = ember_min_acc<" + ct + ">(" + dst[0] + ", " + src[0] + ");");
      return;
    case ReduceOp::Any:
      line(ind, dst[0] + " = " + dst[0] + " | " + src[0] + ";");
      return;
    case ReduceOp::All:
      line(ind, dst[0] + " = " + dst[0] + " & " + src[0] + ";");
      return;
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin: {
      std::string w = "w" + std::to_string(lane_counter_) + "_";
      line(ind, "{");
      line(ind + 1, "const bool " + w + " = ember_arg_better<" + ct + ">(" + src[0] + ", " +
                        src[1] + ", " + dst[0] + ", " + dst[1] + ", " +
                        (op == ReduceOp::ArgMax ? "true" : "false") + ");");
      line(ind + 1, dst[0] + " = " + w + " ? " + src[0] + " : " + dst[0] + ";");
      line(ind + 1, dst[1] + " = " + w + " ? " + src[1] + " : " + dst[1] + ";");
      line(ind, "}");
      return;
    }
    case ReduceOp::WelfordReduce:
    case ReduceOp::WelfordCombine:
      break;
  }
  EMBER_INTERNAL_ASSERT(false) << "no lane combine for " << reduce_op_name(op);
}

void Emitter::emit_lane_reduction(const For& f, const LaneReduction& lr, int ind) {
  const int id = lane_counter_++;
  const std::string sfx = std::to_string(id);
  const std::string l = "l" + sfx, k = std::to_string(lr.lanes);
  const std::string n = "n" + sfx, m = "m" + sfx, b = "b" + sfx;
  std::vector<LaneAcc> accs;
  bool cascade = false;
  for (size_t i = 0; i < lr.accs.size(); ++i) {
    const Accumulate* a = lr.accs[i];
    LaneAcc la{a, expr(a->index), {}, {}};
    for (size_t j = 0; j < a->buffers.size(); ++j) {
      la.lanes.push_back("ln" + sfx + "_" + std::to_string(i) + "_" + std::to_string(j));
      la.ctype.push_back(j == 0 ? compute_type(a->values[0].dtype()) : "int64_t");
    }
    cascade |= a->op == ReduceOp::Sum && is_float(a->values[0].dtype());
    accs.push_back(std::move(la));
  }
  std::optional<int64_t> extent = as_const_int(f.extent);
  // Levels of the cascade beyond the lanes themselves (0, 1 or 2).
  const int64_t block = lr.lanes * kCascadeBlocks;
  int levels = 0;
  // A symbolic extent counts at the most elements its branch runs.
  std::optional<int64_t> most = extent;
  if (!most && lr.max_extent >= 0) most = lr.max_extent;
  if (cascade) levels = !most ? 2 : *most > block * kCascadeBlocks ? 2 : *most > block ? 1 : 0;
  auto level_name = [](const LaneAcc& la, int lev) {
    return la.lanes[0] + "_c" + std::to_string(lev);
  };
  auto cascaded = [&](const LaneAcc& la) {
    return la.acc->op == ReduceOp::Sum && is_float(la.acc->values[0].dtype());
  };
  auto lane_loop = [&](int i, const std::string& bound) {
    line(i, "#pragma omp simd");
    line(i, "for (int64_t " + l + " = 0; " + l + " < " + bound + "; ++" + l + ") {");
  };

  line(ind, "{");
  line(ind + 1, "// reduction over " + expr(f.var) + " in " + k + " lanes");
  for (const LaneAcc& la : accs) {
    for (size_t j = 0; j < la.lanes.size(); ++j) {
      line(ind + 1, la.ctype[j] + " " + la.lanes[j] + "[" + k + "];");
    }
    for (int lev = 1; lev <= levels && cascaded(la); ++lev) {
      line(ind + 1, la.ctype[0] + " " + level_name(la, lev) + "[" + k + "];");
    }
  }
  lane_loop(ind + 1, k);
  for (const LaneAcc& la : accs) {
    for (size_t j = 0; j < la.lanes.size(); ++j) {
      Expr init = reduction_identity(la.acc->op, static_cast<int>(j),
                                     j == 0 ? la.acc->values[0].dtype() : kIndexType);
      line(ind + 2, la.lanes[j] + "[" + l + "] = " + val(init) + ";");
    }
    for (int lev = 1; lev <= levels && cascaded(la); ++lev) {
      line(ind + 2, level_name(la, lev) + "[" + l + "] = 0;");
    }
  }
  line(ind + 1, "}");
  line(ind + 1, "const int64_t " + n + " = " + expr(f.extent) + ";");
  line(ind + 1, "const int64_t " + m + " = " + n + " - " + n + " % " + k + ";");

  // The body, once per element, with the reduced accumulators redirected to lane l.
  auto body = [&](int i, const std::string& first) {
    line(i, "const int64_t " + expr(f.var) + " = " + expr(f.min) + " + " + first + " + " + l + ";");
    for (const LaneAcc& la : accs) {
      std::vector<std::string> refs;
      for (const std::string& lane : la.lanes) refs.push_back(lane + "[" + l + "]");
      lane_refs_[acc_key(*la.acc, la.index)] = refs;
    }
    stmt(f.body, i);
    lane_refs_.clear();
  };
  // Flushes level `lev - 1` (the lanes when lev == 1) into level `lev`.
  auto flush = [&](int i, int lev) {
    lane_loop(i, k);
    for (const LaneAcc& la : accs) {
      if (!cascaded(la)) continue;
      std::string from = lev == 1 ? la.lanes[0] : level_name(la, lev - 1);
      std::string to = level_name(la, lev);
      line(i + 1, to + "[" + l + "] = " + to + "[" + l + "] + " + from + "[" + l + "];");
      line(i + 1, from + "[" + l + "] = 0;");
    }
    line(i, "}");
  };

  // Main blocks of K, nested in chunks of C blocks per cascade level.
  int i = ind + 1;
  std::vector<std::string> starts = {"0"};
  for (int lev = levels; lev >= 1; --lev) {
    std::string c = "c" + sfx + "_" + std::to_string(lev);
    int64_t span = lr.lanes * (lev == 2 ? kCascadeBlocks * kCascadeBlocks : kCascadeBlocks);
    std::string lo = starts.back(), sp = std::to_string(span);
    std::string hi = lev == levels ? m
                                   : "std::min<int64_t>(" + lo + " + " +
                                         std::to_string(span * kCascadeBlocks) + ", " + m + ")";
    line(i,
         "for (int64_t " + c + " = " + lo + "; " + c + " < " + hi + "; " + c + " += " + sp + ") {");
    starts.push_back(c);
    ++i;
  }
  {
    std::string lo = starts.back();
    std::string hi = levels == 0 ? m
                                 : "std::min<int64_t>(" + lo + " + " +
                                       std::to_string(lr.lanes * kCascadeBlocks) + ", " + m + ")";
    line(i,
         "for (int64_t " + b + " = " + lo + "; " + b + " < " + hi + "; " + b + " += " + k + ") {");
    lane_loop(i + 1, k);
    body(i + 2, b);
    line(i + 1, "}");
    line(i, "}");
  }
  for (int lev = 1; lev <= levels; ++lev) {
    flush(i, lev);
    --i;
    line(i, "}");
  }
  // The tail: fewer than K elements.
  if (!extent || *extent % lr.lanes != 0) {
    lane_loop(ind + 1, n + " - " + m);
    body(ind + 2, m);
    line(ind + 1, "}");
  }
  // Levels back into the lanes, then the lanes into one by a fixed tree, into the accumulator.
  if (levels > 0) {
    lane_loop(ind + 1, k);
    for (const LaneAcc& la : accs) {
      if (!cascaded(la)) continue;
      std::string sum = level_name(la, levels) + "[" + l + "]";
      for (int lev = levels - 1; lev >= 1; --lev) {
        sum = "(" + sum + " + " + level_name(la, lev) + "[" + l + "])";
      }
      line(ind + 2, la.lanes[0] + "[" + l + "] = " + sum + " + " + la.lanes[0] + "[" + l + "];");
    }
    line(ind + 1, "}");
  }
  for (int64_t w = lr.lanes / 2; w >= 1; w /= 2) {
    // The last two halvings (2 and 1 lanes) as plain code: GCC's vector code for them goes
    // through the stack.
    if (w <= 2) {
      line(ind + 1,
           "for (int64_t " + l + " = 0; " + l + " < " + std::to_string(w) + "; ++" + l + ") {");
    } else {
      lane_loop(ind + 1, std::to_string(w));
    }
    for (const LaneAcc& la : accs) {
      std::vector<std::string> dst, src;
      for (const std::string& lane : la.lanes) {
        dst.push_back(lane + "[" + l + "]");
        src.push_back(lane + "[" + l + " + " + std::to_string(w) + "]");
      }
      combine(ind + 2, la.acc->op, la.ctype[0], dst, src);
    }
    line(ind + 1, "}");
  }
  for (const LaneAcc& la : accs) {
    const Accumulate& a = *la.acc;
    DType t = a.values[0].dtype();
    std::vector<std::string> cur, src;
    for (size_t j = 0; j < a.buffers.size(); ++j) {
      std::string ref = buf_name(a.buffers[j]) + "[" + la.index + "]";
      cur.push_back(j == 0 && is_low_float(t) ? "static_cast<float>(" + ref + ")" : ref);
      src.push_back(la.lanes[j] + "[0]");
    }
    // Combine in the compute type, then store (rounding a bf16/f16 accumulator once).
    std::string tmp = "t" + sfx + "_" + a.buffers[0];
    std::vector<std::string> tmps;
    for (size_t j = 0; j < a.buffers.size(); ++j) {
      tmps.push_back(tmp + "_" + std::to_string(j));
      line(ind + 1, la.ctype[j] + " " + tmps.back() + " = " + cur[j] + ";");
    }
    combine(ind + 1, a.op, la.ctype[0], tmps, src);
    for (size_t j = 0; j < a.buffers.size(); ++j) {
      line(ind + 1, buf_name(a.buffers[j]) + "[" + la.index +
                        "] = " + (j == 0 ? round_to(t, tmps[j]) : tmps[j]) + ";");
    }
  }
  line(ind, "}");
}

}  // namespace ember::codegen::detail
