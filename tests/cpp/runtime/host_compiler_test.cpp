#include "runtime/host_compiler.h"
#include "runtime/kernel_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "support/error.h"

namespace ember::runtime {
namespace {

class HostCompiler : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ember-hc-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    ember::runtime::configure_cache(dir_.string());
    clear_memory_cache();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

using AddFn = int (*)(int, int);
const char* kAdd = "extern \"C\" int ember_add(int a, int b) { return a + b; }\n";

TEST_F(HostCompiler, CompilesLoadsAndCallsAKernel) {
  auto lib = compile_and_load(kAdd, HostCompileOptions::from());
  auto add = reinterpret_cast<AddFn>(lib->symbol("ember_add"));
  EXPECT_EQ(add(2, 40), 42);
}

TEST_F(HostCompiler, SecondRequestInTheProcessIsAMemoryHit) {
  auto opts = HostCompileOptions::from();
  auto a = compile_and_load(kAdd, opts);
  HostCompilerStats before = host_compiler_stats();
  auto b = compile_and_load(kAdd, opts);
  HostCompilerStats after = host_compiler_stats();
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_EQ(after.memory_hits, before.memory_hits + 1);
}

TEST_F(HostCompiler, AFreshProcessLoadsFromDiskWithoutCompiling) {
  auto opts = HostCompileOptions::from();
  compile_and_load(kAdd, opts);
  clear_memory_cache();  // what a new process sees: only the disk cache
  HostCompilerStats before = host_compiler_stats();
  auto lib = compile_and_load(kAdd, opts);
  HostCompilerStats after = host_compiler_stats();
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_EQ(after.disk_hits, before.disk_hits + 1);
  EXPECT_EQ(reinterpret_cast<AddFn>(lib->symbol("ember_add"))(1, 1), 2);
}

TEST_F(HostCompiler, KeyDependsOnSourceAndFlagsAndIsStable) {
  auto opts = HostCompileOptions::from();
  EXPECT_EQ(cache_key(kAdd, opts), cache_key(kAdd, opts));
  EXPECT_NE(cache_key(kAdd, opts), cache_key(std::string(kAdd) + " ", opts));
  auto o2 = opts;
  o2.flags.push_back("-DX=1");
  EXPECT_NE(cache_key(kAdd, opts), cache_key(kAdd, o2));
}

TEST_F(HostCompiler, CompilesSeveralSourcesInParallel) {
  std::vector<std::string> sources;
  for (int i = 0; i < 4; ++i) {
    sources.push_back("extern \"C\" int k" + std::to_string(i) + "() { return " +
                      std::to_string(i * 10) + "; }\n");
  }
  auto libs = compile_and_load_all(sources, HostCompileOptions::from());
  ASSERT_EQ(libs.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    auto f = reinterpret_cast<int (*)()>(libs[i]->symbol("k" + std::to_string(i)));
    EXPECT_EQ(f(), i * 10);
  }
}

// Sources that start with the prelude compile their rest against the prelude precompiled once.
TEST_F(HostCompiler, PreludeIsPrecompiledOnceAndIncluded) {
  auto opts = HostCompileOptions::from();
  opts.prelude = "#include <cmath>\ninline int ember_twice(int x) { return 2 * x; }\n";
  const std::string a =
      opts.prelude + "extern \"C\" int ember_f(int x) { return ember_twice(x); }\n";
  const std::string b =
      opts.prelude + "extern \"C\" int ember_g(int x) { return ember_twice(x) + 1; }\n";
  HostCompilerStats before = host_compiler_stats();
  auto la = compile_and_load(a, opts);
  auto lb = compile_and_load(b, opts);
  HostCompilerStats after = host_compiler_stats();
  EXPECT_EQ(after.compiles, before.compiles + 3);  // the prelude once, then each source
  EXPECT_EQ(reinterpret_cast<int (*)(int)>(la->symbol("ember_f"))(4), 8);
  EXPECT_EQ(reinterpret_cast<int (*)(int)>(lb->symbol("ember_g"))(4), 9);
  bool found = false;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_ / "prelude")) {
    found |= e.path().filename() == "ember_prelude.h.gch";
  }
  EXPECT_TRUE(found);
  // The kept source is the whole one.
  std::ifstream in(std::filesystem::path(cache_dir()) / (cache_key(a, opts) + ".cpp"));
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, a);
}

TEST_F(HostCompiler, ACompileErrorIsUnsupportedWithTheCompilerOutput) {
  try {
    compile_and_load("this is not C++", HostCompileOptions::from());
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("host compiler failed"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("error"), std::string::npos);
  }
}

}  // namespace
}  // namespace ember::runtime
