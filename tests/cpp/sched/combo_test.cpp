// Horizontal fusion (sched/combo.h, docs/design/scheduler.md "Combo kernels"): which kernels of a
// plan merge into combo kernels, where the merged steps run, a golden combo kernel, and the merged
// plan against the plan without combos in the loop-IR interpreter.
#include "sched/combo.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph_builder.h"
#include "loop/eval.h"
#include "loop/printer.h"
#include "loop/verifier.h"
#include "sched/fusion.h"
#include "sym/eval.h"

namespace ember::sched {
namespace {

using graph::DType;
using graph::NoneArg;
using graph::ValueRef;

using test::Builder;
using test::f32;

// Adds an optimizer-like step over parameters of `shapes` (constant or symbolic), in the order
// eager's per-parameter loop traces it: per parameter, a step count s' = s + s (0-dim, an output:
// its own kernel) and the update p' = p - g * s' (the parameter's shape, reading s' from memory).
void add_optimizer_step(Builder& b, const std::vector<graph::Dims>& shapes) {
  for (const graph::Dims& shape : shapes) {
    ValueRef p = b.input(f32(shape));
    ValueRef g = b.input(f32(shape));
    ValueRef s = b.input(f32({}));
    ValueRef s2 = b.add(s, s, f32({}));
    ValueRef p2 = b.sub(p, b.mul(g, s2, f32(shape)), f32(shape));
    b.g.outputs.push_back(s2.id);
    b.g.outputs.push_back(p2.id);
  }
}

Builder optimizer_step(const std::vector<graph::Dims>& shapes) {
  Builder b;
  add_optimizer_step(b, shapes);
  return b;
}

ScheduleOptions without_combos() {
  ScheduleOptions o;
  o.combo_kernels = false;
  return o;
}

// The elements of a value of sizes `sizes`, its symbols at `at`.
int64_t numel(const graph::Dims& sizes, const sym::Bindings& at) {
  int64_t n = 1;
  for (const graph::DimExpr& d : sizes) n *= sym::evaluate(d.expr(), at);
  return n;
}

// `at` by symbol name, as the interpreter binds size variables.
loop::Bindings by_name(const graph::Graph& g, const sym::Bindings& at) {
  loop::Bindings out;
  for (const auto& [id, v] : at) out[g.symbols.info(id).name] = v;
  return out;
}

// Runs `plan`'s kernels in the loop-IR interpreter on `inputs` (by value), the graph's symbols at
// `at`; every value written.
std::map<graph::ValueId, std::vector<loop::Scalar>> run_plan(
    const graph::Graph& g, const Plan& plan,
    const std::map<graph::ValueId, std::vector<loop::Scalar>>& inputs,
    const sym::Bindings& at = {}) {
  std::map<graph::ValueId, std::vector<loop::Scalar>> values = inputs;
  for (const PlanStep& s : plan.steps) {
    EXPECT_EQ(s.kind, PlanStep::Kind::Kernel);
    const KernelGroup& group = plan.groups[s.index];
    loop::BufferMap bufs;
    for (size_t i = 0; i < group.inputs.size(); ++i) {
      bufs[group.kernel.buffers[i].name] = values.at(group.inputs[i]);
    }
    for (size_t i = 0; i < group.outputs.size(); ++i) {
      bufs[group.kernel.buffers[group.inputs.size() + i].name].assign(
          numel(g.type(group.outputs[i]).sizes, at),
          loop::Scalar::of_float(loop::DType::Float32, -1));
    }
    loop::run_kernel(group.kernel, by_name(g, at), bufs);
    for (size_t i = 0; i < group.outputs.size(); ++i) {
      values[group.outputs[i]] = bufs[group.kernel.buffers[group.inputs.size() + i].name];
    }
  }
  return values;
}

std::map<graph::ValueId, std::vector<loop::Scalar>> random_inputs(const graph::Graph& g,
                                                                  const sym::Bindings& at = {}) {
  std::mt19937 rng(5);
  std::normal_distribution<double> d(0, 1);
  std::map<graph::ValueId, std::vector<loop::Scalar>> out;
  for (const graph::Input& in : g.inputs) {
    const int64_t n = numel(g.type(in.value).sizes, at);
    for (int64_t i = 0; i < n; ++i) {
      out[in.value].push_back(loop::Scalar::of_float(loop::DType::Float32, d(rng)));
    }
  }
  return out;
}

TEST(Combo, OptimizerStepIsTwoKernelsWhateverTheParameters) {
  const std::vector<graph::Dims> shapes = {{4, 3}, {5}, {2, 2, 2}, {7, 1}};
  Builder b = optimizer_step(shapes);
  Plan apart = schedule_graph(b.g, without_combos());
  ASSERT_EQ(apart.groups.size(), 2 * shapes.size());

  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 2u);
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.num_fused_nodes, apart.num_fused_nodes);
  // The step counts first (every update reads one), then the updates.
  for (int i = 0; i < 2; ++i) {
    const KernelGroup& group = plan.groups[plan.steps[i].index];
    EXPECT_TRUE(group.kernel.combo);
    EXPECT_EQ(group.kernel.parts().size(), shapes.size());
    EXPECT_EQ(group.outputs.size(), shapes.size());
    EXPECT_TRUE(loop::verify_kernel(group.kernel).empty()) << loop::print_kernel(group.kernel);
    // Inputs then outputs, as every kernel's buffers.
    ASSERT_EQ(group.kernel.buffers.size(), group.inputs.size() + group.outputs.size());
  }

  // The same values as the plan without combos.
  const auto inputs = random_inputs(b.g);
  const auto want = run_plan(b.g, apart, inputs);
  const auto got = run_plan(b.g, plan, inputs);
  for (graph::ValueId v : b.g.outputs) {
    ASSERT_EQ(got.at(v).size(), want.at(v).size());
    for (size_t i = 0; i < want.at(v).size(); ++i) {
      EXPECT_EQ(got.at(v)[i].f, want.at(v)[i].f) << "%" << v << "[" << i << "]";
    }
  }
}

// Over shape symbols (issue 35) the same kernels merge: a combo takes its parts' size variables,
// and at sizes far from the hints each part still covers its own extent.
TEST(Combo, KernelsOverShapeSymbolsMerge) {
  Builder b;
  const graph::DimExpr s0 = b.g.symbols.create_size(4, "L['p0'].size()[0]");
  const graph::DimExpr s1 = b.g.symbols.create_size(5, "L['p1'].size()[0]");
  add_optimizer_step(b, {{s0, 3}, {s1}, {2, 2}});
  Plan apart = schedule_graph(b.g, without_combos());
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 2u);
  const loop::Kernel& updates = plan.groups[plan.steps[1].index].kernel;
  EXPECT_TRUE(updates.combo);
  EXPECT_EQ(updates.parts().size(), 3u);
  EXPECT_EQ(updates.size_vars, (std::vector<std::string>{"s0", "s1"}));
  EXPECT_TRUE(plan.groups[plan.steps[0].index].kernel.size_vars.empty());
  EXPECT_TRUE(loop::verify_kernel(updates).empty()) << loop::print_kernel(updates);

  for (const sym::Bindings& at : {sym::Bindings{{0, 4}, {1, 5}}, sym::Bindings{{0, 9}, {1, 2}},
                                  sym::Bindings{{0, 2}, {1, 70001}}}) {
    const auto inputs = random_inputs(b.g, at);
    const auto want = run_plan(b.g, apart, inputs, at);
    const auto got = run_plan(b.g, plan, inputs, at);
    for (graph::ValueId v : b.g.outputs) {
      ASSERT_EQ(got.at(v).size(), want.at(v).size());
      for (size_t i = 0; i < want.at(v).size(); ++i) {
        ASSERT_EQ(got.at(v)[i].f, want.at(v)[i].f) << "%" << v << "[" << i << "]";
      }
    }
  }

  // A part too large at its hint keeps its own kernel, as a constant one does.
  Builder big;
  const graph::DimExpr n = big.g.symbols.create_size(kMaxComboPartElements + 1, "L['x'].size()[0]");
  ValueRef x = big.input(f32({n}));
  ValueRef y = big.input(f32({6}));
  ValueRef x2 = big.mul(x, x, f32({n}));
  ValueRef y2 = big.mul(y, y, f32({6}));
  big.g.outputs = {x2.id, y2.id};
  Plan kept = schedule_graph(big.g);
  ASSERT_EQ(kept.groups.size(), 2u);
  for (const KernelGroup& group : kept.groups) EXPECT_FALSE(group.kernel.combo);
}

TEST(Combo, GoldenKernel) {
  Builder b = optimizer_step({{4, 3}, {5}});
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 2u);
  test::expect_golden(plan.groups[plan.steps[1].index].kernel, "combo_updates.loop");
}

TEST(Combo, CombosHoldAtMostTheirCapOfParts) {
  std::vector<graph::Dims> shapes;  // of different lengths: no two updates share a kernel
  for (int i = 0; i < kMaxComboParts + 3; ++i) shapes.push_back({i + 2});
  Builder b = optimizer_step(shapes);
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 4u);
  std::vector<size_t> parts;
  for (const PlanStep& s : plan.steps) parts.push_back(plan.groups[s.index].kernel.parts().size());
  // The first 32 step counts fill a combo and their updates the next; the last 3 step counts
  // find both full and open a third, their updates a fourth.
  EXPECT_EQ(parts, (std::vector<size_t>{kMaxComboParts, kMaxComboParts, 3, 3}));
}

TEST(Combo, LargeKernelsStayOnTheirOwn) {
  // Updates of over kMaxComboPartElements elements keep their own kernels (their Triton form
  // and block size); the step counts and the small update still merge.
  Builder b = optimizer_step({{4096, 1025}, {4097, 1024}, {16}});
  Plan plan = schedule_graph(b.g);
  std::vector<size_t> parts;
  for (const PlanStep& s : plan.steps) parts.push_back(plan.groups[s.index].kernel.parts().size());
  std::sort(parts.begin(), parts.end());
  EXPECT_EQ(parts, (std::vector<size_t>{1, 1, 1, 3}));
}

TEST(Combo, NoKernelMovesAcrossAnExternStep) {
  Builder b;
  ValueRef x = b.input(f32({4, 4}));
  ValueRef y = b.input(f32({6}));
  ValueRef a = b.mul(x, x, f32({4, 4}));
  ValueRef m = b.op("aten::mm", {"self", "mat2"}, {a, x}, f32({4, 4}));
  ValueRef c = b.mul(y, y, f32({6}));  // independent of a and m, but after the ATen call
  b.g.outputs = {m.id, c.id};
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.steps.size(), 3u);
  EXPECT_EQ(plan.steps[0].kind, PlanStep::Kind::Kernel);
  EXPECT_EQ(plan.steps[1].kind, PlanStep::Kind::Extern);
  EXPECT_EQ(plan.steps[2].kind, PlanStep::Kind::Kernel);
  for (const KernelGroup& group : plan.groups) EXPECT_FALSE(group.kernel.combo);
}

TEST(Combo, ReductionsAndParameterKernelsStayApart) {
  Builder b;
  ValueRef x = b.input(f32({4, 8}));
  ValueRef w = ValueRef{b.g.add_input(f32({8}), graph::InputKind::Parameter)};
  ValueRef y = b.input(f32({5}));
  ValueRef s = b.op("aten::sum.dim_IntList", {"self", "dim", "keepdim", "dtype"},
                    {x, std::vector<int64_t>{-1}, false, NoneArg{}}, f32({4}));
  ValueRef w2 = b.mul(w, w, f32({8}));  // parameters only: its outputs are kept across calls
  ValueRef y2 = b.mul(y, y, f32({5}));
  b.g.outputs = {s.id, w2.id, y2.id};
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 3u);
  for (const KernelGroup& group : plan.groups) {
    EXPECT_FALSE(group.kernel.combo) << loop::print_kernel(group.kernel);
    EXPECT_EQ(combinable(b.g, group), group.outputs == std::vector<graph::ValueId>{y2.id});
  }
}

TEST(Combo, PlansWithNothingToMergeDoNotChange) {
  Builder b = optimizer_step({{4, 3}});  // one parameter: its update reads its step count
  Plan apart = schedule_graph(b.g, without_combos());
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), apart.groups.size());
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    EXPECT_EQ(loop::print_kernel(plan.groups[i].kernel),
              loop::print_kernel(apart.groups[i].kernel));
    EXPECT_EQ(plan.steps[i].index, apart.steps[i].index);
  }
}

}  // namespace
}  // namespace ember::sched
