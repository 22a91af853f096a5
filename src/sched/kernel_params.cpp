#include "sched/kernel_params.h"

#include "loop/simplify.h"
#include "sched/pointwise.h"
#include "sched/size_expr.h"
#include "support/error.h"

namespace ember::sched {

std::vector<int64_t> sizes_of(const graph::TensorType& t) {
  return graph::constant_values(t.sizes);
}

std::map<graph::ValueId, std::string> add_group_buffers(const graph::Graph& g,
                                                        const KernelGroup& group, loop::Kernel& k) {
  std::map<graph::ValueId, std::string> buffer_of;
  auto add = [&](graph::ValueId v, loop::BufferRole role) {
    const graph::TensorType& t = g.type(v);
    std::optional<loop::DType> dtype = to_loop_dtype(t.dtype);
    EMBER_INTERNAL_ASSERT(dtype.has_value())
        << "kernel buffer of dtype " << graph::dtype_name(t.dtype);
    loop::BufferParam p;
    p.name = "buf" + std::to_string(k.buffers.size());
    p.role = role;
    p.dtype = *dtype;
    for (const graph::DimExpr& d : t.sizes) p.sizes.push_back(dim_expr(d));
    for (const graph::DimExpr& d : t.strides) p.strides.push_back(dim_expr(d));
    buffer_of[v] = p.name;
    k.buffers.push_back(std::move(p));
  };
  for (graph::ValueId v : group.inputs) add(v, loop::BufferRole::Input);
  for (graph::ValueId v : group.outputs) add(v, loop::BufferRole::Output);
  return buffer_of;
}

void add_index_status(KernelGroup& group, loop::Kernel& k) {
  loop::BufferParam status;
  status.name = "status";
  status.role = loop::BufferRole::Output;
  status.dtype = loop::DType::Bool;
  status.sizes = {loop::idx(1)};
  status.strides = {loop::idx(1)};
  k.buffers.push_back(status);
  group.index_status = true;
}

loop::Stmt index_range_check(
    const graph::TensorType& t,
    const std::function<loop::Expr(const std::vector<loop::Expr>&)>& element,
    const loop::Expr& size, bool negative_wraps, const std::string& prefix) {
  // Over the index tensor's sizes, constant or symbolic (loops over size variables).
  const graph::Dims& sizes = t.sizes;
  std::vector<loop::Expr> j;
  for (size_t d = 0; d < sizes.size(); ++d) {
    bool repeats = is_constant(sizes[d], 1) || is_constant(t.strides[d], 0);
    j.push_back(repeats ? loop::idx(0) : loop::var(prefix + std::to_string(d)));
  }
  loop::Expr x = element(j);
  if (x.dtype() != loop::DType::Int64) x = loop::Cast::make(loop::DType::Int64, x);
  loop::Expr lo = negative_wraps ? loop::simplify(loop::idx(0) - size) : loop::idx(0);
  loop::Expr ok = loop::And::make(loop::LE::make(lo, x), loop::LT::make(x, size));
  loop::Stmt s =
      loop::Accumulate::make(loop::ReduceOp::Any, {"bad"}, loop::idx(0), {loop::Not::make(ok)});
  for (size_t d = sizes.size(); d-- > 0;) {
    if (!j[d].as<loop::Var>()) continue;
    s = loop::For::make(j[d], loop::idx(0), dim_expr(sizes[d]), loop::ForKind::Serial, s);
  }
  return s;
}

}  // namespace ember::sched
