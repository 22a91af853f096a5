// Scatter kernels (sched/scatter.h) scheduled by fusion.h: the golden kernel, the interpreter on
// duplicates, negative and out-of-range indices, and which nodes qualify.
#include "sched/scatter.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
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
using graph::ValueRef;
using test::Builder;
using test::expect_golden;
using test::type;

std::vector<loop::Scalar> f32s(std::vector<double> v) {
  std::vector<loop::Scalar> out;
  for (double x : v) out.push_back(loop::Scalar::of_float(loop::DType::Float32, x));
  return out;
}
std::vector<loop::Scalar> i64s(std::vector<int64_t> v) {
  std::vector<loop::Scalar> out;
  for (int64_t x : v) out.push_back(loop::Scalar::of_int(loop::DType::Int64, x));
  return out;
}

// x.index_put((i,), v, accumulate=True) on x [4, 2], i [3], v [3, 2]: one kernel that checks i,
// copies x, then adds v's rows serially at the wrapped indices.
TEST(ScatterKernel, IndexPutAccumulatesDuplicatesInOrder) {
  Builder b;
  ValueRef x = b.input(type(DType::Float32, {4, 2}));
  ValueRef i = b.input(type(DType::Int64, {3}));
  ValueRef v = b.input(type(DType::Float32, {3, 2}));
  ValueRef y = b.op("aten::index_put", {"self", "indices", "values", "accumulate"},
                    {x, graph::ValueList{{i.id}}, v, true}, type(DType::Float32, {4, 2}));
  b.g.outputs = {y.id};
  ASSERT_TRUE(is_scatter_kernel_node(b.g, b.g.nodes[0]));
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 1u);
  const KernelGroup& group = plan.groups[0];
  EXPECT_TRUE(group.index_status);
  expect_golden(group.kernel, "index_put_accumulate.loop");

  for (int64_t bad : {0, 4, -5}) {
    loop::BufferMap bufs;
    bufs["buf0"] = f32s({0, 1, 2, 3, 4, 5, 6, 7});
    bufs["buf1"] = i64s({-1, 3, bad});
    bufs["buf2"] = f32s({10, 20, 30, 40, 50, 60});
    loop::run_kernel(group.kernel, {}, bufs);
    EXPECT_EQ(bufs["status"][0].i, bad != 0) << bad;
    if (bad == 0) {  // row 3 gets v[0] and v[1]; row 0 gets v[2]
      EXPECT_EQ(bufs["buf3"][0].f, 0 + 50);
      EXPECT_EQ(bufs["buf3"][6].f, 6 + 10 + 30);
      EXPECT_EQ(bufs["buf3"][7].f, 7 + 20 + 40);
      EXPECT_EQ(bufs["buf3"][2].f, 2);
    }
  }
}

// x.scatter(1, i, s): the last of duplicate indices wins; negative indices are out of range.
TEST(ScatterKernel, ScatterLastWriteWins) {
  Builder b;
  ValueRef x = b.input(type(DType::Float32, {2, 3}));
  ValueRef i = b.input(type(DType::Int64, {2, 2}));
  ValueRef s = b.input(type(DType::Float32, {2, 4}));
  ValueRef y = b.op("aten::scatter.src", {"self", "dim", "index", "src"}, {x, int64_t{1}, i, s},
                    type(DType::Float32, {2, 3}));
  b.g.outputs = {y.id};
  Plan plan = schedule_graph(b.g);
  ASSERT_EQ(plan.groups.size(), 1u);
  const loop::Kernel& k = plan.groups[0].kernel;
  ASSERT_TRUE(loop::verify_kernel(k).empty()) << loop::print_kernel(k);
  loop::BufferMap bufs;
  bufs["buf0"] = f32s({0, 1, 2, 3, 4, 5});
  bufs["buf1"] = i64s({2, 2, 0, 1});
  bufs["buf2"] = f32s({10, 11, 12, 13, 20, 21, 22, 23});
  loop::run_kernel(k, {}, bufs);
  EXPECT_EQ(bufs["status"][0].i, 0);
  std::vector<double> want = {0, 1, 11, 20, 21, 5};
  for (size_t j = 0; j < want.size(); ++j) EXPECT_EQ(bufs["buf3"][j].f, want[j]) << j;
  bufs["buf1"] = i64s({2, -1, 0, 1});
  loop::run_kernel(k, {}, bufs);
  EXPECT_EQ(bufs["status"][0].i, 1);
}

// What stays an ATen call: sources of another dtype, index_add with alpha, scatter_reduce mean.
TEST(ScatterKernel, RejectsFormsItDoesNotReproduce) {
  Builder b;
  ValueRef x = b.input(type(DType::Float32, {4}));
  ValueRef i = b.input(type(DType::Int64, {3}));
  ValueRef s64 = b.input(type(DType::Float64, {3}));
  ValueRef s = b.input(type(DType::Float32, {3}));
  b.op("aten::scatter.src", {"self", "dim", "index", "src"}, {x, int64_t{0}, i, s64},
       type(DType::Float32, {4}));
  b.op("aten::index_add", {"self", "dim", "index", "source", "alpha"},
       {x, int64_t{0}, i, s, int64_t{2}}, type(DType::Float32, {4}));
  b.op("aten::scatter_reduce.two", {"self", "dim", "index", "src", "reduce", "include_self"},
       {x, int64_t{0}, i, s, std::string("mean"), true}, type(DType::Float32, {4}));
  b.op("aten::index_add", {"self", "dim", "index", "source", "alpha"},
       {x, int64_t{0}, i, s, int64_t{1}}, type(DType::Float32, {4}));
  EXPECT_FALSE(is_scatter_kernel_node(b.g, b.g.nodes[0]));
  EXPECT_FALSE(is_scatter_kernel_node(b.g, b.g.nodes[1]));
  EXPECT_FALSE(is_scatter_kernel_node(b.g, b.g.nodes[2]));
  EXPECT_TRUE(is_scatter_kernel_node(b.g, b.g.nodes[3]));
}

}  // namespace
}  // namespace ember::sched
