// A Plan as text and back (sched/plan_text.h), what the on-disk plan cache stores: a plan with
// combo, pointwise and extern steps round-trips to the same plan, and malformed text is refused
// with a UserError naming where.
#include "sched/plan_text.h"

#include <gtest/gtest.h>

#include <string>

#include "graph_builder.h"
#include "support/error.h"

namespace ember::sched {
namespace {

using graph::ValueRef;
using test::Builder;
using test::f32;

// Two parameters' optimizer-like updates (a combo kernel), a pointwise chain and a matmul (an
// extern step) between them.
Plan sample_plan() {
  Builder b;
  for (const graph::Dims& shape : {graph::Dims{4, 3}, graph::Dims{5}}) {
    ValueRef p = b.input(f32(shape));
    ValueRef g = b.input(f32(shape));
    ValueRef s = b.input(f32({}));
    ValueRef s2 = b.add(s, s, f32({}));
    b.g.outputs.push_back(s2.id);
    b.g.outputs.push_back(b.sub(p, b.mul(g, s2, f32(shape)), f32(shape)).id);
  }
  ValueRef x = b.input(f32({8, 8}));
  ValueRef y = b.mul(b.add(x, x, f32({8, 8})), x, f32({8, 8}));
  ValueRef m = b.op("aten::mm", {"self", "mat2"}, {y, x}, f32({8, 8}));
  b.g.outputs.push_back(b.add(m, y, f32({8, 8})).id);
  return schedule_graph(b.g);
}

TEST(PlanText, RoundTrips) {
  const Plan plan = sample_plan();
  ASSERT_GE(plan.groups.size(), 3u);
  bool extern_step = false, combo = false;
  for (const PlanStep& s : plan.steps) extern_step |= s.kind == PlanStep::Kind::Extern;
  for (const KernelGroup& g : plan.groups) combo |= g.kernel.combo;
  EXPECT_TRUE(extern_step && combo);
  const std::string text = print_plan(plan);
  const Plan back = parse_plan(text);
  EXPECT_TRUE(same_plan(plan, back));
  EXPECT_EQ(print_plan(back), text);  // byte-identical: what the cache's hash sees
}

TEST(PlanText, SamePlanSeesADifferentKernel) {
  const Plan plan = sample_plan();
  Plan other = parse_plan(print_plan(plan));
  other.groups[0].kernel.buffers[0].name += "_x";
  EXPECT_FALSE(same_plan(plan, other));
  other = plan;
  other.steps.pop_back();
  EXPECT_FALSE(same_plan(plan, other));
}

TEST(PlanText, MalformedTextIsAUserError) {
  const std::string text = print_plan(sample_plan());
  for (const std::string& bad :
       {std::string("ember-plan v2\n"), text.substr(0, text.size() / 2), text + "x\n",
        std::string("ember-plan v1\nfused 0\nsteps 1\nK 3 -1\ngroups 0\n"),
        std::string("ember-plan v1\nfused 0\nsteps 1\nQ 0 -1\ngroups 0\n")}) {
    EXPECT_THROW(parse_plan(bad), UserError) << bad;
  }
}

}  // namespace
}  // namespace ember::sched
