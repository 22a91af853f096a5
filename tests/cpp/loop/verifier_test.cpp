#include "loop/verifier.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "loop/parser.h"
#include "support/error.h"
#include "test_util.h"

namespace ember::loop {
namespace {

using Messages = std::vector<std::string>;

/// y[i] = x[i] for i in [0, n).
Kernel build_copy() {
  return parse_kernel(
      "kernel copy(n) {\n"
      "  input x : f32[n] strides [1]\n"
      "  output y : f32[n] strides [1]\n"
      "  for (i, 0, n) {\n"
      "    y[i] = x[i]\n"
      "  }\n"
      "}\n");
}

/// The copy kernel with its body replaced.
Kernel with_body(Stmt body) {
  Kernel k = build_copy();
  k.body = std::move(body);
  return k;
}

TEST(VerifyKernel, AcceptsValidKernels) {
  EXPECT_EQ(verify_kernel(build_copy()), Messages{});
  for (const char* name : {"softmax.loop", "layer_norm.loop", "argmax_pad.loop"}) {
    EXPECT_EQ(verify_kernel(parse_kernel(testing::read_golden(name))), Messages{}) << name;
  }
  EXPECT_NO_THROW(check_kernel(build_copy()));
}

TEST(VerifyKernel, ReportsAVariableUsedOutsideItsLoop) {
  Expr x_i = Load::make(DType::Float32, "x", var("i"));
  Stmt loop = For::make(var("i"), idx(0), size("n"), ForKind::Serial, Block::make({}));
  EXPECT_EQ(verify_kernel(with_body(Block::make({loop, Store::make("y", idx(0), x_i)}))),
            Messages{"variable 'i' is used outside the For or Let that binds it"});
}

TEST(VerifyKernel, ReportsAVariableBoundAgainInsideItsScope) {
  Stmt inner = For::make(var("i"), idx(0), idx(2), ForKind::Serial, Block::make({}));
  EXPECT_EQ(
      verify_kernel(with_body(For::make(var("i"), idx(0), size("n"), ForKind::Serial, inner))),
      Messages{"variable 'i' is bound again inside its own scope"});
}

TEST(VerifyKernel, ReportsAVariableUsedWithAnotherType) {
  Stmt s = Store::make("y", Var::make("t", DType::Int64), Var::make("t2", DType::Float32));
  Stmt let = Let::make(
      Var::make("t", DType::Int64), idx(0),
      Let::make(
          Var::make("t2", DType::Float32), f32(1),
          Store::make("y", idx(0), Cast::make(DType::Float32, Var::make("t2", DType::Int64)))));
  EXPECT_EQ(verify_kernel(with_body(Block::make({let}))),
            Messages{"variable 't2' is used as i64 but bound as f32"});
  (void)s;
}

TEST(VerifyKernel, ReportsUndeclaredSizeVariables) {
  Stmt s = Store::make("y", size("m"), f32(0));
  EXPECT_EQ(verify_kernel(with_body(s)),
            Messages{"size variable 'm' is not declared by kernel 'copy'"});
}

TEST(VerifyKernel, ReportsAVariableNamedLikeASize) {
  Stmt loop = For::make(var("n"), idx(0), idx(1), ForKind::Serial, Block::make({}));
  EXPECT_EQ(verify_kernel(with_body(loop)),
            Messages{"variable 'n' has the name of a size variable"});
}

TEST(VerifyKernel, ReportsUndeclaredBuffers) {
  Stmt s = Block::make({Store::make("z", idx(0), Load::make(DType::Float32, "w", idx(0))),
                        Accumulate::make(ReduceOp::Sum, {"acc"}, idx(0), {f32(1)})});
  EXPECT_EQ(verify_kernel(with_body(s)),
            (Messages{"load from undeclared buffer 'w'", "store to undeclared buffer 'z'",
                      "accumulate sum into undeclared buffer 'acc'"}));
}

TEST(VerifyKernel, ReportsBufferDtypeMismatches) {
  Stmt s = Block::make({Store::make("y", idx(0), f64(1)),
                        Store::make("y", idx(0), Load::make(DType::Float64, "x", idx(0)))});
  EXPECT_EQ(verify_kernel(with_body(s)), (Messages{"store of f64 to 'y', which holds f32",
                                                   "load from 'x' as f64 but the buffer holds f32",
                                                   "store of f64 to 'y', which holds f32"}));
}

TEST(VerifyKernel, ReportsAccumulatorsOfTheWrongType) {
  Stmt s = Allocate::make(
      "v", DType::Float32, {idx(1)},
      Allocate::make("k", DType::Int32, {idx(1)},
                     Accumulate::make(ReduceOp::ArgMax, {"v", "k"}, idx(0), {f64(1), idx(3)})));
  EXPECT_EQ(verify_kernel(with_body(s)),
            (Messages{"accumulate argmax into 'v', which holds f32; expected f64",
                      "accumulate argmax into 'k', which holds i32; expected i64"}));
}

TEST(VerifyKernel, ReportsWritesToInputs) {
  Stmt s = Block::make(
      {Store::make("x", idx(0), f32(0)), Accumulate::make(ReduceOp::Max, {"x"}, idx(0), {f32(1)})});
  EXPECT_EQ(verify_kernel(with_body(s)),
            (Messages{"store to input buffer 'x'", "accumulate max into input buffer 'x'"}));
}

TEST(VerifyKernel, ReportsAllocationsThatShadowABuffer) {
  EXPECT_EQ(
      verify_kernel(with_body(Allocate::make("y", DType::Float32, {idx(1)}, Block::make({})))),
      Messages{"alloc 'y' reuses the name of a buffer in scope"});
}

TEST(VerifyKernel, ReportsBadParameters) {
  Kernel k = build_copy();
  k.size_vars.push_back("n");
  k.buffers.push_back(k.buffers[0]);
  k.buffers.push_back({"z", BufferRole::Temp, DType::Float32, {var("i")}, {}});
  EXPECT_EQ(verify_kernel(k),
            (Messages{"size variable 'n' is declared twice", "buffer 'x' is declared twice",
                      "buffer 'z' has 1 sizes but 0 strides",
                      "variable 'i' is used outside the For or Let that binds it (in buffer 'z' "
                      "shape)"}));
}

TEST(CheckKernel, ThrowsAnInternalErrorWithTheKernelText) {
  Kernel k = with_body(Store::make("z", idx(0), f32(0)));
  try {
    check_kernel(k);
    FAIL() << "expected a throw";
  } catch (const InternalError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("invalid loop kernel 'copy':\n  store to undeclared buffer 'z'"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("  z[0] = f32(0)"), std::string::npos) << msg;
  }
}

TEST(VerifyKernel, ChecksThatComboPartsAreIndependent) {
  const char* text =
      "kernel two(n) combo {\n"
      "  input x : f32[n] strides [1]\n"
      "  output y : f32[n] strides [1]\n"
      "  output z : f32[n] strides [1]\n"
      "  for (i, 0, n) {\n"
      "    y[i] = x[i]\n"
      "  }\n"
      "  for (i, 0, n) {\n"
      "    z[i] = %s[i]\n"
      "  }\n"
      "}\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, text, "x");
  Kernel ok = parse_kernel(buf);
  EXPECT_TRUE(ok.combo);
  EXPECT_EQ(ok.parts().size(), 2u);
  EXPECT_EQ(verify_kernel(ok), Messages{});
  // The second part reads what the first writes: not independent.
  std::snprintf(buf, sizeof buf, text, "y");
  EXPECT_EQ(verify_kernel(parse_kernel(buf)),
            Messages{"combo part 1 touches buffer 'y', which part 0 writes"});
  Kernel plain = parse_kernel(buf);
  plain.combo = false;  // in order, the same statements are a valid kernel
  EXPECT_EQ(verify_kernel(plain), Messages{});
}

}  // namespace
}  // namespace ember::loop
