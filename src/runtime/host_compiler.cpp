#include "runtime/host_compiler.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "runtime/kernel_cache.h"
#include "support/error.h"
#include "support/hash.h"

namespace ember::runtime {

namespace fs = std::filesystem;

namespace {

std::mutex g_mutex;
std::map<std::string, std::weak_ptr<KernelLibrary>> g_loaded;  // key -> library
std::map<std::string, std::string> g_compiler_ids;             // compiler -> --version output
std::atomic<int64_t> g_compiles{0};
std::atomic<int64_t> g_disk_hits{0};
std::atomic<int64_t> g_memory_hits{0};

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The compiler's `--version` output, so a compiler upgrade invalidates the cache.
std::string compiler_id(const std::string& compiler) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_compiler_ids.find(compiler);
  if (it != g_compiler_ids.end()) return it->second;
  std::string out;
  if (FILE* p = popen((quote(compiler) + " --version 2>&1").c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
    pclose(p);
  }
  g_compiler_ids.emplace(compiler, out);
  return out;
}

/// Loads entry `so`, or returns nullptr (the entry removed) when dlopen refuses it.
std::shared_ptr<KernelLibrary> load(const std::string& key, const fs::path& so) {
  void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    warn_once("dlopen:" + key, "the kernel cache entry " + so.string() + " could not be loaded (" +
                                   (err ? err : "?") + "); it was removed and is compiled again");
    remove_entry(so);
    return nullptr;
  }
  auto lib = std::make_shared<KernelLibrary>(handle, so.string());
  std::lock_guard<std::mutex> lock(g_mutex);
  g_loaded[key] = lib;
  return lib;
}

std::shared_ptr<KernelLibrary> find_loaded(const std::string& key) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_loaded.find(key);
  if (it == g_loaded.end()) return nullptr;
  return it->second.lock();
}

// The precompiled prelude of `options` as a header path to -include (its .gch beside it), built
// on first use; empty when it cannot be built (sources then compile whole).
std::string precompiled_prelude(const HostCompileOptions& options) {
  static std::mutex mu;
  static std::map<std::string, std::string> built;  // key -> header path ("" = failed)
  Hasher h;
  h.str("ember-prelude-v1").str(options.compiler).str(compiler_id(options.compiler));
  for (const std::string& f : options.flags) h.str(f);
  h.str(options.prelude);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.digest()));
  std::lock_guard<std::mutex> lock(mu);
  auto it = built.find(hex);
  if (it != built.end()) return it->second;
  // Beside the kernel cache (`<root>/kernels`): `<root>/prelude`, which is checked as the
  // kernel cache is (the compiler reads a .gch from it into every kernel).
  const std::string configured = prelude_dir();
  fs::path dir =
      (!configured.empty() ? fs::path(configured) : fs::path(cache_subdir("prelude"))) / hex;
  fs::path header = dir / "ember_prelude.h";
  fs::path gch = dir / "ember_prelude.h.gch";
  std::error_code ec;
  if (!fs::exists(gch)) {
    fs::create_directories(dir, ec);
    std::string unique = std::to_string(getpid());
    fs::path tmp_header = dir / ("ember_prelude.h." + unique);
    fs::path tmp_gch = dir / ("ember_prelude.h.gch." + unique);
    {
      std::ofstream out(tmp_header);
      out << options.prelude;
    }
    std::string cmd = quote(options.compiler);
    for (const std::string& f : options.flags) cmd += " " + quote(f);
    cmd += " -fPIC -x c++-header -o " + quote(tmp_gch.string()) + " " + quote(tmp_header.string()) +
           " > /dev/null 2>&1";
    ++g_compiles;
    if (std::system(cmd.c_str()) != 0) {
      fs::remove(tmp_header, ec);
      fs::remove(tmp_gch, ec);
      built[hex] = "";
      return "";
    }
    fs::rename(tmp_header, header, ec);
    fs::rename(tmp_gch, gch, ec);
  }
  built[hex] = fs::exists(header) ? header.string() : "";
  return built[hex];
}

// Compiles `source` into `<dir>/<key>.so` unless a whole entry is there (kernel_cache.h: a
// corrupted one is removed and rebuilt). Safe to run concurrently with other processes: the
// object is written under a unique name, then published (renamed into place with its sidecar).
void compile_to_cache(const std::string& key, const std::string& source,
                      const HostCompileOptions& options) {
  fs::path dir = cache_dir();
  fs::path so = dir / (key + ".so");
  std::error_code ec;
  if (fs::exists(so, ec)) {
    std::string why;
    if (verify_entry(so, &why)) {
      touch_entry(so);
      ++g_disk_hits;
      return;
    }
    warn_once("entry:" + key, "the kernel cache entry " + so.string() + " failed its check (" +
                                  why + "); it was removed and is compiled again");
    remove_entry(so);
  }
  std::string unique = key + "." + std::to_string(getpid()) + "." +
                       std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  fs::path src = dir / (unique + ".cpp");
  fs::path tmp = dir / (unique + ".so");
  fs::path log = dir / (unique + ".log");
  // With a precompiled prelude, the unit is the rest of the source after it (a missing or stale
  // .gch makes the compiler read the header's text instead: the same code either way).
  const bool has_prelude = !options.prelude.empty() && source.starts_with(options.prelude);
  const std::string header = has_prelude ? precompiled_prelude(options) : "";
  {
    std::ofstream out(src);
    out << (header.empty() ? source : source.substr(options.prelude.size()));
    EMBER_UNSUPPORTED(out.good()) << "cannot write " << src.string() << " in the kernel cache";
  }
  std::string cmd = quote(options.compiler);
  for (const std::string& f : options.flags) cmd += " " + quote(f);
  if (!header.empty()) cmd += " -include " + quote(header);
  cmd += " -shared -fPIC -o " + quote(tmp.string()) + " " + quote(src.string());
  for (const std::string& f : options.link_flags) cmd += " " + quote(f);
  cmd += " > " + quote(log.string()) + " 2>&1";
  ++g_compiles;
  int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::string output = read_file(log);
    fs::remove(tmp, ec);
    fs::remove(src, ec);
    fs::remove(log, ec);
    const bool missing = WIFEXITED(rc) && WEXITSTATUS(rc) == 127;
    warn_once("compiler:" + options.compiler,
              missing ? "the C++ compiler '" + options.compiler +
                            "' was not found: generated CPU kernels run as ATen calls instead "
                            "(slower). Install g++ or set EMBER_CXX to a C++ compiler."
                      : "the C++ compiler '" + options.compiler + "' failed (exit " +
                            std::to_string(WIFEXITED(rc) ? WEXITSTATUS(rc) : rc) +
                            "): some generated CPU kernels run as ATen "
                            "calls instead (slower). Its output:\n" +
                            output.substr(0, 2000));
    EMBER_UNSUPPORTED(false) << "the host compiler failed (exit " << rc << ") on " << src.string()
                             << ":\n"
                             << output;
  }
  publish_entry(tmp, so);
  // Keep the source next to the object for debugging (whole); drop the (empty) log.
  if (header.empty()) {
    fs::rename(src, dir / (key + ".cpp"), ec);
  } else {
    fs::remove(src, ec);
    std::ofstream(dir / (key + ".cpp")) << source;
  }
  fs::remove(log, ec);
  evict_to_cap(dir, cache_cap_bytes());
}

}  // namespace

// Loaded kernels are never dlclose'd: OpenMP worker threads started by a kernel can outlive it, and
// unloading the last user of libgomp under them crashes. Kernels are small; they stay until exit.
KernelLibrary::~KernelLibrary() = default;

void* KernelLibrary::symbol(const std::string& name) const {
  void* p = dlsym(handle_, name.c_str());
  if (p == nullptr) {
    const char* err = dlerror();
    EMBER_INTERNAL_ASSERT(false) << "symbol " << name << " missing from " << path_ << " ("
                                 << (err ? err : "no dlerror") << ")";
  }
  return p;
}

HostCompileOptions HostCompileOptions::from(const CompileOptions::Codegen& codegen) {
  HostCompileOptions o;
  o.compiler = codegen.cxx.empty() ? "c++" : codegen.cxx;
  if (codegen.libmvec && libmvec_usable()) {
    o.flags.push_back("-DEMBER_LIBMVEC");
    o.link_flags.push_back("-lmvec");
  }
  return o;
}

bool libmvec_usable() {
  static const bool usable = [] {
#if defined(__x86_64__) && defined(__GLIBC__)
    int major = 0, minor = 0;
    if (std::sscanf(gnu_get_libc_version(), "%d.%d", &major, &minor) != 2) return false;
    if (major < 2 || (major == 2 && minor < 35)) return false;  // tanh, erf, ... came in 2.35
    for (const char* dir : {"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64",
                            "/lib64", "/usr/lib"}) {
      std::error_code ec;
      if (fs::exists(fs::path(dir) / "libmvec.so", ec)) return true;
    }
#endif
    return false;
  }();
  return usable;
}

std::string cache_dir() {
  return cache_subdir("kernels");
}

std::string cache_key(const std::string& source, const HostCompileOptions& options) {
  Hasher h;
  // v2: entries carry a sidecar (kernel_cache.h); -march=native means this CPU's features.
  h.str("ember-host-compiler-v2").str(options.compiler).str(compiler_id(options.compiler));
  h.str(cpu_features()).str(EMBER_VERSION_STRING);
  h.u64(options.key_parts.size());
  for (const std::string& p : options.key_parts) h.str(p);
  h.u64(options.flags.size());
  for (const std::string& f : options.flags) h.str(f);
  h.u64(options.link_flags.size());
  for (const std::string& f : options.link_flags) h.str(f);
  h.str(source);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.digest()));
  return hex;
}

std::shared_ptr<KernelLibrary> compile_and_load(const std::string& source,
                                                const HostCompileOptions& options) {
  return compile_and_load_all({source}, options).front();
}

std::vector<std::shared_ptr<KernelLibrary>> compile_and_load_all(
    const std::vector<std::string>& sources, const HostCompileOptions& options) {
  std::vector<std::string> keys;
  std::vector<std::shared_ptr<KernelLibrary>> libs(sources.size());
  std::vector<size_t> todo;
  for (size_t i = 0; i < sources.size(); ++i) {
    keys.push_back(cache_key(sources[i], options));
    libs[i] = find_loaded(keys[i]);
    if (libs[i]) {
      ++g_memory_hits;
    } else {
      todo.push_back(i);
    }
  }
  size_t width = std::max(1u, std::thread::hardware_concurrency());
  for (size_t start = 0; start < todo.size(); start += width) {
    std::vector<std::future<void>> jobs;
    for (size_t j = start; j < std::min(todo.size(), start + width); ++j) {
      size_t i = todo[j];
      jobs.push_back(std::async(std::launch::async,
                                [&, i] { compile_to_cache(keys[i], sources[i], options); }));
    }
    for (auto& job : jobs) job.get();  // rethrows the first failure
  }
  fs::path dir = cache_dir();
  for (size_t i : todo) {
    libs[i] = load(keys[i], dir / (keys[i] + ".so"));
    if (libs[i] == nullptr) {  // refused by dlopen and removed: built once more
      compile_to_cache(keys[i], sources[i], options);
      libs[i] = load(keys[i], dir / (keys[i] + ".so"));
      EMBER_UNSUPPORTED(libs[i] != nullptr)
          << "a kernel compiled into " << dir.string() << " could not be loaded";
    }
  }
  return libs;
}

HostCompilerStats host_compiler_stats() {
  return HostCompilerStats{g_compiles.load(), g_disk_hits.load(), g_memory_hits.load()};
}

void clear_memory_cache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_loaded.clear();
}

}  // namespace ember::runtime
