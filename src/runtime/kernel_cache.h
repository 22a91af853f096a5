/// \file
/// The on-disk kernel cache as a trusted store. A cached kernel is a shared object that ember
/// dlopens, so whoever can write the cache can run code in every process that reads it. The
/// cache therefore holds to this contract (docs/design/cache.md):
///
///  - Its directory belongs to this user and no one else can write it: created 0700, checked
///    (owner, no group or other write bit) before use. A directory that fails the check is not
///    used; kernels then go to a private directory for this process (removed at exit), with one
///    warning naming the directory, why, and the fix.
///  - An entry is published whole: written under a temporary name, fsynced, then renamed, with
///    a sidecar (`<key>.so.sum`) holding its size and content hash. An entry is loaded only when
///    its sidecar matches; a missing, truncated or corrupted one is removed and rebuilt, with a
///    warning.
///  - The size of the directory is capped (`EMBER_CACHE_MAX_MB`, default 2048): past it the
///    least recently used entries are evicted (a load marks an entry used).
///
/// Plain C++ (no torch), part of ember_host.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ember::runtime {

/// Where the caches live, for this process: set at the Python boundary from ember.config
/// (`cache_dir`: EMBER_CACHE_DIR, else `$XDG_CACHE_HOME/ember`, else `~/.cache/ember`;
/// `cache_max_mb`: EMBER_CACHE_MAX_MB; `prelude_dir`: EMBER_PRELUDE_DIR) before each compile, and
/// by C++ tests. Empty `root`: `<tmp>/ember-cache-<uid>`; empty `prelude_dir`:
/// `<root>/prelude`. `max_mb` 0 or less: no cap. Thread-safe.
void configure_cache(const std::string& root, int64_t max_mb = 2048,
                     const std::string& prelude_dir = "");

/// The configured root of ember's caches (configure_cache), created 0700 where missing. When it
/// fails
/// the trust check (another user owns it, others can write it, it cannot be created or
/// written), a private directory of this process instead. Throws Unsupported when there is no
/// usable directory at all.
std::string cache_root();

/// `<cache_root()>/<name>`, created 0700 and checked as the root is.
std::string cache_subdir(const std::string& name);

/// Whether `dir` is a directory this user owns and only this user can write; `why` gets the
/// reason when not.
bool is_trusted_dir(const std::filesystem::path& dir, std::string* why);

/// Whether `so` is a whole entry: its sidecar exists and records its size and content hash.
/// `why` gets what failed.
bool verify_entry(const std::filesystem::path& so, std::string* why);

/// Publishes the object built at `tmp` as entry `so`: fsyncs it, writes its sidecar under a
/// temporary name, fsyncs that, and renames both into place (the object first).
void publish_entry(const std::filesystem::path& tmp, const std::filesystem::path& so);

/// Removes entry `so`: the object, its sidecar and its source (`<key>.cpp`). Never throws.
void remove_entry(const std::filesystem::path& so);

/// Marks `so` used now (its modification time), for eviction. Never throws.
void touch_entry(const std::filesystem::path& so);

/// Evicts least recently used entries of `dir` until it holds at most 90% of `cap_bytes`, when
/// it holds more than `cap_bytes`. Returns the number evicted. Never throws.
int64_t evict_to_cap(const std::filesystem::path& dir, int64_t cap_bytes);

/// The configured size cap in bytes (configure_cache; default 2048 MB; 0 or less: no cap).
int64_t cache_cap_bytes();

/// The configured directory of precompiled preludes (configure_cache), or "" for
/// `cache_subdir("prelude")`.
std::string prelude_dir();

/// The CPU's instruction set features as the kernel reports them (the `flags` line of
/// /proc/cpuinfo on x86, `Features` on Arm): code built with -march=native runs only where they
/// are present, so cache keys include them. Empty where unknown.
const std::string& cpu_features();

/// Prints `message` to stderr once per `topic` in this process ("ember: warning: ...").
/// Thread-safe; for causes the user should fix (no compiler, an untrusted cache directory).
void warn_once(const std::string& topic, const std::string& message);

/// The messages warn_once printed, in order; for tests.
std::vector<std::string> warnings_issued();

}  // namespace ember::runtime
