#include "sched/reduction_spec.h"

#include <map>
#include <string>
#include <string_view>

#include "sched/batch_norm.h"
#include "sched/fusion.h"
#include "sched/kernel_params.h"
#include "sched/pointwise.h"
#include "sched/size_expr.h"

namespace ember::sched {

namespace {

using graph::DType;
using graph::ValueId;
using Kind = ReductionKind;

const graph::Arg* arg_named(const graph::Graph& g, const graph::Node& n, std::string_view name) {
  const graph::OpInfo& op = g.op_of(n);
  for (size_t i = 0; i < op.arg_names.size() && i < n.args.size(); ++i) {
    if (op.arg_names[i] == name) return &n.args[i];
  }
  return nullptr;
}

std::optional<ValueId> value_arg(const graph::Arg* a) {
  const auto* r = a ? std::get_if<graph::ValueRef>(a) : nullptr;
  if (r == nullptr) return std::nullopt;
  return r->id;
}

bool is_none(const graph::Arg* a) {
  return a != nullptr && std::holds_alternative<graph::NoneArg>(*a);
}

// How a node names its dims and whether it has keepdim: the overloads ember lowers.
enum class DimArg : uint8_t {
  All,       // no dim argument: every dim, no keepdim (aten::sum, aten::max, aten::any, ...)
  List,      // `int[1]? dim` / `int[] dim`: None or [] mean every dim
  Int,       // `int dim`
  OptInt,    // `int? dim`: None means every dim (argmax: the flattened input)
  Softmax,   // `int dim`, every output element-shaped
  Normalize  // layer_norm / group_norm
};

struct OpEntry {
  Kind kind;
  DimArg dims;
};

const OpEntry* op_entry(const graph::OpInfo& op) {
  using graph::OpKind;
  static const std::map<graph::OpOverload, OpEntry> ops = {
      {{OpKind::sum, ""}, {Kind::Sum, DimArg::All}},
      {{OpKind::sum, "dim_IntList"}, {Kind::Sum, DimArg::List}},
      {{OpKind::mean, ""}, {Kind::Mean, DimArg::All}},
      {{OpKind::mean, "dim"}, {Kind::Mean, DimArg::List}},
      {{OpKind::prod, ""}, {Kind::Prod, DimArg::All}},
      {{OpKind::prod, "dim_int"}, {Kind::Prod, DimArg::Int}},
      {{OpKind::amax, ""}, {Kind::Amax, DimArg::List}},
      {{OpKind::amin, ""}, {Kind::Amin, DimArg::List}},
      {{OpKind::max, ""}, {Kind::Amax, DimArg::All}},
      {{OpKind::min, ""}, {Kind::Amin, DimArg::All}},
      {{OpKind::argmax, ""}, {Kind::ArgMax, DimArg::OptInt}},
      {{OpKind::argmin, ""}, {Kind::ArgMin, DimArg::OptInt}},
      {{OpKind::max, "dim"}, {Kind::MaxDim, DimArg::Int}},
      {{OpKind::min, "dim"}, {Kind::MinDim, DimArg::Int}},
      {{OpKind::any, ""}, {Kind::Any, DimArg::All}},
      {{OpKind::any, "dim"}, {Kind::Any, DimArg::Int}},
      {{OpKind::any, "dims"}, {Kind::Any, DimArg::List}},
      {{OpKind::all, ""}, {Kind::All, DimArg::All}},
      {{OpKind::all, "dim"}, {Kind::All, DimArg::Int}},
      {{OpKind::all, "dims"}, {Kind::All, DimArg::List}},
      {{OpKind::var, "correction"}, {Kind::Var, DimArg::List}},
      {{OpKind::std, "correction"}, {Kind::Std, DimArg::List}},
      {{OpKind::var_mean, "correction"}, {Kind::VarMean, DimArg::List}},
      {{OpKind::std_mean, "correction"}, {Kind::StdMean, DimArg::List}},
      {{OpKind::logsumexp, ""}, {Kind::LogSumExp, DimArg::List}},
      {{OpKind::_softmax, ""}, {Kind::Softmax, DimArg::Softmax}},
      {{OpKind::_log_softmax, ""}, {Kind::LogSoftmax, DimArg::Softmax}},
      {{OpKind::_safe_softmax, ""}, {Kind::SafeSoftmax, DimArg::Softmax}},
      {{OpKind::native_layer_norm, ""}, {Kind::LayerNorm, DimArg::Normalize}},
      {{OpKind::native_group_norm, ""}, {Kind::GroupNorm, DimArg::Normalize}},
      {{OpKind::_native_batch_norm_legit_functional, ""}, {Kind::BatchNorm, DimArg::Normalize}},
      {{OpKind::_native_batch_norm_legit, "no_stats"}, {Kind::BatchNorm, DimArg::Normalize}},
      {{OpKind::native_batch_norm, ""}, {Kind::BatchNorm, DimArg::Normalize}},
  };
  auto it = ops.find(graph::OpOverload{op.kind, op.overload});
  return it == ops.end() ? nullptr : &it->second;
}

bool is_float(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::BFloat16;
}
bool is_int(DType t) {
  return t == DType::UInt8 || t == DType::Int8 || t == DType::Int16 || t == DType::Int32 ||
         t == DType::Int64;
}

// A tensor on a kernel device whose dtype the kernels handle (f16 excluded: its eager numerics are
// not checked). Its geometry may be symbolic (the kinds that take symbols check that
// themselves: Analyzer::symbolic_ok).
bool usable(const graph::TensorType& t) {
  if (!kernel_device(t.device)) return false;
  return is_float(t.dtype) || is_int(t.dtype) || t.dtype == DType::Bool;
}

// The wrapped dim `d` of a rank-`rank` tensor, or nullopt when out of range. A 0-dim tensor
// takes dims 0 and -1 (and reduces nothing).
std::optional<int64_t> wrap_dim(int64_t d, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (d < -r || d >= r) return std::nullopt;
  return d < 0 ? d + r : d;
}

// Strides of `t` over the iteration space of x's own dims (t has x's sizes): 0 for size-1 dims.
graph::Dims element_strides(const graph::TensorType& t) {
  graph::Dims s;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    s.push_back(is_constant(t.sizes[d], 1) ? graph::DimExpr(0) : t.strides[d]);
  }
  return s;
}

// True when every use of `v` is an `aten::_to_copy` to `dtype` (none at all included): no other
// node, graph output or mutation reads `v` itself.
bool only_converted_to(const graph::Graph& g, ValueId v, DType dtype) {
  for (ValueId o : g.outputs) {
    if (o == v) return false;
  }
  for (const graph::Mutation& m : g.mutations) {
    if (m.value == v) return false;
  }
  for (const graph::Node& n : g.nodes) {
    bool reads = false;
    for (const graph::Arg& a : n.args) {
      if (const auto* r = std::get_if<graph::ValueRef>(&a)) reads |= r->id == v;
      if (const auto* l = std::get_if<graph::ValueList>(&a)) {
        for (const auto& item : l->items) reads |= item == v;
      }
    }
    if (reads && (!g.op_of(n).is(graph::OpKind::_to_copy) || n.outputs.size() != 1 ||
                  g.type(n.outputs[0]).dtype != dtype)) {
      return false;
    }
  }
  return true;
}

class Analyzer {
 public:
  Analyzer(const graph::Graph& g, const graph::Node& n) : g_(g), n_(n) {}

  std::optional<ReductionSpec> run() {
    if (n_.op < 0 || n_.op >= static_cast<int32_t>(g_.ops.size())) return std::nullopt;
    const OpEntry* entry = op_entry(g_.op_of(n_));
    if (entry == nullptr) return std::nullopt;
    s_.kind = entry->kind;
    for (size_t i = 0; i < n_.result_slots.size(); ++i) {
      if (n_.result_slots[i] != static_cast<int32_t>(i)) return std::nullopt;
    }
    std::optional<ValueId> x =
        value_arg(arg_named(g_, n_, entry->dims == DimArg::Normalize ? "input" : "self"));
    if (!x || !usable(g_.type(*x))) return std::nullopt;
    for (ValueId o : n_.outputs) {
      if (!usable(g_.type(o))) return std::nullopt;
    }
    s_.x.value = *x;
    const graph::TensorType& xt = g_.type(*x);
    if (!dtypes_ok(xt.dtype) || !symbolic_ok()) return std::nullopt;
    if (s_.kind == Kind::BatchNorm) return batch_norm();
    if (entry->dims == DimArg::Normalize) {
      return s_.kind == Kind::LayerNorm ? layer_norm() : group_norm();
    }
    s_.sizes = xt.sizes;
    s_.x.strides = element_strides(xt);
    const int64_t rank = static_cast<int64_t>(s_.sizes.size());
    s_.reduced.assign(s_.sizes.size(), false);
    bool keepdim = false;
    if (entry->dims == DimArg::Softmax) {
      const auto* d = std::get_if<int64_t>(arg_named(g_, n_, "dim"));
      if (d == nullptr) return std::nullopt;
      if (s_.kind == Kind::SafeSoftmax) {
        // `dtype`: None, or the output's dtype (dtypes_ok: x's, or f32 from bf16, exact).
        const graph::Arg* t = arg_named(g_, n_, "dtype");
        const auto* dt = t ? std::get_if<DType>(t) : nullptr;
        if (t == nullptr ||
            (!is_none(t) && (dt == nullptr || *dt != g_.type(n_.outputs[0]).dtype))) {
          return std::nullopt;
        }
      } else {
        const auto* half = std::get_if<bool>(arg_named(g_, n_, "half_to_float"));
        if (half == nullptr || *half) return std::nullopt;
      }
      std::optional<int64_t> w = wrap_dim(*d, rank);
      if (!w) return std::nullopt;
      if (rank > 0) s_.reduced[*w] = true;  // a 0-dim input is its own row of one
      s_.last_dim = rank == 0 || *w == rank - 1;
      if (n_.outputs.size() != 1 || g_.type(n_.outputs[0]).sizes != s_.sizes) {
        return std::nullopt;
      }
      s_.outputs.push_back({n_.outputs[0], element_strides(g_.type(n_.outputs[0]))});
      return s_;
    }
    if (!reduced_dims(entry->dims, rank, keepdim)) return std::nullopt;
    if (s_.kind == Kind::Var || s_.kind == Kind::Std || s_.kind == Kind::VarMean ||
        s_.kind == Kind::StdMean) {
      const graph::Arg* c = arg_named(g_, n_, "correction");
      if (c == nullptr) return std::nullopt;
      if (const auto* i = std::get_if<int64_t>(c)) {
        s_.correction = static_cast<double>(*i);
      } else if (const auto* f = std::get_if<double>(c)) {
        s_.correction = *f;
      } else if (!is_none(c)) {
        return std::nullopt;
      }
    }
    if (!dtype_arg_ok()) return std::nullopt;
    const size_t num_outputs = s_.kind == Kind::MaxDim || s_.kind == Kind::MinDim ||
                                       s_.kind == Kind::VarMean || s_.kind == Kind::StdMean
                                   ? 2
                                   : 1;
    if (n_.outputs.size() != num_outputs) return std::nullopt;
    for (ValueId o : n_.outputs) {
      std::optional<ReductionOperand> op = reduced_output(o, keepdim);
      if (!op) return std::nullopt;
      s_.outputs.push_back(*op);
    }
    return s_;
  }

 private:
  // Whether the node's kind takes symbolic sizes, strides and offsets, where it has any: not
  // group_norm and batch_norm (their size arguments and eager's fast-path layouts are read as
  // numbers).
  bool symbolic_ok() const {
    if (s_.kind != Kind::GroupNorm && s_.kind != Kind::BatchNorm) return true;
    for (ValueId v : graph::tensor_reads(n_)) {
      if (!g_.type(v).is_static()) return false;
    }
    for (ValueId v : n_.outputs) {
      if (!g_.type(v).is_static()) return false;
    }
    return true;
  }

  // Input and output dtypes the kernels implement as eager does.
  bool dtypes_ok(DType x) const {
    auto out = [&](size_t i) { return g_.type(n_.outputs.at(i)).dtype; };
    if (n_.outputs.empty()) return false;
    switch (s_.kind) {
      case Kind::Sum:
      case Kind::Prod:
        return out(0) != DType::Bool;
      case Kind::Mean:
        return is_float(out(0));
      case Kind::Amax:
      case Kind::Amin:
        return x != DType::Bool && out(0) == x;
      case Kind::ArgMax:
      case Kind::ArgMin:
        return x != DType::Bool && out(0) == DType::Int64;
      case Kind::MaxDim:
      case Kind::MinDim:
        return n_.outputs.size() == 2 && x != DType::Bool && out(0) == x && out(1) == DType::Int64;
      case Kind::Any:
      case Kind::All:
        return out(0) == DType::Bool || out(0) == DType::UInt8;
      case Kind::Var:
      case Kind::Std:
      case Kind::VarMean:
      case Kind::StdMean:
        for (size_t i = 0; i < n_.outputs.size(); ++i) {
          if (out(i) != x) return false;
        }
        return is_float(x);
      case Kind::LogSumExp:
        return is_float(out(0)) && (x == out(0) || !is_float(x));
      case Kind::Softmax:
      case Kind::LogSoftmax:
        return is_float(x) && out(0) == x;
      case Kind::SafeSoftmax:  // in f32 from bf16 as from bf16 converted first (exact)
        return is_float(x) && (out(0) == x || (x == DType::BFloat16 && out(0) == DType::Float32));
      case Kind::LayerNorm:
      case Kind::GroupNorm:
        return n_.outputs.size() == 3 && is_float(x) && out(0) == x && is_float(out(1)) &&
               is_float(out(2));
      case Kind::BatchNorm:
        return is_float(x) && out(0) == x;  // the statistics: batch_norm()
    }
    return false;
  }

  // Sets s_.reduced from the dim argument; `keepdim` from the keepdim argument.
  bool reduced_dims(DimArg kind, int64_t rank, bool& keepdim) {
    std::vector<int64_t> dims;
    bool all = false;
    switch (kind) {
      case DimArg::All:
        all = true;
        break;
      case DimArg::List: {
        const graph::Arg* a = arg_named(g_, n_, "dim");
        if (a == nullptr) return false;
        if (const auto* l = std::get_if<std::vector<int64_t>>(a)) {
          dims = *l;
          // An empty list reduces every dim (sum, mean, amax, var, logsumexp), except that
          // any.dims and all.dims reduce none (as eager).
          if (dims.empty() && s_.kind != Kind::Any && s_.kind != Kind::All) all = true;
        } else if (is_none(a)) {
          all = true;
        } else {
          return false;
        }
        break;
      }
      case DimArg::Int:
      case DimArg::OptInt: {
        const graph::Arg* a = arg_named(g_, n_, "dim");
        if (a == nullptr) return false;
        if (const auto* d = std::get_if<int64_t>(a)) {
          dims.push_back(*d);
        } else if (kind == DimArg::OptInt && is_none(a)) {
          all = true;
        } else {
          return false;
        }
        break;
      }
      case DimArg::Softmax:
      case DimArg::Normalize:
        return false;
    }
    for (int64_t d : dims) {
      std::optional<int64_t> w = wrap_dim(d, rank);
      if (!w) return false;
      if (rank > 0) {
        if (s_.reduced[*w]) return false;  // repeated dim: eager rejects it
        s_.reduced[*w] = true;
      }
    }
    if (all) s_.reduced.assign(static_cast<size_t>(rank), true);
    if (kind == DimArg::All) {
      keepdim = false;
      return true;
    }
    const auto* k = std::get_if<bool>(arg_named(g_, n_, "keepdim"));
    if (k == nullptr) return false;
    keepdim = *k;
    return true;
  }

  // sum/mean/prod's `dtype` argument: None, or the output's dtype (what eager computes in).
  bool dtype_arg_ok() const {
    if (s_.kind != Kind::Sum && s_.kind != Kind::Mean && s_.kind != Kind::Prod) return true;
    const graph::Arg* a = arg_named(g_, n_, "dtype");
    if (a == nullptr || is_none(a)) return true;
    const auto* t = std::get_if<DType>(a);
    return t != nullptr && *t == g_.type(n_.outputs[0]).dtype;
  }

  // A reduced output: keepdim (x's rank, reduced dims of size 1) or the kept dims only.
  std::optional<ReductionOperand> reduced_output(ValueId o, bool keepdim) const {
    const graph::TensorType& t = g_.type(o);
    const graph::Dims& sizes = t.sizes;
    ReductionOperand op{o, graph::Dims(s_.sizes.size(), 0)};
    size_t j = 0;
    for (size_t d = 0; d < s_.sizes.size(); ++d) {
      if (s_.reduced[d] && !keepdim) continue;
      if (j >= sizes.size()) return std::nullopt;
      if (!(sizes[j] == (s_.reduced[d] ? graph::DimExpr(1) : s_.sizes[d]))) return std::nullopt;
      if (!s_.reduced[d] && !is_constant(s_.sizes[d], 1)) op.strides[d] = t.strides[j];
      ++j;
    }
    if (j != sizes.size()) return std::nullopt;
    return op;
  }

  // An optional weight or bias argument of layer_norm / group_norm: absent, or a tensor of the
  // input's dtype or f32 with `sizes`; its strides over the space come from `strides_of`.
  template <typename F>
  bool param(const char* name, const graph::Dims& sizes, std::optional<ReductionOperand>& out,
             F strides_of) const {
    const graph::Arg* a = arg_named(g_, n_, name);
    if (is_none(a)) return true;
    std::optional<ValueId> v = value_arg(a);
    if (!v) return false;
    const graph::TensorType& t = g_.type(*v);
    DType x = g_.type(s_.x.value).dtype;
    if (!usable(t) || (t.dtype != x && t.dtype != DType::Float32) || t.sizes != sizes) {
      return false;
    }
    out = ReductionOperand{*v, strides_of(t)};
    return true;
  }

  bool eps_arg() {
    const auto* e = std::get_if<double>(arg_named(g_, n_, "eps"));
    if (e == nullptr) return false;
    s_.eps = *e;
    return true;
  }

  // layer_norm over the trailing dims `normalized_shape`; mean and rstd keep x's rank.
  std::optional<ReductionSpec> layer_norm() {
    const graph::TensorType& xt = g_.type(s_.x.value);
    s_.sizes = xt.sizes;
    s_.x.strides = element_strides(xt);
    const size_t rank = s_.sizes.size();
    const auto* ints = std::get_if<std::vector<int64_t>>(arg_named(g_, n_, "normalized_shape"));
    if (ints == nullptr || ints->empty() || ints->size() > rank) return std::nullopt;
    const graph::Dims shape(ints->begin(), ints->end());
    const size_t k = shape.size();
    if (!std::equal(shape.begin(), shape.end(), s_.sizes.end() - static_cast<ptrdiff_t>(k))) {
      return std::nullopt;
    }
    s_.reduced.assign(rank, false);
    for (size_t d = rank - k; d < rank; ++d) s_.reduced[d] = true;
    auto trailing = [&](const graph::TensorType& t) {
      graph::Dims st(rank, 0);
      graph::Dims own = element_strides(t);
      for (size_t d = 0; d < k; ++d) st[rank - k + d] = own[d];
      return st;
    };
    if (!param("weight", shape, s_.weight, trailing) || !param("bias", shape, s_.bias, trailing) ||
        !eps_arg()) {
      return std::nullopt;
    }
    if (g_.type(n_.outputs[0]).sizes != s_.sizes) return std::nullopt;
    s_.outputs.push_back({n_.outputs[0], element_strides(g_.type(n_.outputs[0]))});
    for (size_t i = 1; i < 3; ++i) {
      std::optional<ReductionOperand> o = reduced_output(n_.outputs[i], /*keepdim=*/true);
      if (!o) return std::nullopt;
      s_.outputs.push_back(*o);
    }
    return s_;
  }

  // group_norm: x [N, C, *] viewed as [N, G, C/G, *], reducing every dim after G; mean and rstd
  // are [N, G]; weight and bias [C] vary with (G, C/G).
  std::optional<ReductionSpec> group_norm() {
    const graph::TensorType& xt = g_.type(s_.x.value);
    const std::vector<int64_t> xs = sizes_of(xt);
    const auto* n = std::get_if<int64_t>(arg_named(g_, n_, "N"));
    const auto* c = std::get_if<int64_t>(arg_named(g_, n_, "C"));
    const auto* hw = std::get_if<int64_t>(arg_named(g_, n_, "HxW"));
    const auto* groups = std::get_if<int64_t>(arg_named(g_, n_, "group"));
    if (!n || !c || !hw || !groups || xs.size() < 2 || *groups <= 0 || *c % *groups != 0 ||
        xs[0] != *n || xs[1] != *c) {
      return std::nullopt;
    }
    int64_t spatial = 1;
    for (size_t d = 2; d < xs.size(); ++d) spatial *= xs[d];
    if (spatial != *hw) return std::nullopt;
    const int64_t g = *groups, cg = *c / *groups;
    s_.sizes = {xs[0], g, cg};
    for (size_t d = 2; d < xs.size(); ++d) s_.sizes.push_back(xs[d]);
    const std::vector<int64_t> sizes = graph::constant_values(s_.sizes);
    s_.reduced.assign(s_.sizes.size(), true);
    s_.reduced[0] = s_.reduced[1] = false;
    // A tensor of x's shape over the view: the channel stride splits into (G, C/G).
    auto view = [&](const graph::TensorType& t) {
      const std::vector<int64_t> own = graph::constant_values(t.strides);
      graph::Dims st = {own[0], own[1] * cg, own[1]};
      for (size_t d = 2; d < own.size(); ++d) st.push_back(own[d]);
      for (size_t d = 0; d < st.size(); ++d) {
        if (sizes[d] == 1) st[d] = 0;
      }
      return st;
    };
    auto channels = [&](const graph::TensorType& t) {
      graph::Dims st(s_.sizes.size(), 0);
      int64_t sw = t.strides[0].constant();
      st[1] = g == 1 ? 0 : sw * cg;
      st[2] = cg == 1 ? 0 : sw;
      return st;
    };
    s_.x.strides = view(xt);
    if (!param("weight", {*c}, s_.weight, channels) || !param("bias", {*c}, s_.bias, channels) ||
        !eps_arg()) {
      return std::nullopt;
    }
    if (sizes_of(g_.type(n_.outputs[0])) != xs) return std::nullopt;
    s_.outputs.push_back({n_.outputs[0], view(g_.type(n_.outputs[0]))});
    for (size_t i = 1; i < 3; ++i) {
      std::optional<ReductionOperand> o = reduced_output(n_.outputs[i], /*keepdim=*/false);
      if (!o) return std::nullopt;
      s_.outputs.push_back(*o);
    }
    return s_;
  }

  // Training-mode batch norm of x [N, C, *]: every dim but the channels (1) reduced. save_mean,
  // save_invstd and the new running statistics are [C], as are weight, bias and the running
  // statistics. Only where eager's result is known exactly: its contiguous path (x contiguous
  // or channels-last contiguous, [C] tensors contiguous, output 0 in eager's layout), every [C]
  // tensor of one dtype (x's, or f32 for a bf16 x: eager's mixed type), a non-empty x (eager
  // raises otherwise). `native_batch_norm` and `_native_batch_norm_legit.no_stats` only without
  // running statistics: native_batch_norm updates them in place, which a kernel must not (the
  // tracer records that form as `_native_batch_norm_legit_functional`).
  std::optional<ReductionSpec> batch_norm() {
    const graph::OpInfo& op = g_.op_of(n_);
    const bool update = op.is(graph::OpKind::_native_batch_norm_legit_functional);
    const graph::TensorType& xt = g_.type(s_.x.value);
    s_.sizes = xt.sizes;
    const std::vector<int64_t> sizes = sizes_of(xt);
    const size_t rank = sizes.size();
    const auto* training = std::get_if<bool>(arg_named(g_, n_, "training"));
    const auto* momentum = std::get_if<double>(arg_named(g_, n_, "momentum"));
    if (rank < 2 || training == nullptr || !*training || momentum == nullptr || !eps_arg() ||
        n_.outputs.size() != (update ? 5u : 3u) ||
        !batch_norm_takes_fast_path(xt, g_.type(n_.outputs[0]))) {
      return std::nullopt;
    }
    for (int64_t size : sizes) {
      if (size == 0) return std::nullopt;
    }
    if (op.is(graph::OpKind::native_batch_norm) && (!is_none(arg_named(g_, n_, "running_mean")) ||
                                                    !is_none(arg_named(g_, n_, "running_var")))) {
      return std::nullopt;
    }
    s_.momentum = *momentum;
    s_.x.strides = element_strides(xt);
    s_.reduced.assign(rank, true);
    s_.reduced[1] = false;
    const int64_t c = sizes[1];
    auto channels = [&](const graph::TensorType& t) {
      graph::Dims st(rank, 0);
      if (c != 1) st[1] = t.strides[0].constant();
      return st;
    };
    if (!param("weight", {c}, s_.weight, channels) || !param("bias", {c}, s_.bias, channels)) {
      return std::nullopt;
    }
    if (update && (!param("running_mean", {c}, s_.running_mean, channels) ||
                   !param("running_var", {c}, s_.running_var, channels) || !s_.running_mean ||
                   !s_.running_var)) {
      return std::nullopt;
    }
    // One dtype for every [C] tensor, and contiguous ones (eager's fast path).
    std::optional<DType> pd;
    for (const auto* o : {&s_.weight, &s_.bias, &s_.running_mean, &s_.running_var}) {
      if (!*o) continue;
      const graph::TensorType& t = g_.type((*o)->value);
      if (c != 1 && t.strides[0].constant() != 1) return std::nullopt;
      if (pd && *pd != t.dtype) return std::nullopt;
      pd = t.dtype;
    }
    const DType p = pd.value_or(xt.dtype);
    if (p != xt.dtype && !(xt.dtype == DType::BFloat16 && p == DType::Float32)) {
      return std::nullopt;
    }
    s_.outputs.push_back({n_.outputs[0], element_strides(g_.type(n_.outputs[0]))});
    // The statistics have dtype p in eager. The meta function gives f32 for a bf16 p: the kernel
    // then stores eager's bf16 values, exactly, in f32, which only a conversion back may read
    // (the tracer's copy of a new running statistic into its bf16 input).
    for (size_t i = 1; i < n_.outputs.size(); ++i) {
      std::optional<ReductionOperand> o = reduced_output(n_.outputs[i], /*keepdim=*/false);
      const DType t = g_.type(n_.outputs[i]).dtype;
      if (!o || (t != p && !(p == DType::BFloat16 && t == DType::Float32 &&
                             only_converted_to(g_, n_.outputs[i], p)))) {
        return std::nullopt;
      }
      s_.outputs.push_back(*o);
    }
    return s_;
  }

  const graph::Graph& g_;
  const graph::Node& n_;
  ReductionSpec s_;
};

// Every operand of `s`, for coalescing.
std::vector<ReductionOperand*> operands(ReductionSpec& s) {
  std::vector<ReductionOperand*> ops = {&s.x};
  if (s.weight) ops.push_back(&*s.weight);
  if (s.bias) ops.push_back(&*s.bias);
  if (s.running_mean) ops.push_back(&*s.running_mean);
  if (s.running_var) ops.push_back(&*s.running_var);
  for (ReductionOperand& o : s.outputs) ops.push_back(&o);
  return ops;
}

// Drops size-1 dims and merges dim d into d - 1 where both are reduced or both kept and every
// operand reads them as one run (stride[d - 1] == size[d] * stride[d], or both 0). Merging keeps
// the row-major order of the reduced dims (argmax's flat index).
void coalesce(ReductionSpec& s) {
  std::vector<ReductionOperand*> ops = operands(s);
  for (size_t d = s.sizes.size(); d-- > 0;) {
    if (!is_constant(s.sizes[d], 1)) continue;
    s.sizes.erase(s.sizes.begin() + static_cast<ptrdiff_t>(d));
    s.reduced.erase(s.reduced.begin() + static_cast<ptrdiff_t>(d));
    for (ReductionOperand* o : ops)
      o->strides.erase(o->strides.begin() + static_cast<ptrdiff_t>(d));
  }
  for (size_t d = s.sizes.size(); d-- > 1;) {
    if (s.reduced[d] != s.reduced[d - 1]) continue;
    bool one_run = true;
    for (const ReductionOperand* o : ops) {
      one_run &= o->strides[d - 1] == s.sizes[d] * o->strides[d];  // as expressions
    }
    if (!one_run) continue;
    s.sizes[d - 1] = s.sizes[d - 1] * s.sizes[d];
    s.sizes.erase(s.sizes.begin() + static_cast<ptrdiff_t>(d));
    s.reduced.erase(s.reduced.begin() + static_cast<ptrdiff_t>(d));
    for (ReductionOperand* o : ops) {
      o->strides[d - 1] = o->strides[d];
      o->strides.erase(o->strides.begin() + static_cast<ptrdiff_t>(d));
    }
  }
}

}  // namespace

graph::DimExpr ReductionSpec::reduced_numel() const {
  graph::DimExpr n = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (reduced[d]) n = n * sizes[d];
  }
  return n;
}

std::optional<ReductionSpec> analyze_reduction(const graph::Graph& g, const graph::Node& n,
                                               bool coalesce_space) {
  std::optional<ReductionSpec> s = Analyzer(g, n).run();
  if (s && coalesce_space) coalesce(*s);
  return s;
}

}  // namespace ember::sched
