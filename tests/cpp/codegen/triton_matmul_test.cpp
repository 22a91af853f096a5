#include "codegen/triton/triton_matmul.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "codegen/triton/triton_emitter.h"
#include "loop/parser.h"

namespace ember::codegen {
namespace {

using loop::DType;

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A bf16 linear layer's product: x [4096, 768] @ w.t() (w [3072, 768]) + bias [3072].
MatmulSpec linear() {
  MatmulSpec s;
  s.m = 4096;
  s.n = 3072;
  s.k = 768;
  s.a_dtype = s.b_dtype = s.out_dtype = DType::BFloat16;
  s.a_strides = {0, 768, 1};
  s.b_strides = {0, 1, 768};  // w transposed
  s.out_strides = {0, 3072, 1};
  s.bias_dtype = DType::BFloat16;
  s.bias_strides = {0, 0, 1};
  return s;
}

TEST(TritonMatmul, TemplateMatchesGoldenAndIsDeterministic) {
  const std::string text = emit_triton_matmul(linear(), "ember_mm");
  EXPECT_EQ(text, emit_triton_matmul(linear(), "ember_mm"));
  const std::string body = text.substr(text.rfind("@triton.jit\ndef ember_mm("));
  const std::string path = std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/linear_bf16.matmul.golden";
  if (std::getenv("EMBER_ACCEPT_GOLDEN") != nullptr) std::ofstream(path) << body;
  EXPECT_EQ(body, read(path)) << "regenerate with EMBER_ACCEPT_GOLDEN=1 and review the diff";
}

// A ResNet's 3x3 convolution at batch 1 as an implicit GEMM: x [1, 64, 56, 56] channels-last,
// the weight [64, 64, 3, 3] channels-last as [576, 64], padding 1; rows (oh, ow), columns
// (kh, kw, c).
MatmulSpec conv3x3() {
  MatmulSpec s;
  s.m = 56 * 56;
  s.n = 64;
  s.k = 9 * 64;
  s.a_dtype = s.b_dtype = s.out_dtype = DType::BFloat16;
  s.b_strides = {0, 1, 576};
  s.out_strides = {0, 64, 1};
  ConvOperand v;
  v.channels = 64, v.height = 56, v.width = 56, v.kh = 3, v.kw = 3, v.out_h = 56, v.out_w = 56;
  v.pad_h = v.pad_w = 1;
  v.x_strides = {0, 1, 56 * 64, 64};
  s.conv = v;
  return s;
}

TEST(TritonMatmul, AConvolutionIsAnImplicitGemmOfItsGatheredInput) {
  MatmulSpec s = conv3x3();
  std::string why;
  ASSERT_TRUE(matmul_supported(s, &why)) << why;
  const std::string text = emit_triton_matmul(s, "ember_mm");
  EXPECT_EQ(text, emit_triton_matmul(s, "ember_mm"));
  const std::string body = text.substr(text.rfind("@triton.jit\ndef ember_mm("));
  const std::string path = std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/conv3x3_bf16.matmul.golden";
  if (std::getenv("EMBER_ACCEPT_GOLDEN") != nullptr) std::ofstream(path) << body;
  EXPECT_EQ(body, read(path)) << "regenerate with EMBER_ACCEPT_GOLDEN=1 and review the diff";
  // The padding read as zeros, through the mask; no strided A pointers.
  EXPECT_NE(body.find("(ih >= 0) & (ih < 56)"), std::string::npos) << body;
  EXPECT_EQ(body.find("a_ptrs"), std::string::npos) << body;
  // Grouped (two groups of 32 channels): group b's input channels from b * 32.
  MatmulSpec grouped = s;
  grouped.batch = 2;
  grouped.n = 32;
  grouped.k = 9 * 32;
  grouped.conv->channels = 32;
  grouped.b_strides = {32 * 288, 1, 288};
  grouped.out_strides = {32, 64, 1};
  ASSERT_TRUE(matmul_supported(grouped, &why)) << why;
  EXPECT_NE(emit_triton_matmul(grouped, "k").find("a_base = b_a + r_n * 0 + pid_b * 32"),
            std::string::npos)
      << emit_triton_matmul(grouped, "k");
  // Rows that are not whole images, or columns that are not the window's: not a convolution.
  MatmulSpec bad = s;
  bad.m = 56 * 56 + 1;
  EXPECT_FALSE(matmul_supported(bad, &why));
  EXPECT_EQ(why, "a convolution's sizes");
  bad = s;
  bad.k = 64;
  EXPECT_FALSE(matmul_supported(bad, &why));
}

// GPT-2's MLP: the product's [4096, 3072] viewed [4, 1024, 3072] and a gelu, fused as the
// template's epilogue: the tile's offsets in C recover the nest's variables, the product is read
// as acc_c (rounded to bf16 first, as eager stores it), and only the gelu's result is stored.
TEST(TritonMatmul, APointwiseKernelAfterTheProductIsItsEpilogue) {
  const char* gelu = R"(kernel gelu_after() {
  input c : bf16[4096, 3072] strides [3072, 1]
  input r : bf16[4, 1024, 3072] strides [3145728, 3072, 1]
  output y : bf16[4, 1024, 3072] strides [3145728, 3072, 1]
  for (i0, 0, 4) parallel {
    for (i1, 0, 1024) {
      for (i2, 0, 3072) vectorized {
        let t = cast<f32>(c[((((i0 * 1024) + i1) * 3072) + i2)]) {
          y[(((i0 * 3145728) + (i1 * 3072)) + i2)] = cast<bf16>(((t * f32(0.5)) + cast<f32>(r[(((i0 * 3145728) + (i1 * 3072)) + i2)])))
        }
      }
    }
  }
})";
  std::string why;
  std::optional<std::string> body = emit_triton_epilogue(loop::parse_kernel(gelu), "c", &why);
  ASSERT_TRUE(body.has_value()) << why;
  EXPECT_EQ(body->find("tl.load(b_c"), std::string::npos) << *body;
  EXPECT_NE(body->find("acc_c"), std::string::npos) << *body;
  MatmulSpec s = linear();
  s.bias_dtype.reset();
  MatmulEpilogue ep{{"c", "r", "y"}, *body};
  const std::string text = emit_triton_matmul(s, "ember_mm", &ep);
  EXPECT_EQ(text, emit_triton_matmul(s, "ember_mm", &ep));
  EXPECT_EQ(text.find("tl.store(b_c"), std::string::npos);
  const std::string fn = text.substr(text.rfind("@triton.jit\ndef ember_mm("));
  const std::string path =
      std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/linear_bf16_epilogue.matmul.golden";
  if (std::getenv("EMBER_ACCEPT_GOLDEN") != nullptr) std::ofstream(path) << fn;
  EXPECT_EQ(fn, read(path)) << "regenerate with EMBER_ACCEPT_GOLDEN=1 and review the diff";

  // The product read at another element (transposed) is no epilogue.
  std::string transposed = gelu;
  const std::string read_c = "c[((((i0 * 1024) + i1) * 3072) + i2)]";
  transposed.replace(transposed.find(read_c), read_c.size(),
                     "c[((i2 * 4096) + ((i0 * 1024) + i1))]");
  transposed.replace(transposed.find("[4096, 3072] strides [3072, 1]"), 30,
                     "[4096, 3072] strides [1, 4096]");
  EXPECT_FALSE(emit_triton_epilogue(loop::parse_kernel(transposed), "c", &why).has_value());
  EXPECT_NE(why.find("another element"), std::string::npos) << why;
}

TEST(TritonMatmul, F32UsesTf32OnlyWhenAllowedAndLargeOffsetsUseI64) {
  MatmulSpec s = linear();
  s.a_dtype = s.b_dtype = s.out_dtype = DType::Float32;
  s.bias_dtype.reset();
  EXPECT_NE(emit_triton_matmul(s, "k").find("input_precision=\"ieee\""), std::string::npos);
  s.allow_tf32 = true;
  EXPECT_NE(emit_triton_matmul(s, "k").find("input_precision=\"tf32\""), std::string::npos);
  EXPECT_EQ(emit_triton_matmul(s, "k").find(".to(tl.int64)"), std::string::npos);
  s.batch = 1024;  // 1024 x 4096 x 3072 outputs: past 2^31
  s.out_strides = {4096 * 3072, 3072, 1};
  EXPECT_NE(emit_triton_matmul(s, "k").find("tl.arange(0, BLOCK_M).to(tl.int64)"),
            std::string::npos);
}

TEST(TritonMatmul, ConfigsFitTheProblemAndGridCoversIt) {
  MatmulSpec s = linear();
  std::vector<MatmulConfig> cs = matmul_configs(s);
  ASSERT_FALSE(cs.empty());
  EXPECT_EQ(cs[0], (MatmulConfig{128, 128, 32, 8, 8, 3}));
  auto g = matmul_grid(s, cs[0]);
  EXPECT_EQ(g[0], 32 * 24);
  EXPECT_EQ(g[1], 1);
  // A small problem: tiles no larger than its next powers of two (at least 16), no duplicates.
  MatmulSpec small = linear();
  small.m = 20;
  small.n = 9;
  small.k = 40;
  for (const MatmulConfig& c : matmul_configs(small)) {
    EXPECT_LE(c.block_m, 32);
    EXPECT_EQ(c.block_n, 16);
    EXPECT_LE(c.block_k, 64);
  }
  EXPECT_EQ(matmul_grid(small, matmul_configs(small)[0])[0], 1);
  // A launch-bound product's configurations: 64 x 64 first, no 128 x 128 tile.
  std::vector<MatmulConfig> launch_bound = matmul_configs(s, /*small=*/true);
  ASSERT_EQ(launch_bound.size(), 4u);
  EXPECT_EQ(launch_bound[0], (MatmulConfig{64, 64, 64, 8, 4, 3}));
  for (const MatmulConfig& c : launch_bound) EXPECT_LT(c.block_m * c.block_n, 128 * 128);
}

TEST(TritonMatmul, SaysWhatItDoesNotCompute) {
  std::string why;
  MatmulSpec s = linear();
  s.b_dtype = DType::Float32;
  EXPECT_FALSE(matmul_supported(s, &why));
  EXPECT_EQ(why, "operands of other dtypes");
  s = linear();
  s.k = 0;
  EXPECT_FALSE(matmul_supported(s, &why));
  s = linear();
  s.a_dtype = s.b_dtype = DType::Float64;
  EXPECT_FALSE(matmul_supported(s, &why));
  EXPECT_TRUE(matmul_supported(linear(), &why));
}

}  // namespace
}  // namespace ember::codegen
