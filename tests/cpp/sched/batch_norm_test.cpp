// Batch norm in inference mode as an index function (sched/batch_norm.h): which nodes qualify,
// the golden kernel of batch norm -> relu, and the interpreter against eager's formula.
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

}  // namespace
}  // namespace ember::sched
