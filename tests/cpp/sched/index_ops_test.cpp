// Index functions of view, layout and indexing ops (sched/index_ops.h) and fusion through them
// (sched/fusion.h): golden kernels, the interpreter against references, and plan structure.
#include "sched/index_ops.h"

#include <gtest/gtest.h>

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
using graph::ValueId;
using graph::ValueRef;
using test::expect_golden;
using test::type;

// A graph built op by op; each op has one output of the given type.
struct Builder : test::Builder {
  ValueRef neg(ValueRef x) {
    graph::TensorType t = g.type(x.id);
    t.strides = graph::contiguous_strides(t.sizes);
    t.storage_offset = 0;
    return op("aten::neg", {"self"}, {x}, t);
  }
  ValueRef view(ValueRef x, graph::Dims sizes) {
    graph::TensorType t = g.type(x.id);
    std::vector<int64_t> s;
    for (const graph::DimExpr& d : sizes) s.push_back(d.constant());
    t.sizes = sizes;
    t.strides = graph::contiguous_strides(sizes);
    return op("aten::view", {"self", "size"}, {x, s}, t);
  }
};

std::vector<loop::Scalar> iota_f32(int64_t n) {
  std::vector<loop::Scalar> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(loop::Scalar::of_float(loop::DType::Float32, i));
  return v;
}

int count_steps(const Plan& plan, PlanStep::Kind kind) {
  int n = 0;
  for (const PlanStep& s : plan.steps) n += s.kind == kind;
  return n;
}

// (x @ w + b).view(B, S, H, D).transpose(1, 2) * scale, with the matmul's output as the input:
// the bias add, both views and the scale are one kernel that reads the matmul's output through
// the remap and writes the transposed layout eager gives, innermost loop over its stride-1 dim.
TEST(ViewFusion, SplitHeadsKernelMatchesGolden) {
  Builder b;
  ValueRef mm = b.input(type(DType::Float32, {6, 20}));
  ValueRef bias = b.input(type(DType::Float32, {20}));
  ValueRef v3 = b.view(mm, {2, 3, 20});
  ValueRef add = b.op("aten::add.Tensor", {"self", "other", "alpha"}, {v3, bias, int64_t{1}},
                      type(DType::Float32, {2, 3, 20}));
  ValueRef v4 = b.view(add, {2, 3, 4, 5});
  ValueRef tr = b.op("aten::transpose.int", {"self", "dim0", "dim1"}, {v4, int64_t{1}, int64_t{2}},
                     type(DType::Float32, {2, 4, 3, 5}, {60, 5, 20, 1}));
  ValueRef out = b.op("aten::mul.Scalar", {"self", "other"}, {tr, 0.125},
                      type(DType::Float32, {2, 4, 3, 5}, {60, 5, 20, 1}));
  b.g.outputs = {out.id};
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 1u);
  ASSERT_EQ(plan.steps.size(), 1u);
  EXPECT_EQ(plan.num_fused_nodes, 5);
  EXPECT_EQ(plan.groups[0].inputs, (std::vector<ValueId>{mm.id, bias.id}));
  expect_golden(plan.groups[0].kernel, "split_heads.loop");

  loop::BufferMap bufs;
  bufs["buf0"] = iota_f32(120);
  bufs["buf1"] = iota_f32(20);
  loop::run_kernel(plan.groups[0].kernel, {}, bufs);
  for (int bb = 0; bb < 2; ++bb) {
    for (int h = 0; h < 4; ++h) {
      for (int s = 0; s < 3; ++s) {
        for (int d = 0; d < 5; ++d) {
          double x = (bb * 3 + s) * 20 + h * 5 + d, want = (x + h * 5 + d) * 0.125;
          EXPECT_EQ(bufs["buf2"][bb * 60 + h * 5 + s * 20 + d].f, want);
        }
      }
    }
  }
}

// Two embeddings and their sum: the index tensors are checked before the loops.
TEST(ViewFusion, EmbeddingKernelChecksIndicesFirst) {
  Builder b;
  ValueRef ids = b.input(type(DType::Int64, {2, 3}));
  ValueRef pos = b.input(type(DType::Int64, {2, 3}, {0, 1}));  // arange(3).expand(2, 3)
  ValueRef w = b.input(type(DType::Float32, {10, 4}));
  ValueRef p = b.input(type(DType::Float32, {3, 4}));
  std::vector<std::string> names{"weight", "indices", "padding_idx", "scale_grad_by_freq",
                                 "sparse"};
  ValueRef e1 = b.op("aten::embedding", names, {w, ids, int64_t{-1}, false, false},
                     type(DType::Float32, {2, 3, 4}));
  ValueRef e2 = b.op("aten::embedding", names, {p, pos, int64_t{-1}, false, false},
                     type(DType::Float32, {2, 3, 4}));
  ValueRef sum = b.op("aten::add.Tensor", {"self", "other", "alpha"}, {e1, e2, int64_t{1}},
                      type(DType::Float32, {2, 3, 4}));
  b.g.outputs = {sum.id};
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 1u);
  const KernelGroup& group = plan.groups[0];
  EXPECT_TRUE(group.index_status);
  expect_golden(group.kernel, "embedding.loop");

  for (int64_t bad : {-1, 0, 10}) {
    loop::BufferMap bufs;
    for (int64_t i : std::vector<int64_t>{3, 9, 0, 1, 2, bad}) {
      bufs["buf0"].push_back(loop::Scalar::of_int(loop::DType::Int64, i));
    }
    for (int64_t i : {0, 1, 2}) {
      bufs["buf2"].push_back(loop::Scalar::of_int(loop::DType::Int64, i));
    }
    bufs["buf1"] = iota_f32(40);  // buffers in the order the kernel first reads them
    bufs["buf3"] = iota_f32(12);
    loop::run_kernel(group.kernel, {}, bufs);
    EXPECT_EQ(bufs["status"][0].i, bad != 0) << bad;
    if (bad == 0) {
      EXPECT_EQ(bufs["buf4"][23].f, 0 * 4 + 3 + (2 * 4 + 3));  // w[0][3] + p[2][3]
    }
  }
}

// view / _unsafe_view of a computed value: the index math (groups of dims of equal products,
// linearized and delinearized) keeps row-major order.
TEST(IndexOps, ReshapeIndexMathKeepsRowMajorOrder) {
  const std::vector<std::pair<graph::Dims, graph::Dims>> cases = {
      {{6, 20}, {2, 3, 4, 5}}, {{2, 3, 4, 5}, {6, 20}}, {{4, 6}, {3, 8}}, {{2, 1, 6}, {3, 1, 4}},
      {{12}, {1, 12, 1}},      {{1, 2, 3, 1}, {6}},     {{5}, {5}},       {{4, 3}, {2, 2, 3}},
      {{3, 4, 5}, {5, 4, 3}},
  };
  for (const auto& [in, out] : cases) {
    Builder b;
    ValueRef x = b.input(type(DType::Float32, in));
    ValueRef v = b.view(b.neg(x), out);
    b.g.outputs = {b.neg(v).id};
    Plan plan = schedule_graph(b.g);
    ASSERT_EQ(plan.groups.size(), 1u);
    const loop::Kernel& k = plan.groups[0].kernel;
    ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
    int64_t n = graph::numel(in);
    loop::BufferMap bufs;
    bufs["buf0"] = iota_f32(n);
    loop::run_kernel(k, {}, bufs);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(bufs["buf1"][i].f, i) << loop::print_kernel(k);
  }
}

// Layout ops through the interpreter against direct index arithmetic, on a computed 3 x 4 input.
TEST(IndexOps, LayoutOpsMatchIndexArithmetic) {
  struct Case {
    std::string op;
    std::vector<std::string> names;
    std::vector<Arg> args;  // after self
    graph::Dims out;
    std::function<double(int64_t i, int64_t j)> want;  // element (i, j) of the result
  };
  auto x = [](int64_t i, int64_t j) { return static_cast<double>(-(i * 4 + j)); };
  const std::vector<Case> cases = {
      {"aten::flip",
       {"self", "dims"},
       {std::vector<int64_t>{0, 1}},
       {3, 4},
       [&](int64_t i, int64_t j) { return x(2 - i, 3 - j); }},
      {"aten::roll",
       {"self", "shifts", "dims"},
       {std::vector<int64_t>{5}, std::vector<int64_t>{1}},
       {3, 4},
       [&](int64_t i, int64_t j) { return x(i, (j + 3) % 4); }},
      {"aten::roll",
       {"self", "shifts", "dims"},
       {std::vector<int64_t>{-3}, std::vector<int64_t>{}},
       {3, 4},
       [&](int64_t i, int64_t j) {
         int64_t f = (i * 4 + j + 3) % 12;
         return x(f / 4, f % 4);
       }},
      {"aten::constant_pad_nd",
       {"self", "pad", "value"},
       {std::vector<int64_t>{1, -1, 0, 2}, 9.5},
       {5, 4},
       [&](int64_t i, int64_t j) { return i < 3 && j >= 1 ? x(i, j - 1) : 9.5; }},
      {"aten::slice.Tensor",
       {"self", "dim", "start", "end", "step"},
       {int64_t{1}, int64_t{-3}, NoneArg{}, int64_t{2}},
       {3, 2},
       [&](int64_t i, int64_t j) { return x(i, 1 + 2 * j); }},
      {"aten::repeat",
       {"self", "repeats"},
       {std::vector<int64_t>{2, 1}},
       {6, 4},
       [&](int64_t i, int64_t j) { return x(i % 3, j); }},
      {"aten::tril",
       {"self", "diagonal"},
       {int64_t{1}},
       {3, 4},
       [&](int64_t i, int64_t j) { return j - i <= 1 ? x(i, j) : 0.0; }},
      {"aten::t", {"self"}, {}, {4, 3}, [&](int64_t i, int64_t j) { return x(j, i); }},
  };
  for (const Case& c : cases) {
    Builder b;
    ValueRef in = b.input(type(DType::Float32, {3, 4}));
    std::vector<Arg> args{b.neg(in)};
    args.insert(args.end(), c.args.begin(), c.args.end());
    graph::TensorType t = type(DType::Float32, c.out);
    ValueRef out = b.op(c.op, c.names, args, t);
    ASSERT_TRUE(index_op_kind(b.g, b.g.nodes.back()).has_value()) << c.op;
    b.g.outputs = {b.neg(out).id};
    Plan plan = schedule_graph(b.g);
    ASSERT_EQ(plan.groups.size(), 1u) << c.op;
    loop::BufferMap bufs;
    bufs["buf0"] = iota_f32(12);
    loop::run_kernel(plan.groups[0].kernel, {}, bufs);
    for (int64_t i = 0; i < c.out[0].constant(); ++i) {
      for (int64_t j = 0; j < c.out[1].constant(); ++j) {
        EXPECT_EQ(bufs["buf1"][i * c.out[1].constant() + j].f, -c.want(i, j))
            << c.op << " at " << i << ", " << j;
      }
    }
  }
}

// A view that a graph output needs is a view step of its chain's root, after the kernel that
// writes the root, and does not split the kernel.
// KernelGroup::reuse: an output may take over an input read only at the element it writes.
TEST(Fusion, InputsReadAtTheirOwnElementAreReusable) {
  Builder b;
  ValueRef x = b.input(type(DType::Float32, {4, 4}));
  ValueRef y = b.input(type(DType::Float32, {4, 4}));
  ValueRef nx = b.neg(x);
  ValueRef yt = b.op("aten::t", {"self"}, {y}, type(DType::Float32, {4, 4}, {1, 4}));
  ValueRef sum = b.op("aten::add.Tensor", {"self", "other", "alpha"}, {nx, yt, int64_t{1}},
                      type(DType::Float32, {4, 4}));
  b.g.outputs = {sum.id};
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 1u);
  // x is read at (i, j) only; y at (j, i), which another iteration writes.
  using Pair = std::pair<ValueId, ValueId>;
  EXPECT_EQ(plan.groups[0].reuse, (std::vector<Pair>{{x.id, sum.id}}));
}

TEST(Fusion, ViewsNeededOutsideAreViewStepsAfterTheKernel) {
  Builder b;
  ValueRef x = b.input(type(DType::Float32, {3, 4}));
  ValueRef t = b.neg(x);
  ValueRef tt = b.op("aten::t", {"self"}, {t}, type(DType::Float32, {4, 3}, {1, 4}));
  ValueRef row = b.op("aten::select.int", {"self", "dim", "index"}, {tt, int64_t{0}, int64_t{2}},
                      type(DType::Float32, {3}, {4}, 2));
  ValueRef u = b.neg(t);
  b.g.outputs = {row.id, u.id};
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.steps.size(), 2u);
  EXPECT_EQ(plan.steps[0].kind, PlanStep::Kind::Kernel);
  EXPECT_EQ(plan.steps[1].kind, PlanStep::Kind::View);  // t() is not a step of its own
  EXPECT_EQ(plan.steps[1].root, t.id);
  EXPECT_EQ(plan.groups[0].outputs, (std::vector<ValueId>{t.id, u.id}));
}

// Note [Recompute or realize]: a cheap value read at two indices is recomputed; an expensive one
// is written once by its own kernel.
TEST(Fusion, ExpensiveValuesReadAtTwoIndicesAreRealized) {
  for (bool expensive : {false, true}) {
    Builder b;
    ValueRef x = b.input(type(DType::Float32, {4, 4}));
    ValueRef e =
        b.op(expensive ? "aten::exp" : "aten::neg", {"self"}, {x}, type(DType::Float32, {4, 4}));
    ValueRef et = b.op("aten::t", {"self"}, {e}, type(DType::Float32, {4, 4}, {1, 4}));
    ValueRef sum = b.op("aten::add.Tensor", {"self", "other", "alpha"}, {e, et, int64_t{1}},
                        type(DType::Float32, {4, 4}));
    b.g.outputs = {sum.id};
    Plan plan = schedule_graph(b.g);
    EXPECT_EQ(plan.groups.size(), expensive ? 2u : 1u) << expensive;
    EXPECT_EQ(count_steps(plan, PlanStep::Kind::Extern), 0);
  }
}

TEST(Fusion, BroadcastOfAnExpensiveValueIsRealized) {
  Builder b;
  ValueRef x = b.input(type(DType::Float32, {8, 16}));
  ValueRef y = b.input(type(DType::Float32, {16}));
  ValueRef e = b.op("aten::tanh", {"self"}, {y}, type(DType::Float32, {16}));
  ValueRef sum = b.op("aten::add.Tensor", {"self", "other", "alpha"}, {x, e, int64_t{1}},
                      type(DType::Float32, {8, 16}));
  b.g.outputs = {sum.id};
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.groups[0].outputs, (std::vector<ValueId>{e.id}));
}

// x = x.roll(1) + x, forty times: inlining would evaluate the first x at 2^40 indices. Values
// read at too many indices are realized, so the plan stays small.
TEST(Fusion, InliningAtManyIndicesIsBounded) {
  Builder b;
  ValueRef x = b.input(type(DType::Float32, {64}));
  for (int k = 0; k < 40; ++k) {
    ValueRef r =
        b.op("aten::roll", {"self", "shifts", "dims"},
             {x, std::vector<int64_t>{1}, std::vector<int64_t>{0}}, type(DType::Float32, {64}));
    x = b.op("aten::add.Tensor", {"self", "other", "alpha"}, {r, x, int64_t{1}},
             type(DType::Float32, {64}));
  }
  b.g.outputs = {x.id};
  Plan plan = schedule_graph(b.g);
  EXPECT_GT(plan.groups.size(), 1u);
  EXPECT_LE(plan.groups.size(), 40u);
  for (const KernelGroup& group : plan.groups) {
    ASSERT_TRUE(loop::verify_kernel(group.kernel).empty());
  }
}

// The innermost loop runs over the output's stride-1 dim.
TEST(Fusion, LoopOrderFollowsOutputStrides) {
  Builder b;
  ValueRef x = b.input(type(DType::Float32, {5, 7}, {1, 5}));  // a transposed input
  ValueRef y = b.op("aten::neg", {"self"}, {x}, type(DType::Float32, {5, 7}, {1, 5}));
  b.g.outputs = {y.id};
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 1u);
  const auto* outer = plan.groups[0].kernel.body.as<loop::For>();
  ASSERT_NE(outer, nullptr);
  EXPECT_EQ(outer->var.as<loop::Var>()->name, "i1");
  const auto* inner = outer->body.as<loop::For>();
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(inner->var.as<loop::Var>()->name, "i0");
  EXPECT_EQ(inner->for_kind, loop::ForKind::Vectorized);
}

// An index tensor written by the kernel that would gather with it is written by an earlier one:
// the check before the loops reads it.
TEST(Fusion, IndexTensorsComeFromEarlierSteps) {
  Builder b;
  ValueRef x = b.input(type(DType::Float32, {4, 4}));
  ValueRef i = b.input(type(DType::Int64, {4, 4}));
  ValueRef j = b.op("aten::clamp", {"self", "min", "max"}, {i, int64_t{0}, int64_t{3}},
                    type(DType::Int64, {4, 4}));
  ValueRef gth = b.op("aten::gather", {"self", "dim", "index", "sparse_grad"},
                      {x, int64_t{1}, j, false}, type(DType::Float32, {4, 4}));
  b.g.outputs = {j.id, gth.id};
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 2u);
  EXPECT_EQ(plan.groups[0].outputs, (std::vector<ValueId>{j.id}));
  EXPECT_TRUE(plan.groups[1].index_status);
}

TEST(IndexOps, ConservativeRejections) {
  Builder b;
  ValueRef x = b.input(type(DType::Float32, {3, 4}));
  ValueRef xi = b.input(type(DType::Int32, {3, 4}));
  ValueRef m = b.input(type(DType::Bool, {3}));
  ValueRef i = b.input(type(DType::Int64, {2}));
  auto rejects = [&](ValueRef v) { return !index_op_kind(b.g, b.g.nodes[b.g.values[v.id].node]); };
  // A view that reinterprets the dtype.
  EXPECT_TRUE(rejects(
      b.op("aten::view.dtype", {"self", "dtype"}, {x, DType::Int32}, type(DType::Int32, {3, 4}))));
  // Boolean masks (data-dependent shapes) and non-adjacent index tensors.
  EXPECT_TRUE(rejects(b.op("aten::index.Tensor", {"self", "indices"},
                           {x, graph::ValueList{{m.id}, true}}, type(DType::Float32, {2, 4}))));
  ValueRef x3 = b.input(type(DType::Float32, {3, 4, 5}));
  EXPECT_TRUE(rejects(b.op("aten::index.Tensor", {"self", "indices"},
                           {x3, graph::ValueList{{i.id, std::nullopt, i.id}, true}},
                           type(DType::Float32, {2, 4}))));
  // A pad value that does not fit the integer dtype.
  EXPECT_TRUE(rejects(b.op("aten::constant_pad_nd", {"self", "pad", "value"},
                           {xi, std::vector<int64_t>{1, 1}, 1e12}, type(DType::Int32, {3, 6}))));
  // Index tensors are int64 or int32.
  ValueRef xu = b.input(type(DType::UInt8, {3, 4}));
  EXPECT_TRUE(rejects(b.op("aten::gather", {"self", "dim", "index", "sparse_grad"},
                           {x, int64_t{0}, xu, false}, type(DType::Float32, {3, 4}))));
  // Output sizes that disagree with the arguments.
  EXPECT_TRUE(rejects(b.op("aten::slice.Tensor", {"self", "dim", "start", "end", "step"},
                           {x, int64_t{1}, int64_t{0}, int64_t{3}, int64_t{1}},
                           type(DType::Float32, {3, 2}))));
  // A supported one, for contrast.
  EXPECT_FALSE(rejects(b.op("aten::slice.Tensor", {"self", "dim", "start", "end", "step"},
                            {x, int64_t{1}, int64_t{0}, int64_t{3}, int64_t{1}},
                            type(DType::Float32, {3, 3}, {4, 1}))));
}

}  // namespace
}  // namespace ember::sched
