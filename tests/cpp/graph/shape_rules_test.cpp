#include "graph/shape_rules.h"

#include <gtest/gtest.h>

#include "graph/printer.h"
#include "graph_builders.h"
#include "support/error.h"
#include "sym/eval.h"
#include "sym/printer.h"

namespace ember::graph {
namespace {

using test::make_op;

TensorType typed(Dims sizes, Dims strides = {}) {
  TensorType t;
  t.strides = strides.empty() ? contiguous_strides(sizes) : strides;
  t.sizes = std::move(sizes);
  return t;
}

/// The concrete type of `t` at the hints of `g`'s symbols.
TensorType at_hints(const Graph& g, const TensorType& t) {
  TensorType out = t;
  auto values = [&](const Dims& d) {
    Dims r;
    for (const DimExpr& e : d) r.push_back(sym::hint(e.expr(), g.symbols));
    return r;
  };
  out.sizes = values(t.sizes);
  out.strides = values(t.strides);
  out.storage_offset = sym::hint(t.storage_offset.expr(), g.symbols);
  return out;
}

struct RuleTest : ::testing::Test {
  Graph g;
  sym::GuardRecorder guards{g.symbols};
  DimExpr s0 = g.symbols.create_size(6, "a");
  DimExpr s1 = g.symbols.create_size(4, "b");

  /// The rule's result types for `op(args)`, `expected` being their types at the hints (what the
  /// meta kernel would give).
  std::vector<TensorType> apply(const char* name, const char* overload,
                                std::vector<std::string> arg_names, std::vector<Arg> args,
                                const std::vector<TensorType>& expected_symbolic) {
    OpInfo op = make_op(name, overload, arg_names, std::vector<bool>(arg_names.size(), false));
    op.kind = op_kind(op.name);
    std::vector<TensorType> concrete;
    for (const TensorType& t : expected_symbolic) concrete.push_back(at_hints(g, t));
    return symbolic_result_types(g, op, args, concrete, guards);
  }
  ValueRef input(TensorType t) { return ValueRef{g.add_input(std::move(t), InputKind::User)}; }
};

TEST_F(RuleTest, ViewInfersMinusOneExactly) {
  ValueRef x = input(typed({2, s0, 4, 8}));
  TensorType want = typed({2, s0, 32});
  auto out = apply("aten::view", "", {"self", "size"}, {x, int_list_arg({2, s0, -1})}, {want});
  EXPECT_EQ(type_str(out[0]), "f32[2, s0, 32] cpu");
}

TEST_F(RuleTest, BroadcastGuardsEqualityOfSymbols) {
  ValueRef a = input(typed({s0, 3}));
  ValueRef b = input(typed({s1, 1}));
  // s0 and s1 are 6 and 4 at their hints: these would not broadcast, so use equal hints.
  Graph h;
  sym::GuardRecorder hg{h.symbols};
  DimExpr t0 = h.symbols.create_size(5, "a"), t1 = h.symbols.create_size(5, "b");
  ValueRef ha{h.add_input(typed({t0, 3}), InputKind::User)};
  ValueRef hb{h.add_input(typed({t1, 1}), InputKind::User)};
  OpInfo op = make_op("aten::add", "Tensor", {"self", "other", "alpha"}, {false, false, true});
  op.kind = op_kind(op.name);
  auto out = symbolic_result_types(h, op, {ha, hb, int64_t{1}}, {typed({5, 3})}, hg);
  EXPECT_EQ(type_str(out[0]), "f32[s0, 3] cpu");
  ASSERT_EQ(hg.guards().size(), 1u);
  EXPECT_EQ(sym::print(hg.guards()[0]), "s0 == s1");
  (void)a;
  (void)b;
}

TEST_F(RuleTest, SliceClampsWithGuardsOnlyWhereRangesDoNotDecide) {
  ValueRef x = input(typed({s0, 8}));
  // x[1:s0] needs no guard; x[:3] needs s0 >= 3 decided (true at the hint 6).
  auto a = apply("aten::slice", "Tensor", {"self", "dim", "start", "end", "step"},
                 {x, int64_t{0}, int64_t{1}, int_arg(s0), int64_t{1}}, {[&] {
                   TensorType t = typed({s0 - 1, 8}, {8, 1});
                   t.storage_offset = 8;
                   return t;
                 }()});
  EXPECT_EQ(type_str(a[0]), "f32[s0 - 1, 8]+8 cpu");
  EXPECT_TRUE(guards.guards().empty());
  auto b = apply("aten::slice", "Tensor", {"self", "dim", "start", "end", "step"},
                 {x, int64_t{0}, int64_t{0}, int64_t{3}, int64_t{1}}, {typed({3, 8})});
  EXPECT_EQ(type_str(b[0]), "f32[3, 8] cpu");
  ASSERT_EQ(guards.guards().size(), 1u);
  EXPECT_EQ(sym::print(guards.guards()[0]), "not (3 > s0)");
}

TEST_F(RuleTest, DiagonalOfSymbolsDecidesItsLengthThroughGuards) {
  // s0 = 6, s1 = 4 at the hints: diagonal(x[s0, s1], offset=1) has min(s0, s1 - 1) = s1 - 1
  // elements, stride s1 + 1, from element 1 (a guard decides s0 > s1 - 1).
  ValueRef x = input(typed({s0, s1}));
  auto out = apply("aten::diagonal", "", {"self", "offset", "dim1", "dim2"},
                   {x, int64_t{1}, int64_t{0}, int64_t{1}}, {[&] {
                     TensorType t = typed({s1 - 1}, {s1 + 1});
                     t.storage_offset = 1;
                     return t;
                   }()});
  EXPECT_EQ(type_str(out[0]), "f32[s1 - 1]{s1 + 1}+1 cpu");
  ASSERT_EQ(guards.guards().size(), 1u);
  // Offset -2 of a square [s0, s0]: length s0 - 2, from row 2.
  ValueRef y = input(typed({s0, s0}));
  auto neg = apply("aten::diagonal", "", {"self", "offset", "dim1", "dim2"},
                   {y, int64_t{-2}, int64_t{0}, int64_t{1}}, {[&] {
                     TensorType t = typed({s0 - 2}, {s0 + 1});
                     t.storage_offset = s0 * 2;
                     return t;
                   }()});
  EXPECT_EQ(type_str(neg[0]), "f32[s0 - 2]{s0 + 1}+(s0*2) cpu");
}

TEST_F(RuleTest, SelectWrapsASymbolicNegativeIndex) {
  // x.select(0, 1 - s0) is row 1 (eager wraps a negative index by the size).
  ValueRef x = input(typed({s0, 8}));
  auto out = apply("aten::select", "int", {"self", "dim", "index"},
                   {x, int64_t{0}, int_arg(DimExpr(1) - s0)}, {[&] {
                     TensorType t = typed({8});
                     t.storage_offset = 8;
                     return t;
                   }()});
  EXPECT_EQ(type_str(out[0]), "f32[8]+8 cpu");
}

TEST_F(RuleTest, EfficientAttentionPadsItsLogSumExpToMultiplesOf32) {
  // CUDA's memory-efficient attention: the output, and a log-sum-exp of [B, H, L rounded up to
  // 32] when asked for (of length 0 otherwise); the seeds keep their types.
  ValueRef q = input(typed({s0, 4, s1, 16}));
  ValueRef k = input(typed({s0, 4, s1, 16}));
  ValueRef v = input(typed({s0, 4, s1, 8}));
  TensorType seed = typed({});
  seed.dtype = DType::Int64;
  for (bool lse : {true, false}) {
    DimExpr padded = lse ? DimExpr(32) : DimExpr(0);  // s1 = 4 at its hint
    auto out = apply("aten::_scaled_dot_product_efficient_attention", "",
                     {"query", "key", "value", "attn_bias", "compute_log_sumexp", "dropout_p",
                      "is_causal", "scale"},
                     {q, k, v, NoneArg{}, lse, 0.0, true, NoneArg{}},
                     {typed({s0, 4, s1, 8}), typed({s0, 4, padded}), seed, seed});
    ASSERT_EQ(out.size(), 4u);
    EXPECT_EQ(type_str(out[0]), "f32[s0, 4, s1, 8] cpu");
    EXPECT_EQ(type_str(out[1]), lse ? "f32[s0, 4, ((s1 + 31) // 32)*32] cpu" : "f32[s0, 4, 0] cpu");
    EXPECT_EQ(type_str(out[2]), "i64[] cpu");
  }
}

TEST_F(RuleTest, FlashAttentionKeepsItsOutputLayoutAndReturnsItsLengthsAsInts) {
  // CUDA's flash attention: the output in the [B, L, H, E] memory order its kernel writes, the
  // log-sum-exp [B, H, L]; the seeds and the unused results keep their types; the lengths it
  // returns as ints are the query's and the key's.
  ValueRef q = input(typed({s0, 4, s1, 16}, {DimExpr(s1 * 64), 16, 64, 1}));
  ValueRef k = input(typed({s0, 4, s1, 16}));
  ValueRef v = input(typed({s0, 4, s1, 8}));
  TensorType seed = typed({2});
  seed.dtype = DType::Int64;
  TensorType empty = typed({0});
  const std::vector<std::string> names = {
      "query", "key", "value", "dropout_p", "is_causal", "return_debug_mask", "scale"};
  auto out = apply("aten::_scaled_dot_product_flash_attention", "", names,
                   {q, k, v, 0.0, true, false, NoneArg{}},
                   {typed({s0, 4, s1, 8}, {DimExpr(s1 * 32), 8, 32, 1}), typed({s0, 4, s1}), seed,
                    empty, empty});
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(type_str(out[0]), "f32[s0, 4, s1, 8]{s1*32, 8, 32, 1} cpu");
  EXPECT_EQ(type_str(out[1]), "f32[s0, 4, s1] cpu");
  EXPECT_EQ(type_str(out[2]), "i64[2] cpu");

  OpInfo op = make_op("aten::_scaled_dot_product_flash_attention", "", names,
                      std::vector<bool>(names.size(), false));
  const std::vector<Arg> args{q, k, v, 0.0, true, false, NoneArg{}};
  EXPECT_EQ(symbolic_int_results(g, op, args, {4, 4}), (std::vector<DimExpr>{s1, s1}));
  EXPECT_THROW(symbolic_int_results(g, op, args, {4, 5}), Unsupported);  // not the key's length
  OpInfo other = make_op("aten::nonsense", "", {"self"}, {false});
  EXPECT_THROW(symbolic_int_results(g, other, {q}, {6}), Unsupported);

  // A debug mask [B, H, L, S] is not built.
  EXPECT_THROW(apply("aten::_scaled_dot_product_flash_attention", "", names,
                     {q, k, v, 0.0, true, true, NoneArg{}},
                     {typed({s0, 4, s1, 8}, {DimExpr(s1 * 32), 8, 32, 1}), typed({s0, 4, s1}), seed,
                      empty, typed({s0, 4, s1, s1})}),
               Unsupported);
}

TEST_F(RuleTest, UnfoldIsAViewOfWindowsAndGroupNormHasStatisticsPerGroup) {
  // unfold(x, 1, 3, 2) over [s1, 8]{8, 1}: (s1 - 3) // 2 + 1 windows of 3, strides [16, 1, 8].
  ValueRef x = input(typed({s1, 8}));
  auto windows = apply("aten::unfold", "", {"self", "dimension", "size", "step"},
                       {x, int64_t{1}, int64_t{3}, int64_t{2}}, {typed({s1, 3, 3}, {8, 2, 1})});
  EXPECT_EQ(type_str(windows[0]), "f32[s1, 3, 3]{8, 2, 1} cpu");
  auto rows =
      apply("aten::unfold", "", {"self", "dimension", "size", "step"},
            {x, int64_t{0}, int64_t{2}, int64_t{1}}, {typed({DimExpr(s1 - 1), 8, 2}, {8, 1, 8})});
  EXPECT_EQ(type_str(rows[0]), "f32[s1 - 1, 8, 2]{8, 1, 8} cpu");

  // native_group_norm(x [s0, 4, s1], N, C, HxW, group 2): mean and rstd [s0, 2].
  ValueRef y = input(typed({s0, 4, s1}));
  auto out = apply("aten::native_group_norm", "",
                   {"input", "weight", "bias", "N", "C", "HxW", "group", "eps"},
                   {y, NoneArg{}, NoneArg{}, s0, int64_t{4}, s1, int64_t{2}, 1e-5},
                   {typed({s0, 4, s1}), typed({s0, 2}), typed({s0, 2})});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(type_str(out[0]), "f32[s0, 4, s1] cpu");
  EXPECT_EQ(type_str(out[1]), "f32[s0, 2] cpu");
}

TEST_F(RuleTest, UpsamplingGivesTheOutputSizeAndItsBackwardTheInputSize) {
  ValueRef x = input(typed({s0, 3, s1}));
  const DimExpr doubled = s1 * 2;
  auto up = apply("aten::upsample_linear1d", "", {"self", "output_size", "align_corners", "scales"},
                  {x, int_list_arg({doubled}), false, 2.0}, {typed({s0, 3, doubled})});
  EXPECT_EQ(type_str(up[0]), "f32[s0, 3, s1*2] cpu");
  ValueRef g = input(typed({s0, 3, doubled}));
  auto back = apply("aten::upsample_linear1d_backward", "",
                    {"grad_output", "output_size", "input_size", "align_corners", "scales"},
                    {g, int_list_arg({doubled}), int_list_arg({s0, 3, s1}), false, 2.0},
                    {typed({s0, 3, s1})});
  EXPECT_EQ(type_str(back[0]), "f32[s0, 3, s1] cpu");
}

TEST_F(RuleTest, ARuleThatDisagreesWithTheMetaKernelIsUnsupported) {
  ValueRef x = input(typed({s0, 8}));
  OpInfo op =
      make_op("aten::sum", "dim_IntList", {"self", "dim", "keepdim"}, {false, false, false});
  op.kind = op_kind(op.name);
  // The meta kernel says [7]; the rule says [s0] = [6] at the hint.
  EXPECT_THROW(
      symbolic_result_types(g, op, {x, std::vector<int64_t>{1}, false}, {typed({7})}, guards),
      Unsupported);
}

TEST_F(RuleTest, DenseStridesFollowTheConcreteOrder) {
  EXPECT_EQ(dense_strides_like({s0, 3, 4}, {12, 4, 1}), (Dims{12, 4, 1}));
  // channels-last-like order: dim 1 innermost.
  EXPECT_EQ(dense_strides_like({2, 3, s0}, {18, 1, 3}), (Dims{DimExpr(s0 * 3), 1, 3}));
}

}  // namespace
}  // namespace ember::graph
