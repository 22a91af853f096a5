#include "sched/batch_norm.h"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sched/kernel_params.h"
#include "sched/node_args.h"
#include "sched/pointwise.h"
#include "support/error.h"

namespace ember::sched {

namespace {

using graph::ValueId;
using loop::DType;
using loop::Expr;

const graph::Arg* arg(const graph::Graph& g, const graph::Node& n, std::string_view name) {
  return node_arg(g, n, name);
}

std::optional<ValueId> tensor(const graph::Graph& g, const graph::Node& n, std::string_view name) {
  const graph::Arg* a = arg(g, n, name);
  const auto* r = a ? std::get_if<graph::ValueRef>(a) : nullptr;
  return r ? std::optional<ValueId>(r->id) : std::nullopt;
}

bool absent(const graph::Graph& g, const graph::Node& n, std::string_view name) {
  const graph::Arg* a = arg(g, n, name);
  return a != nullptr && std::holds_alternative<graph::NoneArg>(*a);
}

// `a` and `b` agree on every dim of size > 1 (torch's is_contiguous ignores the others).
bool same_strides(const std::vector<int64_t>& sizes, const std::vector<int64_t>& a,
                  const std::vector<int64_t>& b) {
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1 && a[d] != b[d]) return false;
  }
  return true;
}

// Dense strides of `sizes` with the dims laid out in `order`, innermost first.
std::vector<int64_t> dense_strides(const std::vector<int64_t>& sizes,
                                   const std::vector<size_t>& order) {
  std::vector<int64_t> st(sizes.size(), 0);
  int64_t step = 1;
  for (size_t d : order) {
    st[d] = step;
    step *= std::max<int64_t>(sizes[d], 1);
  }
  return st;
}

// The strides eager's CPU kernel gives output 0 when it takes its contiguous path (input
// contiguous or channels-last contiguous, every parameter contiguous): the input's memory format,
// contiguous first. nullopt for other inputs, whose output layout and formula differ (the
// TensorIterator path), which stay ATen calls.
std::optional<std::vector<int64_t>> fast_path_strides(const graph::TensorType& x) {
  const std::vector<int64_t> sizes = sizes_of(x);
  const std::vector<int64_t> strides = graph::constant_values(x.strides);
  const size_t rank = sizes.size();
  std::vector<size_t> order(rank);
  for (size_t d = 0; d < rank; ++d) order[d] = rank - 1 - d;
  std::vector<int64_t> contiguous = dense_strides(sizes, order);
  if (same_strides(sizes, strides, contiguous)) return contiguous;
  if (rank == 4 || rank == 5) {
    order = {1};  // channels innermost, then the spatial dims from the last, then the batch
    for (size_t d = rank - 1; d >= 2; --d) order.push_back(d);
    order.push_back(0);
    std::vector<int64_t> channels_last = dense_strides(sizes, order);
    if (same_strides(sizes, strides, channels_last)) return channels_last;
  }
  return std::nullopt;
}

// The compute type of batch norm on input dtype `x`: eager's opmath type.
DType compute_type(DType x) {
  return x == DType::BFloat16 ? DType::Float32 : x;
}

Expr cast(DType t, Expr e) {
  return e.dtype() == t ? e : loop::Cast::make(t, std::move(e));
}

}  // namespace

bool batch_norm_takes_fast_path(const graph::TensorType& x, const graph::TensorType& y) {
  std::optional<std::vector<int64_t>> out_strides = fast_path_strides(x);
  return out_strides && y.sizes == x.sizes &&
         same_strides(sizes_of(y), graph::constant_values(y.strides), *out_strides);
}

bool is_batch_norm_inference(const graph::Graph& g, const graph::Node& n) {
  if (n.op < 0 || n.op >= static_cast<int32_t>(g.ops.size())) return false;
  const graph::OpInfo& op = g.op_of(n);
  if (n.args.size() != op.arg_names.size() || n.outputs.size() != 3) return false;
  if (op.is(graph::OpKind::native_batch_norm)) {
    const graph::Arg* training = arg(g, n, "training");
    if (training == nullptr || !std::holds_alternative<bool>(*training) ||
        std::get<bool>(*training)) {
      return false;
    }
  } else if (!op.is(graph::OpKind::_native_batch_norm_legit_no_training)) {
    return false;
  }
  const graph::Arg* eps = arg(g, n, "eps");
  if (eps == nullptr || !std::holds_alternative<double>(*eps)) return false;

  std::optional<ValueId> x = tensor(g, n, "input");
  if (!x) return false;
  const graph::TensorType& xt = g.type(*x);
  const graph::DType xd = xt.dtype;
  if (xd != graph::DType::Float32 && xd != graph::DType::Float64 && xd != graph::DType::BFloat16) {
    return false;
  }
  const graph::TensorType& yt = g.type(n.outputs[0]);
  if (xt.dim() < 2 || !xt.is_static() || !yt.is_static() || yt.dtype != xd ||
      yt.sizes != xt.sizes) {
    return false;
  }
  const int64_t channels = xt.sizes[1].constant();
  if (!batch_norm_takes_fast_path(xt, yt)) return false;  // eager's output layout

  // Parameters: [C], one dtype for all (x's, or f32 for a bf16 x).
  std::optional<graph::DType> param_dtype;
  for (const char* p : {"weight", "bias", "running_mean", "running_var"}) {
    std::optional<ValueId> v = tensor(g, n, p);
    if (!v) {
      const bool optional = std::string_view(p) == "weight" || std::string_view(p) == "bias";
      if (optional && absent(g, n, p)) continue;
      return false;
    }
    const graph::TensorType& t = g.type(*v);
    if (t.dim() != 1 || !t.is_static() || t.sizes[0].constant() != channels ||
        (channels > 1 && t.strides[0].constant() != 1)) {
      return false;
    }
    if (param_dtype && t.dtype != *param_dtype) return false;
    param_dtype = t.dtype;
  }
  if (*param_dtype != xd &&
      !(xd == graph::DType::BFloat16 && *param_dtype == graph::DType::Float32)) {
    return false;
  }
  return value_unread(g, n.outputs[1]) && value_unread(g, n.outputs[2]);
}

loop::Expr lower_batch_norm_inference(const graph::Graph& g, const graph::Node& n,
                                      const Index& index, ElementReader& reader) {
  EMBER_INTERNAL_ASSERT(is_batch_norm_inference(g, n))
      << "lower_batch_norm_inference of " << g.op_of(n).qualified_name();
  const DType out = *to_loop_dtype(g.type(n.outputs[0]).dtype);
  const DType comp = compute_type(out);
  const Index channel{index[1]};
  auto param = [&](const char* name) -> std::optional<Expr> {
    std::optional<ValueId> v = tensor(g, n, name);
    if (!v) return std::nullopt;
    return cast(comp, reader.element(*v, channel, false));
  };
  // Eager's eps is a double added in the compute type.
  const Expr eps = loop::FloatImm::make(comp, std::get<double>(*arg(g, n, "eps")));
  const Expr one = loop::FloatImm::make(comp, 1.0);
  const Expr var = *param("running_var");
  const Expr invstd = loop::Div::make(one, loop::Call::make(loop::CallFn::Sqrt, {var + eps}));
  std::optional<Expr> w = param("weight");
  std::optional<Expr> b = param("bias");
  const Expr alpha = w ? invstd * *w : invstd;
  const Expr mean_alpha = *param("running_mean") * alpha;
  const Expr beta = b ? *b - mean_alpha : loop::FloatImm::make(comp, 0.0) - mean_alpha;
  const Expr x = cast(comp, reader.element(*tensor(g, n, "input"), index, false));
  return cast(out, x * alpha + beta);
}

}  // namespace ember::sched
