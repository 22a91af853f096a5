#include "sched/kernel_params.h"

#include "sched/pointwise.h"
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
    for (const graph::DimExpr& d : t.sizes) p.sizes.push_back(loop::idx(d.constant()));
    for (const graph::DimExpr& d : t.strides) p.strides.push_back(loop::idx(d.constant()));
    buffer_of[v] = p.name;
    k.buffers.push_back(std::move(p));
  };
  for (graph::ValueId v : group.inputs) add(v, loop::BufferRole::Input);
  for (graph::ValueId v : group.outputs) add(v, loop::BufferRole::Output);
  return buffer_of;
}

}  // namespace ember::sched
