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
#include <vector>

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

// layer_norm(flip(a, [1]) + b): the prologue (a gather and an add) is computed once per element
// into the scratch row x_row and read back by the norm's two later passes (Note [A prologue kept
// in a scratch row]); with the option off, each pass computes it.
Builder norm_of_flipped_sum(int64_t rows, int64_t cols) {
  Builder b;
  ValueRef a = b.input(f32({rows, cols}));
  ValueRef c = b.input(f32({rows, cols}));
  ValueRef w = b.input(f32({cols}));
  ValueRef bias = b.input(f32({cols}));
  ValueRef fa =
      b.op("aten::flip", {"self", "dims"}, {a, std::vector<int64_t>{1}}, f32({rows, cols}));
  ValueRef x = b.add(fa, c, f32({rows, cols}));
  graph::OpInfo info{"aten::native_layer_norm",
                     "",
                     {"input", "normalized_shape", "weight", "bias", "eps"},
                     std::vector<bool>(5, false)};
  int32_t n = b.g.add_node(b.g.intern_op(info), {x, std::vector<int64_t>{cols}, w, bias, 1e-5},
                           {f32({rows, cols}), f32({rows, 1}), f32({rows, 1})});
  b.g.outputs = {b.g.nodes[n].outputs[0]};
  return b;
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(ReductionFusion, PrologueOfANormIsKeptInAScratchRow) {
  const int64_t rows = 5, cols = 24;
  Builder b = norm_of_flipped_sum(rows, cols);
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 1u);
  const loop::Kernel& k = plan.groups[0].kernel;
  ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
  test::expect_golden(k, "layer_norm_kept_prologue.loop");
  const std::string text = loop::print_kernel(k);
  // Buffers: w, bias (buf0, buf1), a, c (buf2, buf3), y (buf4).
  EXPECT_EQ(count_of(text, "buf2["), 1) << text;   // a (flipped) is read in one pass only
  EXPECT_EQ(count_of(text, "x_row["), 3) << text;  // stored once, loaded by two passes

  ScheduleOptions off;
  off.keep_prologue_rows = false;
  Plan plain = schedule_graph(b.g, off);
  ASSERT_EQ(plain.groups.size(), 1u);
  const std::string plain_text = loop::print_kernel(plain.groups[0].kernel);
  EXPECT_EQ(count_of(plain_text, "x_row"), 0) << plain_text;
  EXPECT_EQ(count_of(plain_text, "buf2["), 3) << plain_text;

  // Both kernels give the norm of the flipped sum.
  for (const loop::Kernel* kernel : std::vector<const loop::Kernel*>{&k, &plain.groups[0].kernel}) {
    loop::BufferMap bufs;
    bufs["buf0"] = random_f32(cols);
    bufs["buf1"] = random_f32(cols);
    bufs["buf2"] = random_f32(rows * cols);
    bufs["buf3"] = random_f32(rows * cols);
    bufs["buf4"].resize(rows * cols);
    loop::run_kernel(*kernel, {}, bufs);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> x(cols);
      double mean = 0, var = 0;
      for (int64_t c = 0; c < cols; ++c) {
        x[c] = bufs["buf2"][r * cols + (cols - 1 - c)].f + bufs["buf3"][r * cols + c].f;
        mean += x[c] / cols;
      }
      for (int64_t c = 0; c < cols; ++c) var += (x[c] - mean) * (x[c] - mean) / cols;
      for (int64_t c = 0; c < cols; ++c) {
        const double want =
            (x[c] - mean) / std::sqrt(var + 1e-5) * bufs["buf0"][c].f + bufs["buf1"][c].f;
        EXPECT_NEAR(bufs["buf4"][r * cols + c].f, want, 1e-4 * (1 + std::abs(want)));
      }
    }
  }
}

}  // namespace
}  // namespace ember::sched
