#include "codegen/triton/triton_emitter.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "codegen/triton/triton_configs.h"
#include "loop/parser.h"
#include "loop/printer.h"

namespace ember::codegen {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The kernel function of a generated module (after its helpers).
std::string kernel_function(const TritonKernel& t) {
  size_t at = t.source.rfind("@triton.jit\ndef " + t.name + "(");
  EXPECT_NE(at, std::string::npos);
  return t.source.substr(at);
}

void expect_golden(const std::string& text, const std::string& golden) {
  std::string path = std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/" + golden;
  if (std::getenv("EMBER_ACCEPT_GOLDEN") != nullptr) std::ofstream(path) << text;
  EXPECT_EQ(text, read(path)) << "regenerate with EMBER_ACCEPT_GOLDEN=1 and review the diff";
}

TEST(TritonEmitter, PointwiseKernelIsFlatDeterministicAndMatchesGolden) {
  loop::Kernel k =
      loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/gelu_bias.loop"));
  std::string why;
  auto t = emit_triton(k, &why);
  ASSERT_TRUE(t.has_value()) << why;
  EXPECT_EQ(t->form, TritonKernel::Form::Flat);
  EXPECT_EQ(t->block_param, "XBLOCK");
  auto again = emit_triton(loop::parse_kernel(loop::print_kernel(k)), &why);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(t->source, again->source);
  expect_golden(kernel_function(*t), "gelu_bias.triton.golden");
  TritonLaunch l = triton_launch(*t, {{"m", 100}, {"n", 33}});
  EXPECT_EQ(l.block, 1024);
  EXPECT_EQ(l.programs, 4);  // ceil(3300 / 1024)
}

TEST(TritonEmitter, ComboKernelSplitsItsProgramsAmongItsParts) {
  const std::string text = read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/combo.loop");
  loop::Kernel k = loop::parse_kernel(text);
  ASSERT_TRUE(k.combo);
  EXPECT_EQ(loop::print_kernel(k), text);
  std::string why;
  auto t = emit_triton(k, &why);
  ASSERT_TRUE(t.has_value()) << why;
  EXPECT_EQ(t->form, TritonKernel::Form::Combo);
  EXPECT_EQ(t->block_param, "XBLOCK");
  ASSERT_EQ(t->part_extents.size(), 4u);
  // The two parts that scale a matrix by s are one function, called twice.
  const std::string& src = t->source;
  EXPECT_NE(src.find("def ember_combo_p0("), std::string::npos);
  EXPECT_EQ(src.find("def ember_combo_p1("), std::string::npos);
  EXPECT_NE(src.find("def ember_combo_p2("), std::string::npos);
  EXPECT_NE(src.find("def ember_combo_p3("), std::string::npos);
  expect_golden(src.substr(src.find("\n\n@triton.jit\ndef ember_combo_p0(")),
                "combo.triton.golden");
  auto again = emit_triton(loop::parse_kernel(loop::print_kernel(k)), &why);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(t->source, again->source);
  // m = 100: two parts of 800 elements in blocks of 1024, one of 5, one of scalars.
  TritonLaunch l = triton_launch(*t, {{"m", 100}});
  EXPECT_EQ(l.block, 1024);
  EXPECT_EQ(l.programs, 4);
  EXPECT_EQ(triton_programs(*t, {{"m", 100}}, 256), 4 + 4 + 1 + 1);
  // Not an epilogue of a matrix product.
  EXPECT_FALSE(emit_triton_epilogue(k, "x", &why).has_value());
}

TEST(TritonEmitter, SoftmaxIsARowKernelWithThreeBlockLoops) {
  loop::Kernel k = loop::parse_kernel(read(std::string(EMBER_LOOP_GOLDEN_DIR) + "/softmax.loop"));
  std::string why;
  auto t = emit_triton(k, &why);
  ASSERT_TRUE(t.has_value()) << why;
  EXPECT_EQ(t->form, TritonKernel::Form::Rows);
  expect_golden(kernel_function(*t), "softmax.triton.golden");
  TritonLaunch l = triton_launch(*t, {{"s0", 7}, {"s1", 100}});
  EXPECT_EQ(l.programs, 7);
  EXPECT_EQ(l.block, 128);
}

// A row's sum accumulated into an output buffer and read back by the epilogue. One thread stores
// a program's single element, so the epilogue must not read it from memory without a barrier
// (the other warps would read a stale value on a GPU): the stored value is forwarded instead.
TEST(TritonEmitter, AnElementStoredByTheProgramIsForwardedToItsReads) {
  loop::Kernel k =
      loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/rms_norm_mean_out.loop"));
  std::string why;
  auto t = emit_triton(k, &why);
  ASSERT_TRUE(t.has_value()) << why;
  const std::string body = kernel_function(*t);
  EXPECT_EQ(body.find("tl.load(b_mean"), std::string::npos) << body;
  EXPECT_NE(body.find("tl.store(b_mean"), std::string::npos) << body;
  expect_golden(body, "rms_norm_mean_out.triton.golden");
}

// A private output (nothing reads it after the kernel): its stores go when the program reads
// none of it back from memory, and the launcher need not allocate it; a looped softmax reads its
// output back (the exps stored, then scaled), so there the stores stay.
TEST(TritonEmitter, StoresToAPrivateBufferAreDroppedWhenNothingReadsThemBack) {
  loop::Kernel k =
      loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/rms_norm_mean_out.loop"));
  std::string why;
  auto t = emit_triton(k, &why, {"mean"});
  ASSERT_TRUE(t.has_value()) << why;
  const std::string body = kernel_function(*t);
  EXPECT_EQ(body.find("tl.store(b_mean"), std::string::npos) << body;
  EXPECT_NE(body.find("tl.store(b_y"), std::string::npos) << body;
  EXPECT_EQ(t->unused_buffers, std::vector<std::string>{"mean"});
  EXPECT_TRUE(emit_triton(k, &why)->unused_buffers.empty());

  // Exps kept in y, then scaled in place: with rows of s1 (symbolic) the blocks loop, and the
  // second loop reads y back from memory.
  loop::Kernel kept = loop::parse_kernel(R"(kernel kept(s0, s1) {
  input x : f32[s0, s1] strides [s1, 1]
  output y : f32[s0, s1] strides [s1, 1]
  for (i, 0, s0) parallel {
    for (r, 0, s1) vectorized {
      y[((i * s1) + r)] = exp(x[((i * s1) + r)])
    }
    for (r, 0, s1) vectorized {
      y[((i * s1) + r)] = (y[((i * s1) + r)] * f32(2))
    }
  }
})");
  auto looped = emit_triton(kept, &why, {"y"});
  ASSERT_TRUE(looped.has_value()) << why;
  EXPECT_NE(kernel_function(*looped).find("tl.store(b_y"), std::string::npos);
  EXPECT_NE(kernel_function(*looped).find("tl.load(b_y"), std::string::npos);
  EXPECT_TRUE(looped->unused_buffers.empty());
}

// Many short rows (a layer norm over 96 channels, ConvNeXt's): a program handles a tile of 16
// rows as [16, RBLOCK] blocks reduced along axis 1, the rows past the end masked; a row's stored
// mean is forwarded to its reads as in a one-row program.
TEST(TritonEmitter, ShortRowsShareAProgramAsARowTile) {
  loop::Kernel k =
      loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/layer_norm_rows.loop"));
  std::string why;
  auto t = emit_triton(k, &why);
  ASSERT_TRUE(t.has_value()) << why;
  EXPECT_EQ(t->form, TritonKernel::Form::Rows);
  EXPECT_EQ(t->rows_per_program, 16);
  TritonLaunch l = triton_launch(*t, {});
  EXPECT_EQ(l.block, 128);
  EXPECT_EQ(l.programs, 32768 / 16);  // kMinRowTilePrograms or more
  const std::string body = kernel_function(*t);
  EXPECT_EQ(body.find("tl.load(b_mean"), std::string::npos) << body;
  expect_golden(body, "layer_norm_rows.triton.golden");
  // The rows per program are a constexpr (XBLOCK) tuned with the warps: 16, 32 and 8 rows.
  std::vector<TritonConfig> cs = triton_configs(*t, {});
  std::vector<TritonConfig> want{{128, 4, 16}, {128, 8, 16}, {128, 4, 32},
                                 {128, 8, 32}, {128, 4, 8},  {128, 8, 8}};
  EXPECT_EQ(cs, want);
  EXPECT_EQ(triton_programs(*t, {}, 128, 32), 32768 / 32);
  // Fewer rows keep a program each rather than leave the GPU idle; an accumulator in memory
  // (rms_norm_mean_out) keeps one row per program too.
  std::string few = read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/layer_norm_rows.loop");
  for (size_t at; (at = few.find("32768")) != std::string::npos;) few.replace(at, 5, "1024");
  EXPECT_EQ(emit_triton(loop::parse_kernel(few), &why)->rows_per_program, 1);
}

// Without persistent rows the epilogue loop reads, at other lanes, what an earlier loop stored:
// a barrier first.
TEST(TritonEmitter, AReadOfWhatTheProgramStoredInABlockWaitsForABarrier) {
  loop::Kernel k = loop::parse_kernel(read(std::string(EMBER_LOOP_GOLDEN_DIR) + "/softmax.loop"));
  CompileOptions::Triton looped;
  looped.persistent = false;
  std::string why;
  auto t = emit_triton(k, &why, {}, looped);
  ASSERT_TRUE(t.has_value()) << why;
  const std::string body = kernel_function(*t);
  // softmax.loop reads only x: no barrier.
  EXPECT_EQ(body.find("tl.debug_barrier()"), std::string::npos) << body;
  loop::Kernel two = loop::parse_kernel(
      "kernel two(n) {\n"
      "  input x : f32[8, n] strides [n, 1]\n"
      "  output y : f32[8, n] strides [n, 1]\n"
      "  for (i, 0, 8) parallel {\n"
      "    for (r, 0, n) {\n"
      "      y[((i * n) + r)] = exp(x[((i * n) + r)])\n"
      "    }\n"
      "    for (r, 0, n) {\n"
      "      y[((i * n) + r)] = (y[((i * n) + r)] * f32(2))\n"
      "    }\n"
      "  }\n"
      "}\n");
  auto t2 = emit_triton(two, &why);
  ASSERT_TRUE(t2.has_value()) << why;
  const std::string b2 = kernel_function(*t2);
  const size_t barrier = b2.find("tl.debug_barrier()");
  ASSERT_NE(barrier, std::string::npos) << b2;
  EXPECT_LT(b2.find("tl.store(b_y"), barrier) << b2;
  EXPECT_LT(barrier, b2.find("tl.load(b_y")) << b2;
}

// A column reduction (a loop over rows around a block loop folding a lane-indexed array) is
// emitted as 2D tiles: rows along axis 0, folded along it into the array.
TEST(TritonEmitter, ColumnReductionsFoldTwoDimensionalTiles) {
  loop::Kernel k =
      loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/column_sum.loop"));
  std::string why;
  auto t = emit_triton(k, &why);
  ASSERT_TRUE(t.has_value()) << why;
  const std::string body = kernel_function(*t);
  EXPECT_NE(body.find("tl.arange(0, (4096 // RBLOCK))[:, None]"), std::string::npos) << body;
  EXPECT_EQ(body.find("for v_r in range"), std::string::npos) << body;  // no serial row loop
  expect_golden(body, "column_sum.triton.golden");
  TritonLaunch l = triton_launch(*t, {});
  EXPECT_EQ(l.programs, 20);
  EXPECT_EQ(l.block, 256);
}

// A gather checks each index it reads with a device-side assert (check_index, compiled with
// Triton's debug option on); the check is a helper of the module's prelude.
TEST(TritonEmitter, IndexChecksAreDeviceAssertsAndMatchGolden) {
  loop::Kernel k =
      loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/embedding_checked.loop"));
  std::string why;
  auto t = emit_triton(k, &why);
  ASSERT_TRUE(t.has_value()) << why;
  EXPECT_EQ(t->form, TritonKernel::Form::Flat);
  expect_golden(kernel_function(*t), "embedding_checked.triton.golden");
  EXPECT_NE(t->source.find("def _ember_check_index(x, lo, hi):\n    tl.device_assert("),
            std::string::npos);
}

// A copy to channels-last reads along w and writes along c: 2D tiles over (c, w), each read and
// written along its contiguous dim, the other loops (n, h) one scalar each per program.
TEST(TritonEmitter, ATransposingReadRunsAsTwoDimensionalTiles) {
  loop::Kernel k =
      loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/to_channels_last.loop"));
  std::string why;
  auto t = emit_triton(k, &why);
  ASSERT_TRUE(t.has_value()) << why;
  EXPECT_EQ(t->form, TritonKernel::Form::Tiled);
  expect_golden(kernel_function(*t), "to_channels_last.triton.golden");
  TritonLaunch l = triton_launch(*t, {});
  EXPECT_EQ(l.block, 32);
  EXPECT_EQ(l.programs,
            8 * 2 * 25);  // n x ceil(64 / 32) x ceil(28 * 28 / 32): h and w are one loop
  // A plain pointwise kernel (reads and writes along the same dim) stays flat.
  auto flat = emit_triton(
      loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/gelu_bias.loop")), &why);
  ASSERT_TRUE(flat.has_value());
  EXPECT_EQ(flat->form, TritonKernel::Form::Flat);
}

TEST(TritonEmitter, RefusesWhatItCannotExpressWithAReason) {
  std::string why;
  EXPECT_FALSE(
      emit_triton(loop::parse_kernel(read(std::string(EMBER_LOOP_GOLDEN_DIR) + "/layer_norm.loop")),
                  &why)
          .has_value());
  EXPECT_EQ(why, "the welford reduction");
  EXPECT_FALSE(emit_triton(loop::parse_kernel("kernel nest(n) {\n"
                                              "  output y : f32[n, n] strides [n, 1]\n"
                                              "  for (i, 0, n) {\n"
                                              "    y[(i * n)] = f32(0)\n"
                                              "    for (j, 0, n) {\n"
                                              "      for (k, 0, n) {\n"
                                              "        y[((i * n) + j)] = f32(1)\n"
                                              "      }\n"
                                              "    }\n"
                                              "  }\n"
                                              "}\n"),
                           &why)
                   .has_value());
  // j runs serially around the block loop over k, which writes one element per lane.
  EXPECT_EQ(why, "a store of one element inside a block");
  EXPECT_FALSE(emit_triton(loop::parse_kernel("kernel big(n) {\n"
                                              "  input x : f32[n, 2000] strides [2000, 1]\n"
                                              "  output y : f32[2000] strides [1]\n"
                                              "  alloc acc : f32[2000] {\n"
                                              "    for (c, 0, 2000) {\n"
                                              "      acc[c] = f32(0)\n"
                                              "    }\n"
                                              "  }\n"
                                              "}\n"),
                           &why)
                   .has_value());
  EXPECT_EQ(why, "an allocation of more than 1024 elements");
}

TEST(TritonEmitter, IndicesAreI32WhenEveryOffsetProvablyFits) {
  auto source = [](const std::string& rows) {
    std::string text = "kernel k() {\n  input x : f32[" + rows + ", 4] strides [4, 1]\n" +
                       "  output y : f32[" + rows + ", 4] strides [4, 1]\n  for (i, 0, " + rows +
                       ") {\n    for (j, 0, 4) {\n      y[((i * 4) + j)] = x[((i * 4) + j)]\n" +
                       "    }\n  }\n}\n";
    std::string why;
    auto t = emit_triton(loop::parse_kernel(text), &why);
    EXPECT_TRUE(t.has_value()) << why;
    return *t;
  };
  TritonKernel small = source("1000");
  EXPECT_TRUE(small.int32_indices);
  EXPECT_EQ(small.source.find("program_id(0).to(tl.int64)"), std::string::npos);
  TritonKernel big = source("300000000");  // 1.2e9 elements: offsets past 2^30
  EXPECT_FALSE(big.int32_indices);
  EXPECT_NE(big.source.find("program_id(0).to(tl.int64)"), std::string::npos);
  // Symbolic sizes: i64.
  std::string why;
  EXPECT_FALSE(
      emit_triton(
          loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/gelu_bias.loop")), &why)
          ->int32_indices);
}

TEST(TritonEmitter, BlockSizeIsAPowerOfTwoBetween16AndTheMaximum) {
  EXPECT_EQ(triton_block_size(1, 1024), 16);
  EXPECT_EQ(triton_block_size(17, 1024), 32);
  EXPECT_EQ(triton_block_size(1024, 1024), 1024);
  EXPECT_EQ(triton_block_size(5000, 1024), 1024);
}

// libdevice takes tensors: a literal operand of a libdevice call (pow.Scalar's base, Adam's
// beta ** step) is a typed scalar, not a Python float (Triton's interpreter raised on it).
TEST(TritonEmitter, LiteralOperandsOfLibdeviceCallsAreTypedScalars) {
  loop::Kernel k =
      loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/pow_scalar_base.loop"));
  std::string why;
  auto t = emit_triton(k, &why);
  ASSERT_TRUE(t.has_value()) << why;
  const std::string body = kernel_function(*t);
  EXPECT_NE(body.find("libdevice.pow(tl.full([], 0.89999997615814209, tl.float32), "),
            std::string::npos)
      << body;
  expect_golden(body, "pow_scalar_base.triton.golden");
}

// A Select's condition masks the reads under its arms, and a nested Select's condition holds
// such reads: each condition is named once (`sel<k> = ...`) and the masks name it, so the source
// grows with the nesting's size, not exponentially (a float floor_divide lowered as nested
// Selects around a 0-dim tensor's reads was 73 MB of Triton source).
TEST(TritonEmitter, SelectConditionsAreNamedOnce) {
  loop::Kernel k =
      loop::parse_kernel(read(std::string(EMBER_CODEGEN_GOLDEN_DIR) + "/nested_select.loop"));
  std::string why;
  auto t = emit_triton(k, &why);
  ASSERT_TRUE(t.has_value()) << why;
  expect_golden(kernel_function(*t), "nested_select.triton.golden");

  // Twenty levels, each condition reading the scalar that every level's arms read.
  std::string e = "d[0]";
  for (int level = 0; level < 20; ++level) {
    e = "select((x[i] < (d[0] * f32(" + std::to_string(level + 1) + "))), (x[i] / d[0]), " + e +
        ")";
  }
  loop::Kernel deep = loop::parse_kernel(
      "kernel deep_select(n) {\n  input d : f32[] strides []\n  input x : f32[n] strides [1]\n"
      "  output y : f32[n] strides [1]\n  for (i, 0, n) parallel {\n    y[i] = " +
      e + "\n  }\n}\n");
  auto td = emit_triton(deep, &why);
  ASSERT_TRUE(td.has_value()) << why;
  EXPECT_LT(td->source.size(), 60000u) << td->source.size();
}

}  // namespace
}  // namespace ember::codegen
