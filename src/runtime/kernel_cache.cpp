#include "runtime/kernel_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <vector>

#include "support/error.h"
#include "support/hash.h"

namespace ember::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSumMagic = "ember-kernel-v1";

std::mutex g_mutex;
std::map<std::string, std::string> g_resolved;  // configured root -> the root used
std::set<std::string> g_warned;
std::vector<std::string> g_warnings;
std::vector<std::string> g_private_dirs;  // removed at exit

std::string g_root;  // configure_cache; guarded by g_mutex
int64_t g_max_mb = 2048;
std::string g_prelude_dir;

fs::path configured_root() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_root.empty()) return g_root;
  }
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  return tmp / ("ember-cache-" + std::to_string(geteuid()));
}

/// Creates the missing components of `dir` (0700 each) and checks the result.
bool make_private_dir(const fs::path& dir, std::string* why) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::path partial;
    for (const fs::path& part : dir) {
      partial /= part;
      if (partial.empty() || fs::exists(partial, ec)) continue;
      if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
        *why = "cannot create " + partial.string() + ": " + std::strerror(errno);
        return false;
      }
    }
  }
  return is_trusted_dir(dir, why);
}

void remove_private_dirs() {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const std::string& d : g_private_dirs) {
    std::error_code ec;
    fs::remove_all(d, ec);
  }
}

/// A fresh private directory for this process, removed at exit.
std::string private_root() {
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  std::string pattern = (tmp / "ember-private-XXXXXX").string();
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  EMBER_UNSUPPORTED(::mkdtemp(buf.data()) != nullptr)
      << "no usable directory for compiled kernels: mkdtemp in " << tmp.string()
      << " failed: " << std::strerror(errno) << " (set EMBER_CACHE_DIR to a directory you own)";
  static const bool registered = [] { return std::atexit(remove_private_dirs) == 0; }();
  (void)registered;
  g_private_dirs.emplace_back(buf.data());
  return g_private_dirs.back();
}

std::string sum_line(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return {};
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Hasher h;
  h.str("ember-kernel-content").bytes(bytes.data(), bytes.size());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.digest()));
  return std::string(kSumMagic) + " " + std::to_string(bytes.size()) + " " + hex;
}

fs::path sum_path(const fs::path& so) {
  return fs::path(so.string() + ".sum");
}

void fsync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

bool is_trusted_dir(const fs::path& dir, std::string* why) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    *why = "cannot stat " + dir.string() + ": " + std::strerror(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    *why = dir.string() + " is not a directory";
    return false;
  }
  if (st.st_uid != ::geteuid()) {
    *why = dir.string() + " belongs to another user (uid " + std::to_string(st.st_uid) + ")";
    return false;
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    *why = dir.string() + " can be written by other users (mode " +
           std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
           std::to_string(st.st_mode & 7) + ")";
    return false;
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    *why = dir.string() + " is not writable: " + std::strerror(errno);
    return false;
  }
  return true;
}

std::string cache_root() {
  const fs::path want = configured_root();
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_resolved.find(want.string());
  if (it != g_resolved.end()) return it->second;
  std::string why;
  std::string root;
  if (make_private_dir(want, &why)) {
    root = want.string();
  } else {
    root = private_root();
    std::string text = "the kernel cache directory " + want.string() + " is not used: " + why +
                       ". Kernels are compiled into " + root +
                       " for this process instead (not kept). Set EMBER_CACHE_DIR to a "
                       "directory you own that only you can write.";
    if (g_warned.insert("cache-root:" + want.string()).second) {
      g_warnings.push_back(text);
      std::cerr << "ember: warning: " << text << std::endl;
    }
  }
  g_resolved.emplace(want.string(), root);
  return root;
}

std::string cache_subdir(const std::string& name) {
  const fs::path dir = fs::path(cache_root()) / name;
  std::string why;
  EMBER_UNSUPPORTED(make_private_dir(dir, &why))
      << "the cache directory " << dir.string() << " is not usable: " << why
      << " (set EMBER_CACHE_DIR to a directory you own that only you can write)";
  return dir.string();
}

bool verify_entry(const fs::path& so, std::string* why) {
  std::ifstream in(sum_path(so));
  std::string recorded;
  if (!in || !std::getline(in, recorded)) {
    *why = "no sidecar " + sum_path(so).filename().string();
    return false;
  }
  const std::string actual = sum_line(so);
  if (actual != recorded) {
    *why = actual.empty() ? "unreadable" : "size or content hash differs from its sidecar";
    return false;
  }
  return true;
}

void publish_entry(const fs::path& tmp, const fs::path& so) {
  fsync_path(tmp);
  const fs::path sum_tmp = fs::path(tmp.string() + ".sum");
  {
    std::ofstream out(sum_tmp);
    out << sum_line(tmp) << "\n";
    EMBER_UNSUPPORTED(out.good()) << "cannot write " << sum_tmp.string();
  }
  fsync_path(sum_tmp);
  fs::rename(tmp, so);
  fs::rename(sum_tmp, sum_path(so));
  fsync_path(so.parent_path());
}

void remove_entry(const fs::path& so) {
  std::error_code ec;
  fs::remove(so, ec);
  fs::remove(sum_path(so), ec);
  fs::path src = so;
  src.replace_extension(".cpp");
  fs::remove(src, ec);
}

void touch_entry(const fs::path& so) {
  ::utimensat(AT_FDCWD, so.c_str(), nullptr, 0);
}

int64_t evict_to_cap(const fs::path& dir, int64_t cap_bytes) {
  if (cap_bytes <= 0) return 0;
  struct Item {
    fs::file_time_type used;
    fs::path so;
    int64_t bytes;
  };
  std::vector<Item> items;
  int64_t total = 0;
  std::error_code ec;
  std::map<std::string, int64_t> sizes;  // entry stem -> bytes of its files
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::error_code fec;
    if (!e.is_regular_file(fec)) continue;
    const int64_t n = static_cast<int64_t>(e.file_size(fec));
    if (fec) continue;
    total += n;
    std::string name = e.path().filename().string();
    sizes[name.substr(0, name.find('.'))] += n;
  }
  if (total <= cap_bytes) return 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".so") continue;
    std::error_code fec;
    fs::file_time_type t = e.last_write_time(fec);
    if (fec) continue;
    std::string stem = e.path().stem().string();
    items.push_back({t, e.path(), sizes[stem]});
  }
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.used < b.used; });
  int64_t evicted = 0;
  for (const Item& it : items) {
    if (total <= cap_bytes / 10 * 9) break;
    remove_entry(it.so);
    total -= it.bytes;
    ++evicted;
  }
  return evicted;
}

void configure_cache(const std::string& root, int64_t max_mb, const std::string& prelude_dir) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_root = root;
  g_max_mb = max_mb;
  g_prelude_dir = prelude_dir;
}

int64_t cache_cap_bytes() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_max_mb * 1024 * 1024;
}

std::string prelude_dir() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_prelude_dir;
}

const std::string& cpu_features() {
  static const std::string features = [] {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
      if (line.starts_with("flags") || line.starts_with("Features")) {
        auto colon = line.find(':');
        return colon == std::string::npos ? line : line.substr(colon + 1);
      }
    }
    return std::string();
  }();
  return features;
}

void warn_once(const std::string& topic, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_warned.insert(topic).second) return;
  g_warnings.push_back(message);
  std::cerr << "ember: warning: " << message << std::endl;
}

std::vector<std::string> warnings_issued() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_warnings;
}

}  // namespace ember::runtime
