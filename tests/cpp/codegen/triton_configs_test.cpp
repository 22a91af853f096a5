#include "codegen/triton/triton_configs.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "loop/parser.h"

namespace ember::codegen {
namespace {

TritonKernel emit(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::string why;
  auto t = emit_triton(loop::parse_kernel(s.str()), &why);
  EXPECT_TRUE(t.has_value()) << why;
  return *t;
}

TEST(TritonConfigs, LargePointwiseKernelsTryNarrowerBlocksAndMoreWarps) {
  TritonKernel t = emit(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/gelu_bias.loop");
  std::vector<TritonConfig> big = triton_configs(t, {{"m", 4096}, {"n", 1024}});
  std::vector<TritonConfig> want{{1024, 4}, {512, 4}, {256, 4}, {1024, 8}};
  EXPECT_EQ(big, want);
  EXPECT_EQ(triton_programs(t, {{"m", 4096}, {"n", 1024}}, 256), 16384);
  // The default first, always: what triton_launch picks, with 4 warps.
  EXPECT_EQ(big.front().block, triton_launch(t, {{"m", 4096}, {"n", 1024}}).block);
}

TEST(TritonConfigs, SmallKernelsLaunchWithTheDefaultOnly) {
  TritonKernel t = emit(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/gelu_bias.loop");
  std::vector<TritonConfig> small = triton_configs(t, {{"m", 100}, {"n", 33}});
  ASSERT_EQ(small.size(), 1u);
  EXPECT_EQ(small[0], (TritonConfig{1024, 4}));
}

TEST(TritonConfigs, RowKernelsKeepTheirBlockAndVaryWarps) {
  TritonKernel t = emit(std::string(EMBER_LOOP_GOLDEN_DIR) + "/softmax.loop");
  std::vector<TritonConfig> wide = triton_configs(t, {{"s0", 4096}, {"s1", 1024}});
  EXPECT_EQ(wide, (std::vector<TritonConfig>{{1024, 4}, {1024, 8}}));
  std::vector<TritonConfig> narrow = triton_configs(t, {{"s0", 65536}, {"s1", 100}});
  EXPECT_EQ(narrow, (std::vector<TritonConfig>{{128, 4}, {128, 2}}));
  for (const TritonConfig& c : narrow) {
    EXPECT_EQ(triton_programs(t, {{"s0", 65536}, {"s1", 100}}, c.block), 65536);
  }
}

}  // namespace
}  // namespace ember::codegen
