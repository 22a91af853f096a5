/// \file
/// The index functions of factories (index_ops.h): a function of the index alone (full, zeros,
/// ones, scalar_tensor, arange).
#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "sched/index_ops_internal.h"
#include "sched/pointwise_internal.h"
#include "support/error.h"

namespace ember::sched::index_detail {

void add_factory_rules(RuleTable& t) {
  using K = IndexOpKind;

  auto constant_rule = [](std::string_view value_arg, std::optional<int64_t> fixed) {
    return Rule{K::Compute,
                [value_arg, fixed](const Ctx& c) {
                  const graph::TensorType& ot = c.type(c.out());
                  if (c.n.outputs.size() != 1 || !loop_dtype(ot)) return false;
                  graph::Arg v = fixed ? graph::Arg(*fixed) : graph::Arg(graph::NoneArg{});
                  const graph::Arg* a = fixed ? &v : c.arg(value_arg);
                  return scalar_constant(ldt(ot), a).has_value();
                },
                [value_arg, fixed](const Ctx& c, size_t, const Index&, ElementReader&) {
                  graph::Arg v = fixed ? graph::Arg(*fixed) : graph::Arg(graph::NoneArg{});
                  const graph::Arg* a = fixed ? &v : c.arg(value_arg);
                  return *scalar_constant(ldt(c.type(c.out())), a);
                }};
  };
  t[{OpKind::scalar_tensor, ""}] = constant_rule("s", std::nullopt);
  t[{OpKind::full, ""}] = constant_rule("fill_value", std::nullopt);
  t[{OpKind::full_like, ""}] = constant_rule("fill_value", std::nullopt);
  t[{OpKind::new_full, ""}] = constant_rule("fill_value", std::nullopt);
  for (OpKind k : {OpKind::zeros, OpKind::zeros_like, OpKind::new_zeros}) {
    t[{k, ""}] = constant_rule("", 0);
  }
  for (OpKind k : {OpKind::ones, OpKind::ones_like, OpKind::new_ones}) {
    t[{k, ""}] = constant_rule("", 1);
  }
  // A constant reads no size: the same over symbols.
  for (OpKind k :
       {OpKind::scalar_tensor, OpKind::full, OpKind::full_like, OpKind::new_full, OpKind::zeros,
        OpKind::zeros_like, OpKind::new_zeros, OpKind::ones, OpKind::ones_like, OpKind::new_ones}) {
    t[{k, ""}].symbolic = t[{k, ""}].check;
  }
  // arange of integers, into an integer dtype or a float one that holds every value exactly
  // (eager computes start + i * step in a wider type and rounds once: the same values).
  auto arange_args = [](const Ctx& c) -> std::optional<std::array<int64_t, 3>> {
    std::array<int64_t, 3> r{0, 0, 1};  // start, end, step
    std::optional<int64_t> end = c.int_arg("end");
    if (!end) return std::nullopt;
    r[1] = *end;
    if (c.arg("start")) {
      std::optional<int64_t> start = c.int_arg("start");
      if (!start) return std::nullopt;
      r[0] = *start;
    }
    if (c.arg("step")) {
      std::optional<int64_t> step = c.int_arg("step");
      if (!step || *step == 0) return std::nullopt;
      r[2] = *step;
    }
    return r;
  };
  Rule arange{
      K::Compute,
      [arange_args](const Ctx& c) {
        std::optional<std::array<int64_t, 3>> a = arange_args(c);
        const graph::TensorType& ot = c.type(c.out());
        if (!a || c.n.outputs.size() != 1 || !loop_dtype(ot) || ot.dim() != 1) return false;
        DType dt = ldt(ot);
        auto [start, end, step] = *a;
        constexpr int64_t kExact = int64_t{1} << 24;  // f32 holds every int below
        if (std::abs(start) > kExact || std::abs(end) > kExact) return false;
        int64_t len = step > 0 ? (end - start + step - 1) / step : (start - end - step - 1) / -step;
        len = std::max<int64_t>(len, 0);
        auto fits = [&](int64_t v) {
          return loop::is_float(dt) ? dt != DType::BFloat16 && dt != DType::Float16
                                    : loop::int_fits(dt, v) && dt != DType::Bool;
        };
        if (len > 0 && (!fits(start) || !fits(start + (len - 1) * step))) return false;
        return c.sizes(c.out()) == std::vector<int64_t>{len};
      },
      [](const Ctx& c, size_t, const Index& idx, ElementReader&) {
        // start + i * step: the end only sets the length (the output's size).
        const int64_t start = c.arg("start") ? *c.int_arg("start") : 0;
        const int64_t step = c.arg("step") ? *c.int_arg("step") : 1;
        return detail::cast(ldt(c.type(c.out())), loop::idx(start) + idx[0] * loop::idx(step));
      }};
  // Over symbols: a symbolic end (the length is the output's size), a constant start and step,
  // into int64 (which holds every value the symbols' ranges allow).
  arange.symbolic = [](const Ctx& c) {
    const graph::TensorType& ot = c.type(c.out());
    if (c.n.outputs.size() != 1 || ot.dim() != 1 || ot.dtype != graph::DType::Int64) return false;
    for (std::string_view name : {"start", "step"}) {
      if (c.arg(name) && !c.int_arg(name)) return false;
    }
    return !c.arg("step") || *c.int_arg("step") != 0;
  };
  t[{OpKind::arange, ""}] = arange;
  t[{OpKind::arange, "start"}] = arange;
  t[{OpKind::arange, "start_step"}] = arange;
}

}  // namespace ember::sched::index_detail
