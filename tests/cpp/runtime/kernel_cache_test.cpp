// The kernel cache as a trusted store (kernel_cache.h): what it refuses, rebuilds and evicts.
#include "runtime/kernel_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/host_compiler.h"
#include "support/error.h"

namespace ember::runtime {
namespace {

namespace fs = std::filesystem;

class KernelCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ember-kc-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    ember::runtime::configure_cache(dir_.string());
    clear_memory_cache();
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path entry(const std::string& source) {
    return fs::path(cache_dir()) / (cache_key(source, HostCompileOptions::from()) + ".so");
  }
  fs::path dir_;
};

using IntFn = int (*)();
std::string returning(int v) {
  return "extern \"C\" int ember_value() { return " + std::to_string(v) + "; }\n";
}
int call(const std::shared_ptr<KernelLibrary>& lib) {
  return reinterpret_cast<IntFn>(lib->symbol("ember_value"))();
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0);
  return st.st_mode & 0777;
}

TEST_F(KernelCache, DirectoriesAreCreatedPrivate) {
  compile_and_load(returning(1), HostCompileOptions::from());
  EXPECT_EQ(mode_of(dir_), 0700u);
  EXPECT_EQ(mode_of(dir_ / "kernels"), 0700u);
  fs::path so = entry(returning(1));
  EXPECT_TRUE(fs::exists(so));
  EXPECT_TRUE(fs::exists(so.string() + ".sum"));
  std::string why;
  EXPECT_TRUE(verify_entry(so, &why)) << why;
}

// A library planted under an entry's name (a foreign object with the old sidecar) is refused:
// its constructor never runs, and the entry is rebuilt.
TEST_F(KernelCache, APlantedObjectIsRefusedAndRebuilt) {
  const std::string source = returning(7);
  compile_and_load(source, HostCompileOptions::from());
  fs::path so = entry(source);
  fs::path marker = dir_ / "planted-ran";
  const std::string planted =
      "#include <cstdio>\n__attribute__((constructor)) static void p() {"
      " std::fopen(\"" +
      marker.string() + "\", \"w\"); }\n" + returning(666);
  auto other = compile_and_load(planted, HostCompileOptions::from());  // a real .so
  ASSERT_TRUE(fs::exists(marker));
  fs::remove(marker);
  // A new file (a new inode), as a planting process would make: writing over the loaded one in
  // place would change this process's mapping of it.
  fs::remove(so);
  fs::copy_file(other->path(), so);
  clear_memory_cache();  // a new process
  HostCompilerStats before = host_compiler_stats();
  auto lib = compile_and_load(source, HostCompileOptions::from());
  EXPECT_EQ(call(lib), 7);
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_EQ(host_compiler_stats().compiles, before.compiles + 1);
}

TEST_F(KernelCache, TruncatedEmptyAndSidecarlessEntriesAreRebuilt) {
  const std::string source = returning(3);
  for (int damage = 0; damage < 3; ++damage) {
    clear_memory_cache();
    compile_and_load(source, HostCompileOptions::from());
    fs::path so = entry(source);
    // Damaged copies under the entry's name (new files: the loaded one stays as it is).
    fs::path copy = so.string() + ".copy";
    fs::copy_file(so, copy);
    fs::remove(so);
    fs::rename(copy, so);
    if (damage == 0) fs::resize_file(so, fs::file_size(so) / 2);
    if (damage == 1) fs::resize_file(so, 0);
    if (damage == 2) fs::remove(so.string() + ".sum");
    clear_memory_cache();
    HostCompilerStats before = host_compiler_stats();
    auto lib = compile_and_load(source, HostCompileOptions::from());
    EXPECT_EQ(call(lib), 3) << "damage " << damage;
    EXPECT_EQ(host_compiler_stats().compiles, before.compiles + 1) << "damage " << damage;
    std::string why;
    EXPECT_TRUE(verify_entry(so, &why)) << why;
  }
}

TEST_F(KernelCache, AWholeEntryIsADiskHit) {
  const std::string source = returning(5);
  compile_and_load(source, HostCompileOptions::from());
  clear_memory_cache();
  HostCompilerStats before = host_compiler_stats();
  EXPECT_EQ(call(compile_and_load(source, HostCompileOptions::from())), 5);
  HostCompilerStats after = host_compiler_stats();
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_EQ(after.disk_hits, before.disk_hits + 1);
}

TEST_F(KernelCache, ADirectoryOthersCanWriteIsNotUsed) {
  fs::create_directories(dir_);
  ::chmod(dir_.c_str(), 0777);
  std::string why;
  EXPECT_FALSE(is_trusted_dir(dir_, &why));
  EXPECT_NE(why.find("other users"), std::string::npos) << why;
  auto lib = compile_and_load(returning(9), HostCompileOptions::from());
  EXPECT_EQ(call(lib), 9);
  EXPECT_FALSE(fs::exists(dir_ / "kernels"));  // nothing was written there
  EXPECT_NE(cache_root(), dir_.string());
  bool warned = false;
  for (const std::string& w : warnings_issued()) {
    warned |= w.find(dir_.string()) != std::string::npos &&
              w.find("EMBER_CACHE_DIR") != std::string::npos;
  }
  EXPECT_TRUE(warned);
}

TEST_F(KernelCache, ADirectoryOfAnotherUserIsNotUsed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  fs::create_directories(dir_);
  ::chmod(dir_.c_str(), 0700);
  ASSERT_EQ(::chown(dir_.c_str(), 12345, 12345), 0);
  std::string why;
  EXPECT_FALSE(is_trusted_dir(dir_, &why));
  EXPECT_NE(why.find("another user"), std::string::npos) << why;
  EXPECT_EQ(call(compile_and_load(returning(4), HostCompileOptions::from())), 4);
  EXPECT_NE(cache_root(), dir_.string());
}

TEST_F(KernelCache, TheLeastRecentlyUsedEntriesAreEvictedPastTheCap) {
  auto opts = HostCompileOptions::from();
  std::vector<fs::path> entries;
  for (int i = 0; i < 4; ++i) {
    compile_and_load(returning(100 + i), opts);
    entries.push_back(entry(returning(100 + i)));
  }
  // Oldest first, then entry 0 used again: it is the most recent.
  auto t = fs::file_time_type::clock::now() - std::chrono::hours(10);
  for (int i = 0; i < 4; ++i) fs::last_write_time(entries[i], t + std::chrono::hours(i));
  touch_entry(entries[0]);
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(cache_dir())) total += fs::file_size(e.path());
  EXPECT_GT(evict_to_cap(cache_dir(), total - 1), 0);
  EXPECT_TRUE(fs::exists(entries[0]));
  EXPECT_FALSE(fs::exists(entries[1]));
  EXPECT_FALSE(fs::exists(entries[1].string() + ".sum"));
}

TEST_F(KernelCache, KeyCoversTheCpuFeatures) {
#if defined(__x86_64__) && defined(__linux__)
  EXPECT_NE(cpu_features().find("sse2"), std::string::npos);
#endif
  auto opts = HostCompileOptions::from();
  auto o2 = opts;
  o2.key_parts.push_back("torch 0.0");
  EXPECT_NE(cache_key("x", opts), cache_key("x", o2));
}

TEST_F(KernelCache, AFailedCompileLeavesNoFilesAndWarnsOnce) {
  auto opts = HostCompileOptions::from();
  opts.compiler = "/nonexistent/ember-cxx";
  EXPECT_THROW(compile_and_load(returning(1), opts), Unsupported);
  EXPECT_THROW(compile_and_load(returning(2), opts), Unsupported);
  int files = 0;
  for (const auto& e : fs::directory_iterator(cache_dir())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 0);
  int warned = 0;
  for (const std::string& w : warnings_issued()) {
    warned += w.find("/nonexistent/ember-cxx") != std::string::npos &&
              w.find("EMBER_CXX") != std::string::npos;
  }
  EXPECT_EQ(warned, 1);
}

}  // namespace
}  // namespace ember::runtime
