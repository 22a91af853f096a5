#include "runtime/plan_cache.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "graph/graph_hash.h"
#include "graph/printer.h"
#include "runtime/kernel_cache.h"
#include "sched/plan_text.h"
#include "support/error.h"
#include "support/hash.h"

namespace ember::runtime {

namespace fs = std::filesystem;

namespace {

std::atomic<int64_t> g_hits{0}, g_stored{0}, g_rejected{0};

// The library this code is linked into, as a file: a rebuild writes a new one.
const std::string& build_identity() {
  static const std::string id = [] {
    Dl_info info{};
    std::ostringstream os;
    if (dladdr(reinterpret_cast<void*>(&schedule_cached), &info) != 0 &&
        info.dli_fname != nullptr) {
      struct stat st {};
      os << info.dli_fname;
      if (::stat(info.dli_fname, &st) == 0) {
        os << ' ' << st.st_size << ' ' << st.st_ino << ' ' << st.st_mtim.tv_sec << '.'
           << st.st_mtim.tv_nsec;
      }
    }
    return os.str();
  }();
  return id;
}

uint64_t plan_key(const graph::Graph& g, const sched::ScheduleOptions& o) {
  Hasher h;
  h.str("ember-plan-v1").str(build_identity()).u64(graph::hash_graph(g));
  h.i64(o.parallel_threshold).u64(o.fuse).u64(o.reductions).u64(o.reduction_fusion);
  h.u64(o.index_asserts).u64(o.chunk_single_rows).u64(o.combo_kernels).u64(o.stored_prologues);
  h.u64(o.keep_prologue_rows).i64(o.min_parallel_rows).i64(o.min_outer_tile);
  h.u64(o.depthwise_convolutions);
  h.u64(o.extern_nodes.size());
  for (bool b : o.extern_nodes) h.u64(b);
  return h.digest();
}

uint64_t text_check(const graph::Graph& g) {
  Hasher h;
  h.str("ember-plan-check").str(graph::print_graph(g));
  return h.digest();
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

sched::Plan schedule_cached(const graph::Graph& g, const sched::ScheduleOptions& options,
                            bool enabled, double min_seconds) {
  using Clock = std::chrono::steady_clock;
  if (!enabled) return sched::schedule_graph(g, options);
  const Clock::time_point t0 = Clock::now();
  fs::path path;
  try {
    path = fs::path(cache_subdir("plans")) / (hex(plan_key(g, options)) + ".plan");
  } catch (const Error&) {
    return sched::schedule_graph(g, options);  // no usable directory (warned by cache_subdir)
  }
  std::error_code ec;
  if (fs::exists(path, ec)) {
    try {
      std::string why;
      EMBER_UNSUPPORTED(verify_entry(path, &why)) << why;
      std::ifstream in(path, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string text = ss.str();
      const size_t eol = text.find('\n');
      EMBER_UNSUPPORTED(eol != std::string::npos &&
                        text.compare(0, eol, "check " + hex(text_check(g))) == 0)
          << "its graph check differs";
      sched::Plan plan = sched::parse_plan(std::string_view(text).substr(eol + 1));
      touch_entry(path);
      ++g_hits;
      plan.phase_seconds.emplace_back("schedule/from the plan cache",
                                      std::chrono::duration<double>(Clock::now() - t0).count());
      return plan;
    } catch (const std::exception& e) {
      ++g_rejected;
      warn_once("plan-cache-entry", "a cached plan (" + path.filename().string() +
                                        ") failed a check and is scheduled again: " + e.what());
      remove_entry(path);
    }
  }
  const Clock::time_point t1 = Clock::now();
  sched::Plan plan = sched::schedule_graph(g, options);
  if (std::chrono::duration<double>(Clock::now() - t1).count() < min_seconds) return plan;
  const fs::path tmp = fs::path(path.string() + "." + std::to_string(::getpid()) + ".tmp");
  try {
    const std::string body = sched::print_plan(plan);
    if (!sched::same_plan(sched::parse_plan(body), plan)) {
      ++g_rejected;  // a plan the text does not carry whole is never cached
      return plan;
    }
    {
      std::ofstream out(tmp, std::ios::binary);
      out << "check " << hex(text_check(g)) << '\n' << body;
      EMBER_UNSUPPORTED(out.good()) << "cannot write " << tmp.string();
    }
    publish_entry(tmp, path);
    ++g_stored;
    evict_to_cap(path.parent_path(), cache_cap_bytes());
  } catch (const std::exception&) {
    ++g_rejected;  // the plan is used as scheduled; nothing is cached
    fs::remove(tmp, ec);
    fs::remove(fs::path(tmp.string() + ".sum"), ec);
  }
  return plan;
}

PlanCacheStats plan_cache_stats() {
  return {g_hits.load(), g_stored.load(), g_rejected.load()};
}

}  // namespace ember::runtime
