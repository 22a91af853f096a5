#include "loop/equality.h"

#include <gtest/gtest.h>

#include <cmath>

#include "loop/parser.h"
#include "test_util.h"

namespace ember::loop {
namespace {

TEST(StructurallyEqual, ComparesTreesNotIdentity) {
  Expr a = var("i") * 4 + size("n");
  Expr b = var("i") * 4 + size("n");
  EXPECT_FALSE(a.same_as(b));
  EXPECT_TRUE(structurally_equal(a, b));
  EXPECT_EQ(structural_hash(a), structural_hash(b));
}

TEST(StructurallyEqual, SeesEveryField) {
  Expr base = var("i") + idx(1);
  EXPECT_FALSE(structurally_equal(base, var("j") + idx(1)));
  EXPECT_FALSE(structurally_equal(base, var("i") + idx(2)));
  EXPECT_FALSE(structurally_equal(base, var("i") - idx(1)));
  EXPECT_FALSE(structurally_equal(base, size("i") + idx(1)));
  EXPECT_FALSE(structurally_equal(Var::make("i", DType::Int32), var("i")));
  EXPECT_FALSE(structurally_equal(Load::make(DType::Float32, "x", idx(0)),
                                  Load::make(DType::Float32, "y", idx(0))));
  EXPECT_FALSE(
      structurally_equal(Call::make(CallFn::Exp, {f32(1)}), Call::make(CallFn::Log, {f32(1)})));
  EXPECT_FALSE(structurally_equal(Expr(), base));
  EXPECT_TRUE(structurally_equal(Expr(), Expr()));
}

TEST(StructurallyEqual, ComparesFloatsByBits) {
  EXPECT_TRUE(structurally_equal(f32(std::nan("")), f32(std::nan(""))));
  EXPECT_FALSE(structurally_equal(f32(0.0), f32(-0.0)));
  EXPECT_FALSE(structurally_equal(f32(1.0), f64(1.0)));
  EXPECT_NE(structural_hash(f32(0.0)), structural_hash(f32(-0.0)));
}

TEST(StructuralHash, DistinguishesNearbyTrees) {
  EXPECT_NE(structural_hash(var("i") - var("j")), structural_hash(var("j") - var("i")));
  EXPECT_NE(structural_hash(idx(1)), structural_hash(bool_imm(true)));
  Stmt s1 = Store::make("y", idx(0), f32(1));
  Stmt s2 = Store::make("z", idx(0), f32(1));
  EXPECT_NE(structural_hash(s1), structural_hash(s2));
  EXPECT_NE(structural_hash(Block::make({s1, s2})), structural_hash(Block::make({s2, s1})));
}

TEST(StructuralHash, IsStableAcrossRuns) {
  // A fixed value: the hash keys on-disk caches, so it must not change between processes.
  // Update it only on purpose, when the IR or the hashing changes.
  EXPECT_EQ(structural_hash(var("i") * 4 + idx(1)), structural_hash(var("i") * 4 + idx(1)));
  EXPECT_EQ(structural_hash(idx(0)), 0x3485edbae813565dULL) << std::hex << structural_hash(idx(0));
}

TEST(StructurallyEqual, ComparesKernels) {
  std::string text = testing::read_golden("softmax.loop");
  Kernel a = parse_kernel(text);
  Kernel b = parse_kernel(text);
  EXPECT_TRUE(structurally_equal(a, b));
  EXPECT_EQ(structural_hash(a), structural_hash(b));
  b.buffers[1].strides[0] = idx(7);
  EXPECT_FALSE(structurally_equal(a, b));
  EXPECT_NE(structural_hash(a), structural_hash(b));
  Kernel c = parse_kernel(text);
  c.buffers[0].role = BufferRole::InOut;
  EXPECT_FALSE(structurally_equal(a, c));
  Kernel d = parse_kernel(text);
  d.name = "other";
  EXPECT_NE(structural_hash(a), structural_hash(d));
}

}  // namespace
}  // namespace ember::loop
