#include "runtime/attention_fusion.h"

#include <ATen/ATen.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

#include "graph/verifier.h"
#include "sched/node_args.h"
#include "tracer/convert.h"

namespace ember::runtime {

namespace {

using graph::OpKind;
using graph::ValueId;

// ember::fused_attention: o = softmax(q @ kt * scale [+ mask]) @ v through ATen's SDPA, q, kt and
// v of [B*H, S, D] (kt: [B*H, D, S]) viewed [B, H, S, D] when `heads` is [B, H]; o contiguous,
// [B*H, Sq, Dv].
at::Tensor fused_attention_kernel(const at::Tensor& query, const at::Tensor& key_t,
                                  const at::Tensor& value, const std::optional<at::Tensor>& mask,
                                  double scale, c10::IntArrayRef heads, bool convert_mask) {
  at::Tensor q = query, k = key_t.transpose(-2, -1), v = value;
  if (!heads.empty()) {
    auto four = [&](const at::Tensor& t) {
      return t.reshape({heads[0], heads[1], t.size(1), t.size(2)});
    };
    q = four(q);
    k = four(k);
    v = four(v);
  }
  // CUDA's fused kernels need each operand's last dimension dense (and the CPU's, q's, k's and
  // v's): else ATen runs the math kernel, slower than the unfused ops. A key that matmul copied
  // transposed ([B*H, D, S] for LayoutLM's 4D product) is copied back; a mask likewise.
  auto dense_rows = [](const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); };
  q = dense_rows(q);
  k = dense_rows(k);
  v = dense_rows(v);
  // Note [Short attention on the CPU]: SDPA's CPU kernels cost more than the products and the
  // softmax they replace below about 128 keys (a BERT layer at 16 tokens: 0.70 ms fused against
  // 0.51 unfused, at 256: 6.8 against 11.0). An f32 call with fewer keys (decided per call: a
  // graph over shape symbols serves every length) runs eager's ops instead, in eager's order.
  constexpr int64_t kMinFusedKeys = 128;
  if (q.device().is_cpu() && q.scalar_type() == at::kFloat && k.size(-2) < kMinFusedKeys &&
      !(mask.has_value() && mask->scalar_type() != at::kFloat)) {
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale;
    if (mask.has_value()) scores = scores + *mask;
    at::Tensor o = at::matmul(at::_softmax(scores, -1, false), v);
    return o.reshape({query.size(0), query.size(1), value.size(2)}).contiguous();
  }
  std::optional<at::Tensor> m;
  if (mask.has_value()) m = dense_rows(*mask);
  if (m && convert_mask) {
    // An f32 mask in q's dtype, clamped to its finite range first: a "masked" -3.4e38 would
    // round to -inf, and a row masked everywhere would then be NaN where eager is uniform.
    const double lowest = q.scalar_type() == at::kHalf ? -65504.0 : -3.3895313892515355e38;
    m = m->clamp_min(lowest).to(q.scalar_type());
  }
  at::Tensor o = at::scaled_dot_product_attention(q, k, v, m, 0.0, false, scale);
  return o.reshape({query.size(0), query.size(1), value.size(2)}).contiguous();
}

TORCH_LIBRARY(ember, m) {
  m.def(
      "fused_attention(Tensor q, Tensor kt, Tensor v, Tensor? mask, float scale, int[] heads, "
      "bool convert_mask) -> Tensor");
}

TORCH_LIBRARY_IMPL(ember, CompositeExplicitAutograd, m) {
  m.impl("fused_attention", fused_attention_kernel);
}

bool node_is(const graph::Graph& g, int32_t node, OpKind k, std::string_view overload = {}) {
  return node >= 0 && g.op_of(g.nodes[node]).is(k, overload);
}

std::optional<ValueId> value_arg(const graph::Graph& g, int32_t node, std::string_view name) {
  const graph::Arg* a = sched::node_arg(g, g.nodes[node], name);
  const auto* r = a ? std::get_if<graph::ValueRef>(a) : nullptr;
  return r ? std::optional<ValueId>(r->id) : std::nullopt;
}

std::optional<double> number_arg(const graph::Graph& g, int32_t node, std::string_view name) {
  const graph::Arg* a = sched::node_arg(g, g.nodes[node], name);
  if (a == nullptr) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(a)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(a)) return *d;
  return std::nullopt;
}

bool is_view(const graph::Graph& g, int32_t node) {
  return node_is(g, node, OpKind::view) || node_is(g, node, OpKind::_unsafe_view) ||
         node_is(g, node, OpKind::alias) || node_is(g, node, OpKind::reshape);
}

// One pattern of the file comment: its operands, its arguments and the nodes it replaces.
struct Match {
  ValueId q = -1, kt = -1, v = -1, mask = -1;  // mask -1: none
  double scale = 1.0;
  graph::Dims heads;  ///< [B, H] of 4D scores (symbolic over shape symbols), or empty
  bool convert_mask = false;
  int32_t second_product = -1;
  std::vector<int32_t> nodes;  // every node of the pattern, the second product included
};

class Matcher {
 public:
  Matcher(const tracer::TracedGraph& traced) : g_(traced.graph), readers_(g_.values.size(), 0) {
    for (const graph::Node& n : g_.nodes) {
      for (ValueId v : graph::tensor_reads(n)) ++readers_[v];
    }
    for (ValueId v : g_.outputs) ++readers_[v];
    for (const graph::Mutation& m : g_.mutations) ++readers_[m.value], ++readers_[m.input];
    int ci = 0;
    for (const graph::Input& in : g_.inputs) {
      if (in.kind != graph::InputKind::Constant) continue;
      const at::Tensor& c = traced.constants.at(ci++);
      if (c.defined() && c.numel() == 1 && c.dim() == 0 && c.is_floating_point() && !c.is_meta()) {
        constants_.emplace_back(in.value, c.item<double>());
      }
    }
  }

  std::optional<Match> match(int32_t second) {
    if (!node_is(g_, second, OpKind::bmm)) return std::nullopt;
    m_ = Match{};
    m_.second_product = second;
    m_.nodes = {second};
    std::optional<ValueId> p = value_arg(g_, second, "self"), v = value_arg(g_, second, "mat2");
    if (!p || !v) return std::nullopt;
    // p = _softmax(x, -1, false), through the casts, clones, expands and views of matmul over
    // 4D operands (eager_attention_forward) and of autocast (an f32 softmax cast back).
    ValueId probs = *p;
    for (;;) {
      const int32_t n = producer(probs);
      if (n < 0 || !(node_is(g_, n, OpKind::_to_copy) || node_is(g_, n, OpKind::clone) ||
                     node_is(g_, n, OpKind::expand) || is_view(g_, n))) {
        break;
      }
      std::optional<ValueId> in = value_arg(g_, n, "self");
      if (!in) return std::nullopt;
      m_.nodes.push_back(n);
      probs = *in;
    }
    const int32_t sm = producer(probs);
    if (sm < 0 || !node_is(g_, sm, OpKind::_softmax)) return std::nullopt;
    std::optional<ValueId> x = value_arg(g_, sm, "self");
    std::optional<double> dim = number_arg(g_, sm, "dim");
    const graph::Arg* half = sched::node_arg(g_, g_.nodes[sm], "half_to_float");
    const auto* h = half ? std::get_if<bool>(half) : nullptr;
    if (!x || !dim || h == nullptr || *h) return std::nullopt;
    if (*dim != -1 && *dim != static_cast<double>(g_.type(*x).dim() - 1)) return std::nullopt;
    m_.nodes.push_back(sm);
    ValueId cur = skip_views(*x, true);
    // [+ mask]
    if (const int32_t an = producer(cur); an >= 0 && node_is(g_, an, OpKind::add, "Tensor")) {
      std::optional<ValueId> a = value_arg(g_, an, "self"), b = value_arg(g_, an, "other");
      std::optional<double> alpha = number_arg(g_, an, "alpha");
      if (!a || !b || (alpha && *alpha != 1.0)) return std::nullopt;
      const bool a_scores = leads_to_product(*a);
      if (a_scores == leads_to_product(*b)) return std::nullopt;
      m_.mask = a_scores ? *b : *a;
      const graph::Dims& shape = g_.type(cur).sizes;
      if (shape.size() != 3 && shape.size() != 4) return std::nullopt;
      if (shape.size() == 4) m_.heads = {shape[0], shape[1]};
      m_.nodes.push_back(an);
      cur = skip_views(a_scores ? *a : *b, true);
    }
    // [* c] or [/ c]
    if (const int32_t cn = producer(cur); cn >= 0 && !node_is(g_, cn, OpKind::bmm)) {
      const bool mul =
          node_is(g_, cn, OpKind::mul, "Tensor") || node_is(g_, cn, OpKind::mul, "Scalar");
      const bool div =
          node_is(g_, cn, OpKind::div, "Tensor") || node_is(g_, cn, OpKind::div, "Scalar");
      if (!mul && !div) return std::nullopt;
      std::optional<ValueId> a = value_arg(g_, cn, "self");
      std::optional<double> c = number_arg(g_, cn, "other");
      if (!c) {
        if (std::optional<ValueId> o = value_arg(g_, cn, "other")) c = constant(*o);
      }
      if (!a || !c || *c == 0.0) return std::nullopt;
      m_.scale = mul ? *c : 1.0 / *c;
      m_.nodes.push_back(cn);
      cur = skip_views(*a, true);
    }
    // cur = bmm(q, kt)
    const int32_t first = producer(cur);
    if (first < 0 || !node_is(g_, first, OpKind::bmm)) return std::nullopt;
    m_.nodes.push_back(first);
    std::optional<ValueId> q = value_arg(g_, first, "self"), kt = value_arg(g_, first, "mat2");
    if (!q || !kt) return std::nullopt;
    const graph::TensorType &qt = g_.type(*q), &vt = g_.type(*v),
                            &ot = g_.type(g_.nodes[second].outputs[0]);
    const bool floating = qt.dtype == graph::DType::Float32 || qt.dtype == graph::DType::BFloat16 ||
                          qt.dtype == graph::DType::Float16;
    if (!floating || g_.type(*kt).dtype != qt.dtype || vt.dtype != qt.dtype ||
        g_.type(*p).dtype != qt.dtype) {
      return std::nullopt;
    }
    if (!ot.is_contiguous()) return std::nullopt;
    if (m_.mask >= 0) {  // SDPA takes a mask of q's dtype: an f32 one is converted per call
      const graph::DType md = g_.type(m_.mask).dtype;
      if (md != qt.dtype && md != graph::DType::Float32) return std::nullopt;
      m_.convert_mask = md != qt.dtype;
    }
    // (Over shape symbols: equal as expressions, so at every size.)
    if (!m_.heads.empty() && !(m_.heads[0] * m_.heads[1] == qt.sizes[0])) return std::nullopt;
    m_.q = *q;
    m_.kt = *kt;
    m_.v = *v;
    return m_;
  }

 private:
  // The node producing `x` when the pattern's next node is its only reader, else -1.
  int32_t producer(ValueId x) const {
    const int32_t n = g_.values[x].node;
    if (n < 0 || readers_[x] != 1 || g_.nodes[n].outputs.size() != 1) return -1;
    return n;
  }

  // Back through views read by the pattern only; `take` adds them to the match.
  ValueId skip_views(ValueId x, bool take) {
    for (int32_t n = producer(x); n >= 0 && is_view(g_, n); n = producer(x)) {
      std::optional<ValueId> in = value_arg(g_, n, "self");
      if (!in) break;
      if (take) m_.nodes.push_back(n);
      x = *in;
    }
    return x;
  }

  // Whether the add operand `x` is the scores: the first product's result, through views and at
  // most a scale.
  bool leads_to_product(ValueId x) {
    x = skip_views(x, false);
    for (int i = 0; i < 2; ++i) {
      const int32_t n = producer(x);
      if (n < 0) return false;
      if (node_is(g_, n, OpKind::bmm)) return true;
      std::optional<ValueId> in = value_arg(g_, n, "self");
      if (!in) return false;
      x = skip_views(*in, false);
    }
    return false;
  }

  std::optional<double> constant(ValueId v) const {
    for (const auto& [value, c] : constants_) {
      if (value == v) return c;
    }
    return std::nullopt;
  }

  const graph::Graph& g_;
  std::vector<int> readers_;
  std::vector<std::pair<ValueId, double>> constants_;
  Match m_;
};

}  // namespace

int fuse_attention(tracer::TracedGraph& traced) {
  const graph::Graph& g = traced.graph;
  Matcher matcher(traced);
  std::vector<Match> found;
  std::vector<bool> taken(g.nodes.size(), false);
  for (int32_t n = 0; n < static_cast<int32_t>(g.nodes.size()); ++n) {
    std::optional<Match> m = matcher.match(n);
    if (!m.has_value()) continue;
    bool overlaps = false;
    for (int32_t p : m->nodes) overlaps = overlaps || taken[p];
    if (overlaps) continue;
    for (int32_t p : m->nodes) taken[p] = true;
    found.push_back(std::move(*m));
  }
  if (found.empty()) return 0;

  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("ember::fused_attention", "");
  graph::Graph out;
  out.ops = g.ops;
  out.symbols = g.symbols;
  const int32_t op_index = out.intern_op(tracer::op_info(op.schema()));
  std::vector<int> match_of(g.nodes.size(), -1);
  for (size_t i = 0; i < found.size(); ++i) match_of[found[i].second_product] = static_cast<int>(i);
  std::vector<ValueId> remap(g.values.size(), -1);
  for (const graph::Input& in : g.inputs) {
    remap[in.value] = out.add_input(g.type(in.value), in.kind, in.name);
  }
  for (int32_t n = 0; n < static_cast<int32_t>(g.nodes.size()); ++n) {
    if (match_of[n] < 0) {
      if (!taken[n]) graph::copy_node(g, g.nodes[n], out, remap);
      continue;
    }
    const Match& m = found[match_of[n]];
    std::vector<graph::Arg> args = {
        graph::ValueRef{remap[m.q]},
        graph::ValueRef{remap[m.kt]},
        graph::ValueRef{remap[m.v]},
        m.mask >= 0 ? graph::Arg(graph::ValueRef{remap[m.mask]}) : graph::Arg(graph::NoneArg{}),
        m.scale,
        graph::int_list_arg(m.heads),
        m.convert_mask};
    const ValueId o = g.nodes[n].outputs[0];
    const int32_t added = out.add_node(op_index, std::move(args), {g.type(o)});
    remap[o] = out.nodes[added].outputs[0];
  }
  for (ValueId v : g.outputs) out.outputs.push_back(remap[v]);
  for (const graph::Mutation& mu : g.mutations) {
    out.mutations.push_back({remap[mu.input], remap[mu.value]});
  }
  graph::check_graph(out);
  traced.graph = std::move(out);
  return static_cast<int>(found.size());
}

}  // namespace ember::runtime
