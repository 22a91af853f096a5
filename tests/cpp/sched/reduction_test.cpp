#include "sched/reduction.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "../codegen/kernel_runner.h"
#include "codegen/cpp/cpp_emitter.h"
#include "loop/eval.h"
#include "loop/parser.h"
#include "loop/printer.h"
#include "loop/verifier.h"
#include "sched/fusion.h"
#include "sched/reduction_spec.h"

namespace ember::sched {
namespace {

const ScheduleOptions kWithReductions{};  // reductions are on by default

using graph::Arg;
using graph::DType;
using graph::NoneArg;
using graph::ValueRef;

graph::TensorType type(DType t, graph::Dims sizes) {
  graph::TensorType tt;
  tt.dtype = t;
  tt.strides = graph::contiguous_strides(sizes);
  tt.sizes = std::move(sizes);
  return tt;
}

int32_t add(graph::Graph& g, const std::string& qualified, std::vector<std::string> names,
            std::vector<Arg> args, std::vector<graph::TensorType> outs) {
  size_t dot = qualified.find('.');
  graph::OpInfo op{qualified.substr(0, dot),
                   dot == std::string::npos ? "" : qualified.substr(dot + 1), names,
                   std::vector<bool>(names.size(), false)};
  return g.add_node(g.intern_op(op), std::move(args), std::move(outs));
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

graph::Graph softmax_graph(graph::Dims sizes, int64_t dim, bool log = false, bool half = false) {
  graph::Graph g;
  ValueRef x{g.add_input(type(DType::Float32, sizes), graph::InputKind::User)};
  int32_t n = add(g, log ? "aten::_log_softmax" : "aten::_softmax",
                  {"self", "dim", "half_to_float"}, {x, dim, half}, {type(DType::Float32, sizes)});
  g.outputs.push_back(g.nodes[n].outputs[0]);
  return g;
}

std::vector<loop::Scalar> random_f32(size_t n, double scale, double offset = 0) {
  std::mt19937 rng(7);
  std::normal_distribution<double> d(0, 1);
  std::vector<loop::Scalar> v;
  for (size_t i = 0; i < n; ++i) {
    v.push_back(loop::Scalar::of_float(loop::DType::Float32, d(rng) * scale + offset));
  }
  return v;
}

TEST(Reduction, SoftmaxKernelMatchesGolden) {
  graph::Graph g = softmax_graph({256, 128}, -1);
  Plan plan = schedule_graph(g, kWithReductions);
  ASSERT_EQ(plan.groups.size(), 1u);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.steps[0].kind, PlanStep::Kind::Kernel);
  EXPECT_EQ(plan.num_fused_nodes, 1);
  const loop::Kernel& k = plan.groups[0].kernel;
  EXPECT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
  std::string text = loop::print_kernel(k);
  std::string golden_path = std::string(EMBER_SCHED_GOLDEN_DIR) + "/softmax.loop";
  if (std::getenv("EMBER_ACCEPT_GOLDEN") != nullptr) std::ofstream(golden_path) << text;
  EXPECT_EQ(text, read(golden_path)) << "regenerate with EMBER_ACCEPT_GOLDEN=1 and review the diff";
  EXPECT_EQ(loop::print_kernel(loop::parse_kernel(text)), text);
  // Each row initialises its own accumulators, so the emitter really runs the rows in parallel.
  EXPECT_NE(codegen::emit_cpp(k).find("#pragma omp parallel for"), std::string::npos);
}

// Reductions over shape symbols (issue 35): a var_mean over rows of symbolic count and width has
// loops and an element count over the size variables (golden), and its one kernel is right at
// every size (the interpreter against a double reference), far from the hints it was laid out
// at. A layer norm needs its normalized shape as constants.
TEST(Reduction, ReductionsOverShapeSymbolsMatchGoldenAndEverySize) {
  graph::Graph g;
  graph::DimExpr s0 = g.symbols.create_size(7, "L['x'].size()[0]");
  graph::DimExpr s1 = g.symbols.create_size(16, "L['x'].size()[1]");
  ValueRef x{g.add_input(type(DType::Float32, {s0, s1}), graph::InputKind::User)};
  int32_t n =
      add(g, "aten::native_layer_norm", {"input", "normalized_shape", "weight", "bias", "eps"},
          {x, std::vector<int64_t>{}, NoneArg{}, NoneArg{}, 1e-5},
          {type(DType::Float32, {s0, s1}), type(DType::Float32, {s0, 1}),
           type(DType::Float32, {s0, 1})});
  // normalized_shape must be the constant trailing sizes: a symbolic width is no int list.
  EXPECT_FALSE(is_reduction_kernel_node(g, g.nodes[n]));

  // var_mean over the symbolic width: one kernel over s0 rows of s1 elements.
  graph::Graph h;
  graph::DimExpr r = h.symbols.create_size(7, "L['x'].size()[0]");
  graph::DimExpr c = h.symbols.create_size(16, "L['x'].size()[1]");
  ValueRef y{h.add_input(type(DType::Float32, {r, c}), graph::InputKind::User)};
  int32_t m = add(h, "aten::var_mean.correction", {"self", "dim", "correction", "keepdim"},
                  {y, std::vector<int64_t>{1}, int64_t{1}, true},
                  {type(DType::Float32, {r, 1}), type(DType::Float32, {r, 1})});
  h.outputs = h.nodes[m].outputs;
  ASSERT_TRUE(is_reduction_kernel_node(h, h.nodes[m]));
  Plan plan = schedule_graph(h, kWithReductions);
  ASSERT_EQ(plan.groups.size(), 1u);
  const loop::Kernel& k = plan.groups[0].kernel;
  EXPECT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
  EXPECT_EQ(k.size_vars, (std::vector<std::string>{"s0", "s1"}));
  std::string text = loop::print_kernel(k);
  std::string golden_path = std::string(EMBER_SCHED_GOLDEN_DIR) + "/var_mean_symbolic.loop";
  if (std::getenv("EMBER_ACCEPT_GOLDEN") != nullptr) std::ofstream(golden_path) << text;
  EXPECT_EQ(text, read(golden_path)) << "regenerate with EMBER_ACCEPT_GOLDEN=1 and review the diff";
  EXPECT_EQ(loop::print_kernel(loop::parse_kernel(text)), text);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{2, 2}, {3, 5}, {1, 9}, {5, 300}}) {
    loop::BufferMap bufs;
    bufs["buf0"] = random_f32(static_cast<size_t>(rows * cols), 2, 1);
    loop::run_kernel(k, {{"s0", rows}, {"s1", cols}}, bufs);
    for (int64_t i = 0; i < rows; ++i) {
      double mean = 0, m2 = 0;
      for (int64_t j = 0; j < cols; ++j) mean += bufs["buf0"][i * cols + j].f;
      mean /= static_cast<double>(cols);
      for (int64_t j = 0; j < cols; ++j) {
        const double d = bufs["buf0"][i * cols + j].f - mean;
        m2 += d * d;
      }
      EXPECT_NEAR(bufs["buf1"][i].f, m2 / static_cast<double>(cols - 1), 1e-4)
          << rows << " " << cols;
      EXPECT_NEAR(bufs["buf2"][i].f, mean, 1e-5) << rows << " " << cols;
    }
  }
}

// Softmax and log_softmax over a middle dim, run by the interpreter against a double reference.
TEST(Reduction, SoftmaxOverMiddleDimMatchesReference) {
  for (bool log : {false, true}) {
    graph::Graph g = softmax_graph({3, 5, 4}, 1, log);
    Plan plan = schedule_graph(g, kWithReductions);
    ASSERT_EQ(plan.groups.size(), 1u);
    const loop::Kernel& k = plan.groups[0].kernel;
    ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
    loop::BufferMap bufs;
    bufs["buf0"] = random_f32(60, 3);
    bufs["buf1"].resize(60);
    loop::run_kernel(k, {}, bufs);
    for (int a = 0; a < 3; ++a) {
      for (int c = 0; c < 4; ++c) {
        double m = -INFINITY, s = 0;
        for (int b = 0; b < 5; ++b) m = std::max(m, bufs["buf0"][a * 20 + b * 4 + c].f);
        for (int b = 0; b < 5; ++b) s += std::exp(bufs["buf0"][a * 20 + b * 4 + c].f - m);
        for (int b = 0; b < 5; ++b) {
          double x = bufs["buf0"][a * 20 + b * 4 + c].f;
          double want = log ? x - m - std::log(s) : std::exp(x - m) / s;
          EXPECT_NEAR(bufs["buf1"][a * 20 + b * 4 + c].f, want, 1e-6) << a << " " << b << " " << c;
        }
      }
    }
  }
}

// _safe_softmax (SDPA's math path): softmax, but a row of -inf only is 0 where softmax gives NaN;
// a row with a NaN stays NaN.
TEST(Reduction, SafeSoftmaxZeroesRowsOfMinusInfinity) {
  graph::Graph g;
  ValueRef x{g.add_input(type(DType::Float32, {3, 4}), graph::InputKind::User)};
  int32_t n = add(g, "aten::_safe_softmax", {"self", "dim", "dtype"}, {x, int64_t{-1}, NoneArg{}},
                  {type(DType::Float32, {3, 4})});
  g.outputs.push_back(g.nodes[n].outputs[0]);
  ASSERT_TRUE(is_reduction_kernel_node(g, g.nodes[n]));
  Plan plan = schedule_graph(g, kWithReductions);
  ASSERT_EQ(plan.groups.size(), 1u);
  const loop::Kernel& k = plan.groups[0].kernel;
  ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
  const double inf = INFINITY;
  const double in[12] = {1, 2, -inf, 0, -inf, -inf, -inf, -inf, 1, NAN, -inf, 2};
  loop::BufferMap bufs;
  for (double v : in) bufs["buf0"].push_back(loop::Scalar::of_float(loop::DType::Float32, v));
  bufs["buf1"].resize(12);
  loop::run_kernel(k, {}, bufs);
  const double s = std::exp(1.0) + std::exp(2.0) + std::exp(0.0);
  EXPECT_NEAR(bufs["buf1"][1].f, std::exp(2.0) / s, 1e-6);
  EXPECT_EQ(bufs["buf1"][2].f, 0.0);
  for (int i = 4; i < 8; ++i) EXPECT_EQ(bufs["buf1"][i].f, 0.0) << i;
  for (int i = 8; i < 12; ++i) EXPECT_TRUE(std::isnan(bufs["buf1"][i].f)) << i;
  // dtype: the output's (f32 from bf16) is exact; a narrowing one stays an ATen call.
  graph::Graph narrow;
  ValueRef y{narrow.add_input(type(DType::Float32, {3, 4}), graph::InputKind::User)};
  int32_t m = add(narrow, "aten::_safe_softmax", {"self", "dim", "dtype"},
                  {y, int64_t{-1}, DType::BFloat16}, {type(DType::BFloat16, {3, 4})});
  EXPECT_FALSE(is_reduction_kernel_node(narrow, narrow.nodes[m]));
}

// native_layer_norm: one group with three outputs; only the needed ones are written.
TEST(Reduction, LayerNormWritesTheNeededOutputs) {
  graph::Graph g;
  ValueRef x{g.add_input(type(DType::Float32, {6, 16}), graph::InputKind::User)};
  ValueRef w{g.add_input(type(DType::Float32, {16}), graph::InputKind::Parameter)};
  ValueRef b{g.add_input(type(DType::Float32, {16}), graph::InputKind::Parameter)};
  int32_t n = add(
      g, "aten::native_layer_norm", {"input", "normalized_shape", "weight", "bias", "eps"},
      {x, std::vector<int64_t>{16}, w, b, 1e-5},
      {type(DType::Float32, {6, 16}), type(DType::Float32, {6, 1}), type(DType::Float32, {6, 1})});
  const graph::Node& node = g.nodes[n];
  ASSERT_TRUE(is_reduction_kernel_node(g, node));
  g.outputs = {node.outputs[0], node.outputs[2]};  // y and rstd, not mean
  Plan plan = schedule_graph(g, kWithReductions);
  ASSERT_EQ(plan.groups.size(), 1u);
  const KernelGroup& group = plan.groups[0];
  EXPECT_EQ(group.inputs, (std::vector<graph::ValueId>{x.id, w.id, b.id}));
  EXPECT_EQ(group.outputs, (std::vector<graph::ValueId>{node.outputs[0], node.outputs[2]}));
  const loop::Kernel& k = group.kernel;
  ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
  loop::BufferMap bufs;
  bufs["buf0"] = random_f32(96, 2, 1);
  bufs["buf1"] = random_f32(16, 1);
  bufs["buf2"] = random_f32(16, 1, 0.5);
  bufs["buf3"].resize(96);
  bufs["buf4"].resize(6);
  loop::run_kernel(k, {}, bufs);
  for (int r = 0; r < 6; ++r) {
    double mean = 0, var = 0;
    for (int j = 0; j < 16; ++j) mean += bufs["buf0"][r * 16 + j].f / 16;
    for (int j = 0; j < 16; ++j) var += std::pow(bufs["buf0"][r * 16 + j].f - mean, 2) / 16;
    double rstd = 1 / std::sqrt(var + 1e-5);
    EXPECT_NEAR(bufs["buf4"][r].f, rstd, 1e-6 * rstd);
    for (int j = 0; j < 16; ++j) {
      double want =
          (bufs["buf0"][r * 16 + j].f - mean) * rstd * bufs["buf1"][j].f + bufs["buf2"][j].f;
      EXPECT_NEAR(bufs["buf3"][r * 16 + j].f, want, 1e-5);
    }
  }
}

TEST(Reduction, SumKeepdimAndAmaxOverTrailingDims) {
  graph::Graph g;
  ValueRef x{g.add_input(type(DType::Float64, {3, 4, 5}), graph::InputKind::User)};
  int32_t s =
      add(g, "aten::sum.dim_IntList", {"self", "dim", "keepdim", "dtype"},
          {x, std::vector<int64_t>{-1, 1}, true, NoneArg{}}, {type(DType::Float64, {3, 1, 1})});
  int32_t m = add(g, "aten::amax", {"self", "dim", "keepdim"}, {x, std::vector<int64_t>{2}, false},
                  {type(DType::Float64, {3, 4})});
  g.outputs = {g.nodes[s].outputs[0], g.nodes[m].outputs[0]};
  Plan plan = schedule_graph(g, kWithReductions);
  ASSERT_EQ(plan.groups.size(), 2u);
  ASSERT_EQ(plan.steps.size(), 2u);
  loop::BufferMap bufs;
  for (int i = 0; i < 60; ++i)
    bufs["buf0"].push_back(loop::Scalar::of_float(loop::DType::Float64, i % 7 - 3.5));
  bufs["buf1"].resize(3);
  loop::run_kernel(plan.groups[0].kernel, {}, bufs);
  loop::BufferMap bufs2;
  bufs2["buf0"] = bufs["buf0"];
  bufs2["buf1"].resize(12);
  loop::run_kernel(plan.groups[1].kernel, {}, bufs2);
  for (int a = 0; a < 3; ++a) {
    double sum = 0;
    for (int i = 0; i < 20; ++i) sum += bufs["buf0"][a * 20 + i].f;
    EXPECT_EQ(bufs["buf1"][a].f, sum);
    for (int b = 0; b < 4; ++b) {
      double mx = -INFINITY;
      for (int c = 0; c < 5; ++c) mx = std::max(mx, bufs["buf0"][a * 20 + b * 5 + c].f);
      EXPECT_EQ(bufs2["buf1"][a * 4 + b].f, mx);
    }
  }
}

TEST(Reduction, ConservativeRejections) {
  graph::Graph half = softmax_graph({4, 8}, -1, false, /*half=*/true);
  EXPECT_FALSE(is_reduction_kernel_node(half, half.nodes[0]));

  graph::Graph g;
  ValueRef x{g.add_input(type(DType::Float32, {4, 8}), graph::InputKind::User)};
  ValueRef xb{g.add_input(type(DType::Bool, {4, 8}), graph::InputKind::User)};
  ValueRef xh{g.add_input(type(DType::Float16, {4, 8}), graph::InputKind::User)};
  graph::TensorType on_meta = type(DType::Float32, {4, 8});
  on_meta.device.kind = graph::DeviceKind::Meta;
  ValueRef xg{g.add_input(on_meta, graph::InputKind::User)};
  // A dtype argument other than the output's dtype.
  add(g, "aten::sum.dim_IntList", {"self", "dim", "keepdim", "dtype"},
      {x, std::vector<int64_t>{1}, false, DType::Float64}, {type(DType::Float32, {4})});
  // A repeated dim (eager rejects it).
  add(g, "aten::sum.dim_IntList", {"self", "dim", "keepdim", "dtype"},
      {x, std::vector<int64_t>{1, -1}, false, NoneArg{}}, {type(DType::Float32, {4})});
  // amax of bool, f16 input, an input on a device no kernel runs on (meta).
  add(g, "aten::amax", {"self", "dim", "keepdim"}, {xb, std::vector<int64_t>{1}, false},
      {type(DType::Bool, {4})});
  add(g, "aten::amax", {"self", "dim", "keepdim"}, {xh, std::vector<int64_t>{1}, false},
      {type(DType::Float16, {4})});
  graph::TensorType out_meta = type(DType::Float32, {4});
  out_meta.device.kind = graph::DeviceKind::Meta;
  add(g, "aten::amax", {"self", "dim", "keepdim"}, {xg, std::vector<int64_t>{1}, false},
      {out_meta});
  // A dim out of range; an output shape that does not match.
  add(g, "aten::amax", {"self", "dim", "keepdim"}, {x, std::vector<int64_t>{2}, false},
      {type(DType::Float32, {4})});
  add(g, "aten::amax", {"self", "dim", "keepdim"}, {x, std::vector<int64_t>{1}, true},
      {type(DType::Float32, {4})});
  // An unknown op.
  add(g, "aten::nansum", {"self", "dim", "keepdim", "dtype"},
      {x, std::vector<int64_t>{1}, false, NoneArg{}}, {type(DType::Float32, {4})});
  for (const graph::Node& n : g.nodes) {
    EXPECT_FALSE(is_reduction_kernel_node(g, n)) << g.op_of(n).qualified_name();
  }
}

TEST(Reduction, AcceptsEveryDimIntegerInputsAndEmptyInputs) {
  graph::Graph g;
  ValueRef x{g.add_input(type(DType::Float32, {4, 8}), graph::InputKind::User)};
  ValueRef xi{g.add_input(type(DType::Int32, {4, 8}), graph::InputKind::User)};
  ValueRef e{g.add_input(type(DType::Float32, {0, 8}), graph::InputKind::User)};
  add(g, "aten::sum.dim_IntList", {"self", "dim", "keepdim", "dtype"},
      {x, std::vector<int64_t>{0}, false, NoneArg{}}, {type(DType::Float32, {8})});
  add(g, "aten::sum.dim_IntList", {"self", "dim", "keepdim", "dtype"},
      {xi, std::vector<int64_t>{1}, false, NoneArg{}}, {type(DType::Int64, {4})});
  add(g, "aten::amax", {"self", "dim", "keepdim"}, {xi, std::vector<int64_t>{1}, false},
      {type(DType::Int32, {4})});
  add(g, "aten::sum.dim_IntList", {"self", "dim", "keepdim", "dtype"},
      {x, std::vector<int64_t>{1}, false, DType::Float64}, {type(DType::Float64, {4})});
  add(g, "aten::mean.dim", {"self", "dim", "keepdim", "dtype"},
      {e, std::vector<int64_t>{0}, true, NoneArg{}}, {type(DType::Float32, {1, 8})});
  for (const graph::Node& n : g.nodes) {
    EXPECT_TRUE(is_reduction_kernel_node(g, n)) << g.op_of(n).qualified_name();
  }
}

// The space is coalesced: a contiguous softmax over [8, 8, 32, 32] is 2048 rows of 32; sums over
// contiguous trailing dims are one loop.
TEST(Reduction, SpaceIsCoalesced) {
  graph::Graph g = softmax_graph({8, 8, 32, 32}, -1);
  std::optional<ReductionSpec> s = analyze_reduction(g, g.nodes[0]);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->sizes, (graph::Dims{2048, 32}));
  EXPECT_EQ(s->reduced, (std::vector<bool>{false, true}));
  EXPECT_EQ(s->x.strides, (graph::Dims{32, 1}));

  graph::Graph h;
  ValueRef x{h.add_input(type(DType::Float32, {4, 1, 6, 9}), graph::InputKind::User)};
  add(h, "aten::sum.dim_IntList", {"self", "dim", "keepdim", "dtype"},
      {x, std::vector<int64_t>{2, 3}, true, NoneArg{}}, {type(DType::Float32, {4, 1, 1, 1})});
  s = analyze_reduction(h, h.nodes[0]);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->sizes, (graph::Dims{4, 54}));
  EXPECT_EQ(s->outputs[0].strides, (graph::Dims{1, 0}));
}

// Runs plan group `gi`'s kernel compiled and through the interpreter on the same inputs.
void check_group(const Plan& plan, size_t gi, double tol) {
  const loop::Kernel& k = plan.groups.at(gi).kernel;
  ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
  codegen::testing::check_against_interpreter(k, {}, tol);
}

graph::Graph reduce_graph(const std::string& op, DType in, DType out, graph::Dims sizes,
                          std::vector<int64_t> dims, bool keepdim, graph::Dims out_sizes,
                          std::optional<graph::Dims> strides = std::nullopt) {
  graph::Graph g;
  graph::TensorType t = type(in, sizes);
  if (strides) t.strides = *strides;
  ValueRef x{g.add_input(t, graph::InputKind::User)};
  int32_t n =
      op == "aten::amax" || op == "aten::logsumexp"
          ? add(g, op, {"self", "dim", "keepdim"}, {x, dims, keepdim}, {type(out, out_sizes)})
          : add(g, op, {"self", "dim", "keepdim", "dtype"}, {x, dims, keepdim, NoneArg{}},
                {type(out, out_sizes)});
  g.outputs.push_back(g.nodes[n].outputs[0]);
  return g;
}

// A reduction over the leading dim of a contiguous input: tiles of the last dim, vectorized,
// with tile-sized accumulators, the reduced dim looped around them.
TEST(Reduction, OuterLayoutVectorizesTheKeptDim) {
  graph::Graph g = reduce_graph("aten::sum.dim_IntList", DType::Float32, DType::Float32, {50, 600},
                                {0}, false, {600});
  Plan plan = schedule_graph(g);
  ASSERT_EQ(plan.groups.size(), 1u);
  std::string text = loop::print_kernel(plan.groups[0].kernel);
  EXPECT_NE(text.find("alloc acc : f32[256]"), std::string::npos) << text;
  EXPECT_NE(text.find("for (x0, 0, 50) {"), std::string::npos) << text;
  EXPECT_NE(text.find("for (c, 0, min((600 - (t * 256)), 256)) vectorized"), std::string::npos)
      << text;
  check_group(plan, 0, 1e-5);
}

// Long column sums (outer layout) add into per-block partials, so they stay accurate.
TEST(Reduction, LongColumnSumsAreBlocked) {
  graph::Graph g = reduce_graph("aten::sum.dim_IntList", DType::Float32, DType::Float32, {20000, 8},
                                {0}, false, {8});
  Plan plan = schedule_graph(g);
  const loop::Kernel& k = plan.groups[0].kernel;
  std::string text = loop::print_kernel(k);
  EXPECT_NE(text.find("alloc acc_blk : f32[8]"), std::string::npos) << text;
  EXPECT_NE(text.find("accumulate sum acc[c] <- acc_blk[c]"), std::string::npos) << text;
  loop::BufferMap bufs = codegen::testing::random_buffers(k, {});
  codegen::testing::run_compiled(k, {}, bufs);
  for (int c = 0; c < 8; ++c) {
    double exact = 0, magnitude = 0;
    for (int r = 0; r < 20000; ++r) {
      exact += bufs["buf0"][r * 8 + c].f;
      magnitude += std::fabs(bufs["buf0"][r * 8 + c].f);
    }
    EXPECT_LE(std::fabs(bufs["buf1"][c].f - exact), 4 * 0x1p-24 * magnitude) << "column " << c;
  }
  check_group(plan, 0, 1e-4);
}

// One large row: chunks in parallel, each with its own partial, combined in chunk order.
TEST(Reduction, OneLargeRowSplitsIntoChunks) {
  graph::Graph g =
      reduce_graph("aten::amax", DType::Float32, DType::Float32, {300, 1000}, {0, 1}, false, {});
  Plan plan = schedule_graph(g);
  std::string text = loop::print_kernel(plan.groups[0].kernel);
  EXPECT_NE(text.find("alloc acc_part : f32[36]"), std::string::npos) << text;
  EXPECT_NE(text.find("for (s, 0, 36) parallel"), std::string::npos) << text;
  EXPECT_NE(text.find("accumulate max acc[0] <- acc_part[s_]"), std::string::npos) << text;
  EXPECT_NE(codegen::emit_cpp(plan.groups[0].kernel).find("#pragma omp parallel for"),
            std::string::npos);
  check_group(plan, 0, 0);
}

TEST(Reduction, CompiledKernelsMatchTheInterpreter) {
  struct Case {
    std::string op;
    DType in, out;
    graph::Dims sizes;
    std::vector<int64_t> dims;
    bool keepdim;
    graph::Dims out_sizes;
    std::optional<graph::Dims> strides;
  };
  const Case cases[] = {
      {"aten::sum.dim_IntList", DType::Float32, DType::Float32, {7, 130}, {1}, false, {7}, {}},
      {"aten::sum.dim_IntList",
       DType::Float64,
       DType::Float64,
       {5, 6, 7},
       {0, 2},
       true,
       {1, 6, 1},
       {}},
      {"aten::sum.dim_IntList", DType::Int32, DType::Int64, {9, 40}, {0}, false, {40}, {}},
      {"aten::amax", DType::Float32, DType::Float32, {6, 33}, {0}, true, {1, 33}, {}},
      {"aten::amax",
       DType::Float32,
       DType::Float32,
       {6, 33},
       {1},
       false,
       {6},
       graph::Dims{1, 6}},  // transposed
      {"aten::logsumexp", DType::Float32, DType::Float32, {4, 300}, {1}, false, {4}, {}},
      {"aten::mean.dim", DType::BFloat16, DType::BFloat16, {3, 65}, {1}, false, {3}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    graph::Graph g =
        reduce_graph(c.op, c.in, c.out, c.sizes, c.dims, c.keepdim, c.out_sizes, c.strides);
    Plan plan = schedule_graph(g);
    ASSERT_EQ(plan.groups.size(), 1u);
    check_group(plan, 0, c.in == DType::BFloat16 ? 1e-2 : 1e-5);
  }
}

// Every kind, in the inner, outer and split layouts, gives a verifier-valid kernel whose text
// parses back to itself, and compiled it agrees with the interpreter.
TEST(Reduction, EveryKindBuildsAVerifiedKernel) {
  struct Case {
    std::string op;
    std::vector<std::string> names;
    std::vector<Arg> extra;  // arguments after self
    DType in;
    std::vector<std::pair<DType, graph::Dims>> outs;
  };
  auto dims = [](std::vector<int64_t> d) { return Arg{d}; };
  for (graph::Dims sizes : {graph::Dims{6, 40}, graph::Dims{40, 6}, graph::Dims{90000}}) {
    const bool one_row = sizes.size() == 1;
    const int64_t last = one_row ? 0 : 1;
    const graph::Dims kept = one_row ? graph::Dims{} : graph::Dims{sizes[0]};
    const std::vector<Case> cases = {
        {"aten::prod.dim_int",
         {"self", "dim", "keepdim", "dtype"},
         {last, false, NoneArg{}},
         DType::Float64,
         {{DType::Float64, kept}}},
        {"aten::argmax",
         {"self", "dim", "keepdim"},
         {last, false},
         DType::Int32,
         {{DType::Int64, kept}}},
        {"aten::max.dim",
         {"self", "dim", "keepdim"},
         {last, false},
         DType::Float32,
         {{DType::Float32, kept}, {DType::Int64, kept}}},
        {"aten::any.dim",
         {"self", "dim", "keepdim"},
         {last, false},
         DType::Float32,
         {{DType::Bool, kept}}},
        {"aten::var_mean.correction",
         {"self", "dim", "correction", "keepdim"},
         {dims({last}), int64_t{1}, false},
         DType::Float32,
         {{DType::Float32, kept}, {DType::Float32, kept}}},
        {"aten::logsumexp",
         {"self", "dim", "keepdim"},
         {dims({last}), false},
         DType::Float64,
         {{DType::Float64, kept}}},
        {"aten::_log_softmax",
         {"self", "dim", "half_to_float"},
         {last, false},
         DType::Float32,
         {{DType::Float32, sizes}}},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(c.op + " over " + std::to_string(sizes.size()) + "-d");
      graph::Graph g;
      ValueRef x{g.add_input(type(c.in, sizes), graph::InputKind::User)};
      std::vector<Arg> args = {x};
      args.insert(args.end(), c.extra.begin(), c.extra.end());
      std::vector<graph::TensorType> outs;
      for (const auto& [t, s] : c.outs) outs.push_back(type(t, s));
      int32_t n = add(g, c.op, c.names, args, outs);
      ASSERT_TRUE(is_reduction_kernel_node(g, g.nodes[n]));
      for (graph::ValueId o : g.nodes[n].outputs) g.outputs.push_back(o);
      Plan plan = schedule_graph(g);
      ASSERT_EQ(plan.groups.size(), 1u);
      const loop::Kernel& k = plan.groups[0].kernel;
      ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
      EXPECT_EQ(loop::print_kernel(loop::parse_kernel(loop::print_kernel(k))),
                loop::print_kernel(k));
      check_group(plan, 0, 1e-4);
    }
  }
}

// A dead reduction (nothing reads its outputs) is dropped like a dead pointwise group.
TEST(Reduction, DeadReductionIsDropped) {
  graph::Graph g = softmax_graph({4, 8}, -1);
  g.outputs.clear();
  Plan plan = schedule_graph(g, kWithReductions);
  EXPECT_TRUE(plan.steps.empty());
}

}  // namespace
}  // namespace ember::sched
