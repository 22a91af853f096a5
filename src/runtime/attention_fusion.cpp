#include "runtime/attention_fusion.h"

#include <ATen/ATen.h>
#include <ATen/ops/scaled_dot_product_attention.h>

#include <algorithm>
#include <set>
#include <string>

#include "sched/fusion.h"
#include "sched/node_args.h"

namespace ember::runtime {

namespace {

using graph::ValueId;

using graph::OpKind;

// Whether `node` (-1: none) is overload `overload` of op `k` (graph::OpInfo::is).
bool node_is(const graph::Graph& g, int32_t node, OpKind k, std::string_view overload = {}) {
  return node >= 0 && g.op_of(g.nodes[node]).is(k, overload);
}

std::optional<ValueId> value_arg(const graph::Graph& g, const graph::Node& n,
                                 std::string_view name) {
  const graph::Arg* a = sched::node_arg(g, n, name);
  const auto* r = a ? std::get_if<graph::ValueRef>(a) : nullptr;
  return r ? std::optional<ValueId>(r->id) : std::nullopt;
}

std::optional<double> number_arg(const graph::Graph& g, const graph::Node& n,
                                 std::string_view name) {
  const graph::Arg* a = sched::node_arg(g, n, name);
  if (a == nullptr) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(a)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(a)) return *d;
  return std::nullopt;
}

bool is_view(const graph::Graph& g, int32_t node) {
  return node_is(g, node, OpKind::view) || node_is(g, node, OpKind::_unsafe_view) ||
         node_is(g, node, OpKind::alias) || node_is(g, node, OpKind::reshape);
}
// (The probabilities' side also passes expand, clone and _to_copy: each keeps every element's
// value, or casts it to the product's dtype, which the fused call computes in.)

}  // namespace

at::Tensor FusedAttention::run(const std::vector<at::Tensor>& env) const {
  at::Tensor q = env[this->q], k = env[kt].transpose(-2, -1), v = env[this->v];
  if (!heads.empty()) {
    auto four = [&](const at::Tensor& t) {
      return t.reshape({heads[0], heads[1], t.size(1), t.size(2)});
    };
    q = four(q);
    k = four(k);
    v = four(v);
  }
  // CUDA's fused kernels need each operand's last dimension dense (and the CPU's, q's, k's and
  // v's): else ATen runs the math kernel, slower than the unfused steps. A key that matmul copied
  // transposed ([B*H, D, S] for LayoutLM's 4D product) is copied back; a mask likewise.
  auto dense_rows = [](const at::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); };
  q = dense_rows(q);
  k = dense_rows(k);
  v = dense_rows(v);
  std::optional<at::Tensor> m;
  if (mask >= 0) m = dense_rows(env[mask]);
  if (m && convert_mask) {
    // An f32 mask in q's dtype, clamped to its finite range first: a "masked" -3.4e38 would
    // round to -inf, and a row masked everywhere would then be NaN where eager is uniform.
    const double lowest = q.scalar_type() == at::kHalf ? -65504.0 : -3.3895313892515355e38;
    m = m->clamp_min(lowest).to(q.scalar_type());
  }
  at::Tensor o = at::scaled_dot_product_attention(q, k, v, m, 0.0, false, scale).reshape(out_sizes);
  if (o.strides().vec() != out_strides) {
    at::Tensor t = at::empty_strided(out_sizes, out_strides, o.options());
    t.copy_(o);
    o = t;
  }
  return o;
}

std::vector<FusedAttention> find_fused_attention(
    const graph::Graph& g, const sched::Plan& plan,
    const std::function<std::optional<double>(ValueId)>& constant_value,
    std::vector<ValueId>* realize, std::vector<ValueId>* separate) {
  const sched::PlanUses uses = sched::plan_uses(g, plan);
  const std::vector<std::vector<int>>& readers = uses.readers;
  const std::vector<int>& producer_step = uses.producer;

  std::vector<FusedAttention> out;
  for (size_t s2 = 0; s2 < plan.steps.size(); ++s2) {
    const sched::PlanStep& second = plan.steps[s2];
    if (second.kind != sched::PlanStep::Kind::Extern || !node_is(g, second.index, OpKind::bmm)) {
      continue;
    }
    const graph::Node& bmm2 = g.nodes[second.index];
    std::optional<ValueId> p = value_arg(g, bmm2, "self"), v = value_arg(g, bmm2, "mat2");
    if (!p || !v || readers[*p].size() != 1) continue;
    // The probabilities may reach the product through a view step (matmul's expand and reshape
    // of a 4D softmax: eager_attention_forward), read by nothing else.
    int view_step = producer_step[*p];
    if (view_step >= 0 && plan.steps[view_step].kind == sched::PlanStep::Kind::View) {
      bool alone = true;
      for (ValueId o : g.nodes[plan.steps[view_step].index].outputs) {
        alone = alone && (o == *p || readers[o].empty());
      }
      p = plan.steps[view_step].root;
      if (!alone || readers[*p].size() != 1) continue;
    } else {
      view_step = -1;
    }
    const int ks = producer_step[*p];
    if (ks < 0 || plan.steps[ks].kind != sched::PlanStep::Kind::Kernel) continue;
    const sched::KernelGroup& group = plan.groups[plan.steps[ks].index];
    // Its other outputs are read by nothing else (the f32 softmax its cast reads).
    if (std::find(group.outputs.begin(), group.outputs.end(), *p) == group.outputs.end()) continue;
    bool others_read = false;
    std::vector<ValueId> siblings;
    for (ValueId o : group.outputs) {
      if (o != *p && !readers[o].empty()) {
        others_read = true;
        siblings.push_back(o);
      }
    }
    const std::set<int32_t> in_group(group.nodes.begin(), group.nodes.end());
    std::set<int32_t> seen;
    auto node_of = [&](ValueId x) { return g.values[x].node; };
    // Computed in the kernel only (not realized by another step: a view step of a mask is not).
    auto inside = [&](ValueId x) {
      return node_of(x) >= 0 && in_group.count(node_of(x)) > 0 &&
             (producer_step[x] < 0 || producer_step[x] == ks);
    };
    // Marks the kernel's nodes that `x` is made of (through any of their arguments) as seen: a
    // mask's views the kernel reads through, a sibling's copy.
    auto absorb = [&](ValueId x) {
      std::vector<ValueId> todo = {x};
      while (!todo.empty()) {
        const int32_t n = node_of(todo.back());
        todo.pop_back();
        if (n < 0 || in_group.count(n) == 0 || !seen.insert(n).second) continue;
        for (const graph::Arg& arg : g.nodes[n].args) {
          if (const auto* r = std::get_if<graph::ValueRef>(&arg)) todo.push_back(r->id);
        }
      }
    };
    auto skip_views = [&](ValueId x) {
      while (inside(x) && is_view(g, node_of(x))) {
        seen.insert(node_of(x));
        std::optional<ValueId> in = value_arg(g, g.nodes[node_of(x)], "self");
        if (!in) return x;
        x = *in;
      }
      return x;
    };
    // p = _softmax(x, -1, false), or its cast to q's dtype (autocast: an f32 softmax of bf16
    // scores plus an f32 mask, cast back for the product)
    // scores, or matmul's copy of its expand (eager_attention_forward's 4D matmul).
    ValueId probs = *p;
    for (;;) {
      const int32_t pn = node_of(probs);
      if (!inside(probs) || !(node_is(g, pn, OpKind::_to_copy) || node_is(g, pn, OpKind::clone) ||
                              node_is(g, pn, OpKind::expand) || is_view(g, pn))) {
        break;
      }
      std::optional<ValueId> in = value_arg(g, g.nodes[node_of(probs)], "self");
      if (!in) break;
      seen.insert(node_of(probs));
      probs = *in;
    }
    const int32_t sm = node_of(probs);
    if (!inside(probs) || !node_is(g, sm, OpKind::_softmax)) continue;
    const graph::Node& softmax = g.nodes[sm];
    std::optional<ValueId> x = value_arg(g, softmax, "self");
    std::optional<double> dim = number_arg(g, softmax, "dim");
    const graph::Arg* half = sched::node_arg(g, softmax, "half_to_float");
    const auto* h = half ? std::get_if<bool>(half) : nullptr;
    if (!x || !dim || h == nullptr || *h) continue;
    if (*dim != -1 && *dim != static_cast<double>(g.type(*x).dim() - 1)) continue;
    seen.insert(sm);
    FusedAttention f;
    ValueId cur = skip_views(*x);
    bool ok = true;
    // [+ mask]
    if (inside(cur) && node_is(g, node_of(cur), OpKind::add, "Tensor")) {
      const graph::Node& add = g.nodes[node_of(cur)];
      std::optional<ValueId> a = value_arg(g, add, "self"), b = value_arg(g, add, "other");
      std::optional<double> alpha = number_arg(g, add, "alpha");
      if (!a || !b || (alpha && *alpha != 1.0)) continue;
      // The scores are the operand that leads back to the first product.
      auto leads_to_product = [&](ValueId x) {
        x = skip_views(x);
        for (int i = 0; i < 2 && inside(x); ++i) {  // through a scale
          std::optional<ValueId> in = value_arg(g, g.nodes[node_of(x)], "self");
          if (!in) break;
          x = skip_views(*in);
        }
        return !inside(x) && producer_step[x] >= 0 &&
               plan.steps[producer_step[x]].kind == sched::PlanStep::Kind::Extern &&
               node_is(g, plan.steps[producer_step[x]].index, OpKind::bmm);
      };
      const bool a_chain = leads_to_product(*a);
      if (a_chain == leads_to_product(*b)) continue;
      f.mask = a_chain ? *b : *a;
      if (inside(f.mask)) {
        // Computed in the softmax's kernel: SDPA needs it in memory. Realized, the graph is
        // scheduled again and matches.
        if (realize != nullptr) realize->push_back(f.mask);
        continue;
      }
      absorb(f.mask);  // the mask's views that the kernel reads through
      const std::vector<int64_t> shape = graph::constant_values(g.type(cur).sizes);
      if (shape.size() == 4) f.heads = {shape[0], shape[1]};
      if (shape.size() != 3 && shape.size() != 4) continue;
      seen.insert(node_of(cur));
      cur = skip_views(a_chain ? *a : *b);
    }
    // [* c] or [/ c]
    if (inside(cur)) {
      const int32_t cn = node_of(cur);
      const graph::Node& n = g.nodes[cn];
      const bool mul =
          node_is(g, cn, OpKind::mul, "Tensor") || node_is(g, cn, OpKind::mul, "Scalar");
      const bool div =
          node_is(g, cn, OpKind::div, "Tensor") || node_is(g, cn, OpKind::div, "Scalar");
      if (!mul && !div) continue;
      std::optional<ValueId> a = value_arg(g, n, "self");
      std::optional<double> c = number_arg(g, n, "other");
      if (!c) {
        std::optional<ValueId> o = value_arg(g, n, "other");
        if (o) c = constant_value(*o);
      }
      if (!a || !c || *c == 0.0) continue;
      f.scale = mul ? *c : 1.0 / *c;
      seen.insert(node_of(cur));
      cur = skip_views(*a);
    }
    for (ValueId sib : siblings) absorb(sib);  // the copy of v
    ok = ok && !inside(cur) && seen == in_group;
    // cur = bmm(q, kt), read by the softmax kernel only.
    const int s1 = producer_step[cur];
    if (!ok || s1 < 0 || readers[cur].size() != 1 ||
        plan.steps[s1].kind != sched::PlanStep::Kind::Extern ||
        !node_is(g, plan.steps[s1].index, OpKind::bmm)) {
      continue;
    }
    const graph::Node& bmm1 = g.nodes[plan.steps[s1].index];
    std::optional<ValueId> q = value_arg(g, bmm1, "self"), kt = value_arg(g, bmm1, "mat2");
    if (!q || !kt) continue;
    const graph::TensorType &qt = g.type(*q), &vt = g.type(*v), &ot = g.type(bmm2.outputs[0]);
    const bool floating = qt.dtype == graph::DType::Float32 || qt.dtype == graph::DType::BFloat16 ||
                          qt.dtype == graph::DType::Float16;
    if (!floating || g.type(*kt).dtype != qt.dtype || vt.dtype != qt.dtype || !ot.is_static()) {
      continue;
    }
    if (g.type(*p).dtype != qt.dtype) continue;
    if (f.mask >= 0) {  // SDPA takes a mask of q's dtype: an f32 one is converted at run time
      const graph::DType md = g.type(f.mask).dtype;
      if (md != qt.dtype && md != graph::DType::Float32) continue;
      f.convert_mask = md != qt.dtype;
    }
    if (!f.heads.empty() && f.heads[0] * f.heads[1] != graph::constant_values(qt.sizes)[0]) {
      continue;
    }
    if (others_read) {
      // A sibling (matmul's contiguous copy of v, of the softmax's shape) is an epilogue of
      // the softmax's kernel: scheduled apart, the kernel goes with the fusion.
      if (separate != nullptr) separate->insert(separate->end(), siblings.begin(), siblings.end());
      continue;
    }
    f.q = *q;
    f.kt = *kt;
    f.v = *v;
    f.out = bmm2.outputs[0];
    f.out_sizes = graph::constant_values(ot.sizes);
    f.out_strides = graph::constant_values(ot.strides);
    f.first_product_step = s1;
    f.softmax_step = ks;
    f.view_step = view_step;
    f.second_product_step = static_cast<int>(s2);
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace ember::runtime
