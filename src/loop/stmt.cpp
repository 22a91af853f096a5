#include "loop/stmt.h"

#include <limits>

#include "support/error.h"

namespace ember::loop {

const char* stmt_kind_name(StmtKind k) {
  switch (k) {
#define EMBER_LOOP_STMT(Name) \
  case StmtKind::Name:        \
    return #Name;
#include "loop/nodes.def"
  }
  return "?";
}

const char* for_kind_name(ForKind k) {
  switch (k) {
    case ForKind::Serial:
      return "serial";
    case ForKind::Parallel:
      return "parallel";
    case ForKind::Vectorized:
      return "vectorized";
    case ForKind::Unrolled:
      return "unrolled";
  }
  return "?";
}

namespace {

void check_index(const Expr& e, const char* what) {
  EMBER_INTERNAL_ASSERT(e.defined()) << what << " is undefined";
  EMBER_INTERNAL_ASSERT(e.dtype() == kIndexType)
      << what << " has type " << dtype_name(e.dtype()) << ", not i64";
}

}  // namespace

Stmt For::make(Expr var, Expr min, Expr extent, ForKind kind, Stmt body, Expr parallel_when) {
  EMBER_INTERNAL_ASSERT(var.as<Var>() && var.dtype() == kIndexType) << "For needs an i64 Var";
  check_index(min, "For min");
  check_index(extent, "For extent");
  EMBER_INTERNAL_ASSERT(body.defined()) << "For without a body";
  EMBER_INTERNAL_ASSERT(!parallel_when.defined() ||
                        (kind == ForKind::Parallel && parallel_when.dtype() == DType::Bool))
      << "parallel_when is a bool, on a parallel loop only";
  return Stmt(std::make_shared<For>(std::move(var), std::move(min), std::move(extent), kind,
                                    std::move(body), std::move(parallel_when)));
}

Stmt For::with(Expr mn, Expr ext, Stmt b) const {
  return make(var, std::move(mn), std::move(ext), for_kind, std::move(b), parallel_when);
}

Stmt Block::make(std::vector<Stmt> stmts) {
  std::vector<Stmt> flat;
  for (Stmt& s : stmts) {
    EMBER_INTERNAL_ASSERT(s.defined()) << "Block with an undefined statement";
    if (const auto* b = s.as<Block>()) {
      flat.insert(flat.end(), b->stmts.begin(), b->stmts.end());
    } else {
      flat.push_back(std::move(s));
    }
  }
  if (flat.size() == 1) return flat[0];
  return Stmt(std::make_shared<Block>(std::move(flat)));
}

Stmt Store::make(std::string buffer, Expr index, Expr value) {
  EMBER_INTERNAL_ASSERT(is_identifier(buffer)) << "bad buffer name '" << buffer << "'";
  check_index(index, "Store index");
  EMBER_INTERNAL_ASSERT(value.defined()) << "Store of an undefined value";
  return Stmt(std::make_shared<Store>(std::move(buffer), std::move(index), std::move(value)));
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Prod:
      return "prod";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::ArgMax:
      return "argmax";
    case ReduceOp::ArgMin:
      return "argmin";
    case ReduceOp::Any:
      return "any";
    case ReduceOp::All:
      return "all";
    case ReduceOp::WelfordReduce:
      return "welford";
    case ReduceOp::WelfordCombine:
      return "welford_combine";
  }
  return "?";
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(ReduceOp::WelfordCombine); ++i) {
    auto op = static_cast<ReduceOp>(i);
    if (name == reduce_op_name(op)) return op;
  }
  return std::nullopt;
}

int reduce_op_num_buffers(ReduceOp op) {
  switch (op) {
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin:
      return 2;
    case ReduceOp::WelfordReduce:
    case ReduceOp::WelfordCombine:
      return 3;
    default:
      return 1;
  }
}

int reduce_op_num_values(ReduceOp op) {
  switch (op) {
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin:
      return 2;
    case ReduceOp::WelfordCombine:
      return 3;
    default:
      return 1;
  }
}

namespace {

int64_t int_lowest(DType t) {
  switch (t) {
    case DType::UInt8:
      return 0;
    case DType::Int8:
      return std::numeric_limits<int8_t>::min();
    case DType::Int16:
      return std::numeric_limits<int16_t>::min();
    case DType::Int32:
      return std::numeric_limits<int32_t>::min();
    default:
      return std::numeric_limits<int64_t>::min();
  }
}

int64_t int_highest(DType t) {
  switch (t) {
    case DType::UInt8:
      return 255;
    case DType::Int8:
      return std::numeric_limits<int8_t>::max();
    case DType::Int16:
      return std::numeric_limits<int16_t>::max();
    case DType::Int32:
      return std::numeric_limits<int32_t>::max();
    default:
      return std::numeric_limits<int64_t>::max();
  }
}

Expr constant(DType t, double v) {
  return is_float(t) ? FloatImm::make(t, v) : IntImm::make(t, static_cast<int64_t>(v));
}

}  // namespace

Expr reduction_identity(ReduceOp op, int position, DType t) {
  EMBER_INTERNAL_ASSERT(position >= 0 && position < reduce_op_num_buffers(op))
      << reduce_op_name(op) << " has no accumulator " << position;
  const double inf = std::numeric_limits<double>::infinity();
  switch (op) {
    case ReduceOp::Sum:
      return constant(t, 0);
    case ReduceOp::Prod:
      return constant(t, 1);
    case ReduceOp::Max:
    case ReduceOp::ArgMax:
      if (position == 1) return idx(std::numeric_limits<int64_t>::max());
      return is_float(t) ? FloatImm::make(t, -inf) : IntImm::make(t, int_lowest(t));
    case ReduceOp::Min:
    case ReduceOp::ArgMin:
      if (position == 1) return idx(std::numeric_limits<int64_t>::max());
      return is_float(t) ? FloatImm::make(t, inf) : IntImm::make(t, int_highest(t));
    case ReduceOp::Any:
      return bool_imm(false);
    case ReduceOp::All:
      return bool_imm(true);
    case ReduceOp::WelfordReduce:
    case ReduceOp::WelfordCombine:
      return constant(t, 0);
  }
  return {};
}

Stmt Accumulate::make(ReduceOp op, std::vector<std::string> buffers, Expr index,
                      std::vector<Expr> values) {
  const char* name = reduce_op_name(op);
  check_index(index, "Accumulate index");
  EMBER_INTERNAL_ASSERT(static_cast<int>(buffers.size()) == reduce_op_num_buffers(op))
      << name << " takes " << reduce_op_num_buffers(op) << " buffers, not " << buffers.size();
  EMBER_INTERNAL_ASSERT(static_cast<int>(values.size()) == reduce_op_num_values(op))
      << name << " takes " << reduce_op_num_values(op) << " values, not " << values.size();
  for (const Expr& v : values) EMBER_INTERNAL_ASSERT(v.defined()) << name << " of undefined";
  for (const std::string& b : buffers) {
    EMBER_INTERNAL_ASSERT(is_identifier(b)) << "bad buffer name '" << b << "'";
  }
  DType t = values[0].dtype();
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Prod:
    case ReduceOp::Max:
    case ReduceOp::Min:
      EMBER_INTERNAL_ASSERT(is_numeric(t)) << name << " of " << dtype_name(t);
      break;
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin:
      EMBER_INTERNAL_ASSERT(is_numeric(t)) << name << " of " << dtype_name(t);
      EMBER_INTERNAL_ASSERT(values[1].dtype() == kIndexType) << name << " index is not i64";
      break;
    case ReduceOp::Any:
    case ReduceOp::All:
      EMBER_INTERNAL_ASSERT(t == DType::Bool) << name << " of " << dtype_name(t);
      break;
    case ReduceOp::WelfordReduce:
    case ReduceOp::WelfordCombine:
      EMBER_INTERNAL_ASSERT(is_float(t)) << name << " of " << dtype_name(t);
      for (const Expr& v : values) {
        EMBER_INTERNAL_ASSERT(v.dtype() == t) << name << " values of different types";
      }
      break;
  }
  return Stmt(
      std::make_shared<Accumulate>(op, std::move(buffers), std::move(index), std::move(values)));
}

Stmt Let::make(Expr var, Expr value, Stmt body) {
  EMBER_INTERNAL_ASSERT(var.as<Var>()) << "Let needs a Var";
  EMBER_INTERNAL_ASSERT(value.defined() && value.dtype() == var.dtype())
      << "Let " << var.as<Var>()->name << " binds a value of another type";
  EMBER_INTERNAL_ASSERT(body.defined()) << "Let without a body";
  return Stmt(std::make_shared<Let>(std::move(var), std::move(value), std::move(body)));
}

Stmt IfThenElse::make(Expr cond, Stmt then_case, Stmt else_case) {
  EMBER_INTERNAL_ASSERT(cond.defined() && cond.dtype() == DType::Bool) << "If of a non-b8 cond";
  EMBER_INTERNAL_ASSERT(then_case.defined()) << "If without a then case";
  return Stmt(
      std::make_shared<IfThenElse>(std::move(cond), std::move(then_case), std::move(else_case)));
}

Stmt Allocate::make(std::string buffer, DType dtype, std::vector<Expr> sizes, Stmt body) {
  EMBER_INTERNAL_ASSERT(is_identifier(buffer)) << "bad buffer name '" << buffer << "'";
  for (const Expr& s : sizes) check_index(s, "Allocate size");
  EMBER_INTERNAL_ASSERT(body.defined()) << "Allocate without a body";
  return Stmt(
      std::make_shared<Allocate>(std::move(buffer), dtype, std::move(sizes), std::move(body)));
}

const char* buffer_role_name(BufferRole r) {
  switch (r) {
    case BufferRole::Input:
      return "input";
    case BufferRole::Output:
      return "output";
    case BufferRole::InOut:
      return "inout";
    case BufferRole::Temp:
      return "temp";
  }
  return "?";
}

const BufferParam* Kernel::find_buffer(const std::string& name) const {
  for (const BufferParam& b : buffers) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

std::vector<Stmt> Kernel::parts() const {
  if (!combo) return {body};
  if (const auto* b = body.as<Block>()) return b->stmts;
  return {body};
}

}  // namespace ember::loop
