// Batch norm in inference mode as an index function (sched/batch_norm.h): which nodes qualify,
// the golden kernel of batch norm -> relu, and the interpreter against eager's formula. Training
// mode as a reduction kernel (sched/reduction.h): which forms qualify, and the interpreter
// against eager's formulas for the outputs and the new running statistics.
#include "sched/batch_norm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "loop/eval.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "loop/verifier.h"
#include "sched/fusion.h"
#include "sched/reduction.h"
#include "sched/reduction_spec.h"

namespace ember::sched {
namespace {

using graph::Arg;
using graph::DType;
using graph::NoneArg;
using graph::ValueId;
using graph::ValueRef;

graph::TensorType type(DType t, graph::Dims sizes, graph::Dims strides = {}) {
  graph::TensorType tt;
  tt.dtype = t;
  tt.strides = strides.empty() ? graph::contiguous_strides(sizes) : std::move(strides);
  tt.sizes = std::move(sizes);
  return tt;
}

const std::vector<std::string> kNames = {"input",       "weight",   "bias",     "running_mean",
                                         "running_var", "training", "momentum", "eps"};

// x [2, 3, 2, 2] -> native_batch_norm -> relu, with the given input strides, training flag and
// whether the graph also returns save_mean.
struct BatchNormGraph {
  graph::Graph g;
  int32_t bn = -1;
  ValueId y = -1, mean = -1;

  explicit BatchNormGraph(graph::Dims x_strides = {}, bool training = false, bool affine = true,
                          DType params = DType::Float32) {
    graph::Dims sizes{2, 3, 2, 2};
    ValueId x = g.add_input(type(DType::Float32, sizes, x_strides), graph::InputKind::User);
    Arg w = NoneArg{}, b = NoneArg{};
    if (affine) {
      w = ValueRef{g.add_input(type(params, {3}), graph::InputKind::User)};
      b = ValueRef{g.add_input(type(params, {3}), graph::InputKind::User)};
    }
    ValueId rm = g.add_input(type(params, {3}), graph::InputKind::User);
    ValueId rv = g.add_input(type(params, {3}), graph::InputKind::User);
    graph::OpInfo info{"aten::native_batch_norm", "", kNames,
                       std::vector<bool>(kNames.size(), false)};
    graph::TensorType out = type(DType::Float32, sizes, x_strides);
    bn = g.add_node(g.intern_op(info),
                    {ValueRef{x}, w, b, ValueRef{rm}, ValueRef{rv}, training, 0.1, 1e-5},
                    {out, type(DType::Float32, {3}), type(DType::Float32, {3})});
    y = g.nodes[bn].outputs[0];
    mean = g.nodes[bn].outputs[1];
    graph::OpInfo relu{"aten::relu", "", {"self"}, {false}};
    int32_t r = g.add_node(g.intern_op(relu), {ValueRef{y}}, {out});
    g.outputs = {g.nodes[r].outputs[0]};
  }
  bool qualifies() const { return is_batch_norm_inference(g, g.nodes[bn]); }
};

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<loop::Scalar> f32s(const std::vector<double>& v) {
  std::vector<loop::Scalar> r;
  for (double x : v) r.push_back(loop::Scalar::of_float(loop::DType::Float32, x));
  return r;
}

TEST(BatchNorm, InferenceQualifiesConservatively) {
  EXPECT_TRUE(BatchNormGraph().qualifies());
  EXPECT_TRUE(BatchNormGraph({}, false, /*affine=*/false).qualifies());
  EXPECT_TRUE(BatchNormGraph({12, 1, 6, 3}).qualifies());  // channels-last
  // Training updates the running statistics in place: an ATen call.
  EXPECT_FALSE(BatchNormGraph({}, /*training=*/true).qualifies());
  // Neither contiguous nor channels-last: eager's TensorIterator path (another layout).
  EXPECT_FALSE(BatchNormGraph({12, 1, 3, 6}).qualifies());
  // f64 parameters for an f32 input: not a mixed type eager accepts.
  EXPECT_FALSE(BatchNormGraph({}, false, true, DType::Float64).qualifies());
  // save_mean read: eager returns an empty tensor in eval mode, the meta function [C].
  BatchNormGraph read_mean;
  read_mean.g.outputs.push_back(read_mean.mean);
  EXPECT_FALSE(read_mean.qualifies());
}

// batch norm -> relu is one kernel: y = max(x * alpha[c] + beta[c], 0) with eager's terms.
TEST(BatchNorm, InferenceFusesWithReluAndMatchesEagerFormula) {
  BatchNormGraph bg;
  Plan plan = schedule_graph(bg.g);
  ASSERT_EQ(plan.groups.size(), 1u);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.num_fused_nodes, 2);
  const loop::Kernel& k = plan.groups[0].kernel;
  ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
  const std::string text = loop::print_kernel(k);
  const std::string path = std::string(EMBER_SCHED_GOLDEN_DIR) + "/batch_norm_relu.loop";
  if (std::getenv("EMBER_ACCEPT_GOLDEN") != nullptr) std::ofstream(path) << text;
  EXPECT_EQ(text, read(path)) << "regenerate with EMBER_ACCEPT_GOLDEN=1 and review the diff";
  EXPECT_EQ(loop::print_kernel(loop::parse_kernel(text)), text);

  // Inputs in the order the kernel reads them: see group.inputs.
  std::vector<double> x(24), w{1.5, -2.0, 0.5}, b{0.25, 1.0, -3.0}, rm{0.5, -1.0, 2.0},
      rv{1.0, 0.25, 4.0};
  for (int i = 0; i < 24; ++i) x[i] = i * 0.5 - 5.0;
  std::map<ValueId, std::vector<double>> data;
  const graph::Node& n = bg.g.nodes[bg.bn];
  for (int a = 0; a < 5; ++a) {
    data[std::get<ValueRef>(n.args[a]).id] = std::vector<std::vector<double>>{x, w, b, rm, rv}[a];
  }
  loop::BufferMap bufs;
  const KernelGroup& group = plan.groups[0];
  for (size_t i = 0; i < group.inputs.size(); ++i) {
    bufs["buf" + std::to_string(i)] = f32s(data[group.inputs[i]]);
  }
  loop::run_kernel(k, {}, bufs);
  const std::string out = "buf" + std::to_string(group.inputs.size());
  for (int i = 0; i < 24; ++i) {
    const int c = (i / 4) % 3;
    const float invstd = 1.0f / std::sqrt(static_cast<float>(rv[c]) + 1e-5f);
    const float alpha = invstd * static_cast<float>(w[c]);
    const float beta = static_cast<float>(b[c]) - static_cast<float>(rm[c]) * alpha;
    const float want = std::max(static_cast<float>(x[i]) * alpha + beta, 0.0f);
    EXPECT_FLOAT_EQ(bufs[out][i].f, want) << i;
  }
}

// x [2, 3, 4] (or `x_strides`) -> _native_batch_norm_legit_functional, the traced form of a
// training-mode batch norm whose running statistics are graph inputs: outputs y, save_mean,
// save_invstd, and the new running statistics, which the graph copies into its inputs.
struct TrainingGraph {
  graph::Graph g;
  int32_t bn = -1;
  ValueId x = -1, w = -1, b = -1, rm = -1, rv = -1;

  explicit TrainingGraph(graph::Dims x_strides = {}) {
    graph::Dims sizes{2, 3, 4};
    x = g.add_input(type(DType::Float32, sizes, x_strides), graph::InputKind::User);
    w = g.add_input(type(DType::Float32, {3}), graph::InputKind::Parameter);
    b = g.add_input(type(DType::Float32, {3}), graph::InputKind::Parameter);
    rm = g.add_input(type(DType::Float32, {3}), graph::InputKind::Buffer);
    rv = g.add_input(type(DType::Float32, {3}), graph::InputKind::Buffer);
    graph::OpInfo info{"aten::_native_batch_norm_legit_functional", "", kNames,
                       std::vector<bool>(kNames.size(), false)};
    graph::TensorType c = type(DType::Float32, {3});
    bn = g.add_node(
        g.intern_op(info),
        {ValueRef{x}, ValueRef{w}, ValueRef{b}, ValueRef{rm}, ValueRef{rv}, true, 0.25, 1e-5},
        {type(DType::Float32, sizes, x_strides), c, c, c, c});
    const std::vector<ValueId>& outs = g.nodes[bn].outputs;
    g.outputs = {outs[0]};
    g.mutations = {graph::Mutation{rm, outs[3]}, graph::Mutation{rv, outs[4]}};
  }
  bool qualifies() const { return is_reduction_kernel_node(g, g.nodes[bn]); }
};

TEST(BatchNorm, TrainingIsAReductionInFunctionalFormOnly) {
  EXPECT_TRUE(TrainingGraph().qualifies());
  // Channels innermost in 3-d is not a memory format eager knows: its TensorIterator path.
  EXPECT_FALSE(TrainingGraph({12, 1, 3}).qualifies());
  // native_batch_norm(training=True) updates the running statistics in place: an ATen call.
  BatchNormGraph in_place({}, /*training=*/true);
  EXPECT_FALSE(is_reduction_kernel_node(in_place.g, in_place.g.nodes[in_place.bn]));
  EXPECT_FALSE(in_place.qualifies());

  TrainingGraph tg;
  std::optional<ReductionSpec> spec = analyze_reduction(tg.g, tg.g.nodes[tg.bn]);
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->kind, ReductionKind::BatchNorm);
  EXPECT_EQ(spec->sizes, (graph::Dims{2, 3, 4}));
  EXPECT_EQ(spec->reduced, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(spec->outputs.size(), 5u);
  EXPECT_EQ(spec->momentum, 0.25);
}

// The kernel's outputs against eager's formulas for f32 (batch_norm.cpp's
// batch_norm_cpu_update_stats_template): sums in double, statistics rounded to float.
TEST(BatchNorm, TrainingKernelMatchesEagerFormulas) {
  TrainingGraph tg;
  Plan plan = schedule_graph(tg.g, ScheduleOptions{});
  ASSERT_EQ(plan.groups.size(), 1u);
  ASSERT_EQ(plan.steps.size(), 1u);
  const KernelGroup& group = plan.groups[0];
  const loop::Kernel& k = group.kernel;
  ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
  std::vector<double> x(24), w{1.5, -2.0, 0.5}, b{0.25, 1.0, -3.0}, rm{0.5, -1.0, 2.0},
      rv{1.0, 0.25, 4.0};
  for (int i = 0; i < 24; ++i) x[i] = std::sin(i * 1.7) * 3.0 + i * 0.1;
  const std::map<ValueId, std::vector<double>> data = {
      {tg.x, x}, {tg.w, w}, {tg.b, b}, {tg.rm, rm}, {tg.rv, rv}};
  loop::BufferMap bufs;
  for (size_t i = 0; i < group.inputs.size(); ++i) {
    bufs["buf" + std::to_string(i)] = f32s(data.at(group.inputs[i]));
  }
  loop::run_kernel(k, {}, bufs);
  auto out = [&](ValueId v) -> const std::vector<loop::Scalar>& {
    size_t i = std::find(group.outputs.begin(), group.outputs.end(), v) - group.outputs.begin();
    return bufs["buf" + std::to_string(group.inputs.size() + i)];
  };
  const std::vector<ValueId>& outs = tg.g.nodes[tg.bn].outputs;
  const float m = 0.25f;
  for (int c = 0; c < 3; ++c) {
    double sum = 0;
    for (int n = 0; n < 2; ++n) {
      for (int i = 0; i < 4; ++i) sum += static_cast<float>(x[n * 12 + c * 4 + i]);
    }
    const float mean = static_cast<float>(sum / 8);
    double var_sum_d = 0;
    for (int n = 0; n < 2; ++n) {
      for (int i = 0; i < 4; ++i) {
        const float d = static_cast<float>(x[n * 12 + c * 4 + i]) - mean;
        var_sum_d += d * d;
      }
    }
    const float var_sum = static_cast<float>(var_sum_d);
    const float invstd = static_cast<float>(1.0 / std::sqrt(double{var_sum / 8} + 1e-5));
    EXPECT_EQ(out(outs[3])[c].f, m * mean + (1 - m) * static_cast<float>(rm[c])) << c;
    const double unbiased = var_sum / 7;
    EXPECT_EQ(out(outs[4])[c].f,
              static_cast<float>(m * unbiased + (1 - m) * static_cast<float>(rv[c])))
        << c;
    const float alpha = invstd * static_cast<float>(w[c]);
    const float beta = static_cast<float>(b[c]) - mean * alpha;
    for (int n = 0; n < 2; ++n) {
      for (int i = 0; i < 4; ++i) {
        const int e = n * 12 + c * 4 + i;
        EXPECT_FLOAT_EQ(out(outs[0])[e].f, static_cast<float>(x[e]) * alpha + beta) << e;
      }
    }
  }
}

}  // namespace
}  // namespace ember::sched
