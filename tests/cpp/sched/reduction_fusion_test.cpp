// Reductions fused with their pointwise prologues and epilogues (sched/fusion.h,
// docs/design/scheduler.md "Reduction prologues and epilogues"): plan structure, a golden kernel
// and the interpreter against a double reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "graph_builder.h"
#include "loop/eval.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "loop/verifier.h"
#include "sched/fusion.h"

namespace ember::sched {
namespace {

using graph::Arg;
using graph::DType;
using graph::NoneArg;
using graph::ValueRef;

using test::Builder;
using test::f32;

// RMSNorm without eps: w * (x * rsqrt(mean(x^2, -1, keepdim))), x [rows, cols].
Builder rms_norm(int64_t rows, int64_t cols, bool flip_rows = false) {
  Builder b;
  ValueRef x = b.input(f32({rows, cols}));
  ValueRef w = b.input(f32({cols}));
  ValueRef sq = b.op("aten::pow.Tensor_Scalar", {"self", "exponent"}, {x, 2.0}, f32({rows, cols}));
  ValueRef ms = b.op("aten::mean.dim", {"self", "dim", "keepdim", "dtype"},
                     {sq, std::vector<int64_t>{-1}, true, NoneArg{}}, f32({rows, 1}));
  ValueRef r = b.op("aten::rsqrt", {"self"}, {ms}, f32({rows, 1}));
  if (flip_rows)
    r = b.op("aten::flip", {"self", "dims"}, {r, std::vector<int64_t>{0}}, f32({rows, 1}));
  ValueRef h = b.mul(x, r, f32({rows, cols}));
  ValueRef y = b.mul(w, h, f32({rows, cols}));
  b.g.outputs = {y.id};
  return b;
}

std::vector<loop::Scalar> random_f32(size_t n) {
  std::mt19937 rng(3);
  std::normal_distribution<double> d(0, 1);
  std::vector<loop::Scalar> v;
  for (size_t i = 0; i < n; ++i) v.push_back(loop::Scalar::of_float(loop::DType::Float32, d(rng)));
  return v;
}

TEST(ReductionFusion, RmsNormIsOneKernel) {
  Builder b = rms_norm(6, 40);
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 1u);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.num_fused_nodes, 5);
  const KernelGroup& group = plan.groups[0];
  // x and w in; the mean (read by the epilogue) and y out.
  EXPECT_EQ(group.inputs.size(), 2u);
  EXPECT_EQ(group.outputs.size(), 2u);
  const loop::Kernel& k = group.kernel;
  ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
  test::expect_golden(k, "rms_norm.loop");

  loop::BufferMap bufs;
  bufs["buf0"] = random_f32(240);
  bufs["buf1"] = random_f32(40);
  bufs["buf2"].resize(6);
  bufs["buf3"].resize(240);
  loop::run_kernel(k, {}, bufs);
  for (int r = 0; r < 6; ++r) {
    double ss = 0;
    for (int c = 0; c < 40; ++c) ss += bufs["buf0"][r * 40 + c].f * bufs["buf0"][r * 40 + c].f;
    const double inv = 1 / std::sqrt(ss / 40);
    EXPECT_NEAR(bufs["buf2"][r].f, ss / 40, 1e-5);
    for (int c = 0; c < 40; ++c) {
      double want = bufs["buf1"][c].f * (bufs["buf0"][r * 40 + c].f * inv);
      EXPECT_NEAR(bufs["buf3"][r * 40 + c].f, want, 1e-5 * (1 + std::abs(want)));
    }
  }
}

TEST(ReductionFusion, EpilogueReadingAnotherRowGetsItsOwnKernel) {
  Builder b = rms_norm(6, 40, /*flip_rows=*/true);
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.groups[0].nodes.size(), 2u);  // pow (prologue) and mean
}

// Autocast's order before a linear (Note [Casts of inputs move to their reader]): the norm, the
// cast of the weight (another shape), then the cast of the activation. The weight's cast waits
// for the matmul that reads it, so the activation's cast is the norm's epilogue.
TEST(ReductionFusion, CastOfAnInputDoesNotCloseTheNorm) {
  Builder b = rms_norm(6, 40);
  ValueRef y{b.g.outputs[0]};
  ValueRef w2 = b.input(f32({40, 8}));
  const std::vector<std::string> names = {"self",       "dtype",        "layout",       "device",
                                          "pin_memory", "non_blocking", "memory_format"};
  auto cast = [&](ValueRef x, graph::Dims sizes) {
    return b.op("aten::_to_copy", names,
                {x, DType::BFloat16, NoneArg{}, NoneArg{}, NoneArg{}, false, NoneArg{}},
                test::type(DType::BFloat16, std::move(sizes)));
  };
  ValueRef w2h = cast(w2, {40, 8});
  ValueRef yh = cast(y, {6, 40});
  ValueRef out = b.op("aten::mm", {"self", "mat2"}, {yh, w2h}, test::type(DType::BFloat16, {6, 8}));
  b.g.outputs = {out.id};
  Plan plan = schedule_graph(b.g);
  // The norm with both casts of y in one kernel, the weight's cast, the matmul.
  ASSERT_EQ(plan.groups.size(), 2u);
  ASSERT_EQ(plan.steps.size(), 3u);
  EXPECT_EQ(plan.groups[0].nodes.size(), 6u);  // pow, mean, rsqrt, mul, mul, cast
  EXPECT_EQ(plan.groups[0].outputs.back(), yh.id);
  EXPECT_EQ(plan.groups[1].outputs, std::vector<graph::ValueId>{w2h.id});
  EXPECT_EQ(plan.steps[2].kind, PlanStep::Kind::Extern);
}

TEST(ReductionFusion, OptionTurnsItOff) {
  Builder b = rms_norm(6, 40);
  ScheduleOptions options;
  options.reduction_fusion = false;
  Plan plan = schedule_graph(b.g, options);
  ASSERT_EQ(plan.groups.size(), 3u);  // pow | mean | rsqrt, mul, mul
}

}  // namespace
}  // namespace ember::sched
