/// \file
/// The PEP 523 eval function, the per-code-object cache in co_extra, the skip rules and the hook
/// statistics (the flow is in frame_hook.h; the thread model in hook_state.h). Version-neutral:
/// every interpreter internal comes from compat.h.
#include "capture/hook/frame_hook.h"
#include "capture/hook/logs.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <unordered_set>
#include <utility>

#include "capture/hook/compat.h"
#include "capture/hook/hook_state.h"
#include "support/error.h"

namespace ember::capture {
namespace {

using detail::thread_state;
using detail::ThreadState;

constexpr int kGeneratorFlags = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR;

/// One cached entry and the compiler that made it. `owner` is compared with the active compiler;
/// `owner_ref` tells whether that compiler still exists (while it does, no other compiler can have
/// its address), so an entry never matches a later compiler allocated at the same address.
struct Entry {
  std::shared_ptr<CacheEntry> entry;
  FrameCompiler* owner = nullptr;
  std::weak_ptr<FrameCompiler> owner_ref;
};

/// What ember keeps on a code object (its co_extra slot); freed with the code object.
struct ExtraState {
  std::vector<Entry> entries;  ///< most recently used first
  bool skip_code = false;      ///< a compiler answered SkipCode
  /// run_unhooked(): frames of this code and every frame they call run with the hook off
  /// (torch.compiler.disable's wrapper). Kept by clear_cache: it is what the code is.
  bool unhooked = false;
  /// disable_closure_function(): a frame of this code disables the code of the function in its
  /// closure cell `disables_cell` (torch.compiler.disable(recursive=False)'s wrapper); -1: none.
  int disables_cell = -1;
  /// That function's code: its frames run with the default evaluator, their callees hooked.
  bool disabled = false;
  /// Compilers whose entries for this code reached the cache-size limit: for them the frame
  /// runs its original bytecode, its entries no longer checked.
  std::vector<std::pair<const FrameCompiler*, std::weak_ptr<FrameCompiler>>> over_limit;
  uint64_t skip_generation = 0;  ///< the skip-prefix generation `file_skipped` was computed for
  bool file_skipped = false;
  /// The thread compiling this code now (its ThreadState), or null. A compile runs Python code
  /// and so may let other threads run: one that misses meanwhile waits for the entry instead of
  /// compiling the same code again.
  const void* compiling = nullptr;
};

struct Globals {
  Py_ssize_t extra_index = -1;
  bool extra_index_failed = false;
  std::unordered_set<ExtraState*> states;  ///< every live ExtraState, for clear_cache(nullptr)
  std::vector<std::string> skip_prefixes;
  uint64_t skip_generation = 1;
  int cache_size_limit = 8;
  HookStats stats;
  int active_threads = 0;
  /// A compiler died while some thread was inside a compiled call: its entries are dropped when
  /// the last one returns (purge_dead_compilers).
  bool purge_pending = false;
};

// Never destroyed: code objects (and their ExtraState) can die during interpreter finalisation,
// after static destructors would have run.
Globals& globals() {
  static Globals* g = new Globals;
  return *g;
}

void destroy_extra(void* p) {
  auto* state = static_cast<ExtraState*>(p);
  globals().states.erase(state);
  delete state;
}

Py_ssize_t extra_index() {
  Globals& g = globals();
  if (g.extra_index < 0 && !g.extra_index_failed) {
    g.extra_index = ember_compat_request_code_extra_index(destroy_extra);
    g.extra_index_failed = g.extra_index < 0;  // the interpreter's table of users is full
  }
  return g.extra_index;
}

ExtraState* find_extra(PyCodeObject* code) {
  Py_ssize_t index = extra_index();
  if (index < 0) return nullptr;
  void* p = nullptr;
  if (ember_compat_get_code_extra(reinterpret_cast<PyObject*>(code), index, &p) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  return static_cast<ExtraState*>(p);
}

// The code's ExtraState, created on first use; nullptr when co_extra is unavailable (the frame
// then runs eagerly).
ExtraState* extra_state(PyCodeObject* code) {
  if (ExtraState* s = find_extra(code)) return s;
  Py_ssize_t index = extra_index();
  if (index < 0) return nullptr;
  auto* s = new ExtraState;
  if (ember_compat_set_code_extra(reinterpret_cast<PyObject*>(code), index, s) < 0) {
    PyErr_Clear();
    delete s;
    return nullptr;
  }
  globals().states.insert(s);
  return s;
}

bool file_skipped(PyCodeObject* code, ExtraState* s) {
  Globals& g = globals();
  if (s->skip_generation == g.skip_generation) return s->file_skipped;
  s->skip_generation = g.skip_generation;
  s->file_skipped = false;
  Py_ssize_t n = 0;
  const char* name = PyUnicode_AsUTF8AndSize(code->co_filename, &n);
  if (name == nullptr) {
    PyErr_Clear();
    return false;
  }
  for (const std::string& prefix : g.skip_prefixes) {
    if (static_cast<size_t>(n) >= prefix.size() &&
        std::memcmp(name, prefix.data(), prefix.size()) == 0) {
      s->file_skipped = true;
      break;
    }
  }
  return s->file_skipped;
}

/// Disables the hook on this thread for a scope (compile(), check(), warnings, entry
/// destruction): frames called from there run with the previous evaluator.
class HookDisabled {
 public:
  explicit HookDisabled(ThreadState& st) : st_(st), saved_(st.compiler) { st.compiler = nullptr; }
  ~HookDisabled() { st_.compiler = saved_; }
  HookDisabled(const HookDisabled&) = delete;
  HookDisabled& operator=(const HookDisabled&) = delete;

 private:
  ThreadState& st_;
  const std::shared_ptr<FrameCompiler>* saved_;
};

}  // namespace

HookPause::HookPause() : saved_(detail::thread_state.compiler) {
  detail::thread_state.compiler = nullptr;
}

HookPause::~HookPause() {
  detail::thread_state.compiler = static_cast<const std::shared_ptr<FrameCompiler>*>(saved_);
}

namespace {

// Turns the C++ exception being handled into a Python exception (keeping one already set).
void set_python_error_from_exception() {
  if (PyErr_Occurred()) return;
  try {
    throw;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "ember: unknown C++ exception in the frame hook");
  }
}

// The frame will not be evaluated: release it and propagate the exception that is set.
PyObject* fail(PyThreadState* ts, _PyInterpreterFrame* frame) {
  ember_compat_abandon_frame(ts, frame);
  return nullptr;
}

PyObject* eval_default(PyThreadState* ts, _PyInterpreterFrame* frame) {
  return ember_compat_eval_default(ts, frame, 0);
}

int check_entry(CacheEntry& e, const FrameView& f) {
  try {
    int r = e.check(f);
    if (r < 0 && !PyErr_Occurred()) {
      PyErr_SetString(PyExc_SystemError,
                      "ember: a cache entry's check failed without an exception");
    }
    return r;
  } catch (...) {
    set_python_error_from_exception();
    return -1;
  }
}

// Runs `e` in place of the frame (hook active) and abandons the frame.
PyObject* run_entry(PyThreadState* ts, _PyInterpreterFrame* frame, CacheEntry& e,
                    const FrameView& f) {
  // Entries can recurse into the hook without any frame reaching the default evaluator (a run()
  // calling a function answered by an entry calling ...), so the recursion limit is checked here.
  if (Py_EnterRecursiveCall(" while running an ember cache entry") != 0) return fail(ts, frame);
  PyObject* result = nullptr;
  try {
    result = e.run(f);
  } catch (...) {
    set_python_error_from_exception();
    result = nullptr;
  }
  Py_LeaveRecursiveCall();
  if (result == nullptr && !PyErr_Occurred()) {
    PyErr_SetString(PyExc_SystemError,
                    "ember: a cache entry's run returned NULL without an exception");
  } else if (result != nullptr && PyErr_Occurred()) {
    Py_CLEAR(result);  // as CPython treats a result with an exception set: an error
  }
  ember_compat_abandon_frame(ts, frame);
  return result;
}

void move_to_front(ExtraState* s, const CacheEntry* e) {
  auto it = std::find_if(s->entries.begin(), s->entries.end(),
                         [e](const Entry& x) { return x.entry.get() == e; });
  if (it != s->entries.end()) std::rotate(s->entries.begin(), it, it + 1);
}

// Drops entries whose compiler is gone. Their destructors may run Python code: the caller
// disables the hook around this.
void purge_dead_entries(ExtraState* s) {
  std::vector<Entry> dead;
  auto keep = std::stable_partition(s->entries.begin(), s->entries.end(),
                                    [](const Entry& x) { return !x.owner_ref.expired(); });
  std::move(keep, s->entries.end(), std::back_inserter(dead));
  s->entries.erase(keep, s->entries.end());
}

/// The first guard that failed for the most recent entry of `owner` on this code object.
std::string recompile_reason(const FrameView& f, ExtraState& s, const FrameCompiler* owner) {
  for (auto& e : s.entries) {
    if (e.owner != owner || e.entry == nullptr) continue;
    std::string why = e.entry->first_failure(f);
    return why.empty() ? std::string("no guard failed") : why;
  }
  return {};
}

std::string frame_text(const FrameView& f) {
  return std::string(PyUnicode_AsUTF8(f.code->co_qualname)) + " (" +
         PyUnicode_AsUTF8(f.code->co_filename) + ":" + std::to_string(f.code->co_firstlineno) + ")";
}

bool is_over_limit(const ExtraState& s, const FrameCompiler* compiler) {
  for (const auto& [owner, ref] : s.over_limit) {
    if (owner == compiler && !ref.expired()) return true;
  }
  return false;
}

PyObject* intercept(PyThreadState* ts, _PyInterpreterFrame* frame, ThreadState& st, ExtraState* s);

PyObject* on_miss(PyThreadState* ts, _PyInterpreterFrame* frame, ThreadState& st, ExtraState* s,
                  const FrameView& f) {
  Globals& g = globals();
  if (s->compiling != nullptr && s->compiling != &st) {
    // Another thread is compiling this code: wait for it (without the GIL), then look again.
    while (s->compiling != nullptr) {
      PyThreadState* saved = PyEval_SaveThread();
      std::this_thread::yield();
      PyEval_RestoreThread(saved);
    }
    return intercept(ts, frame, st, s);
  }
  const std::shared_ptr<FrameCompiler>& compiler = *st.compiler;
  {
    HookDisabled off(st);
    purge_dead_entries(s);
  }
  int64_t own = std::count_if(s->entries.begin(), s->entries.end(),
                              [&](const Entry& e) { return e.owner == compiler.get(); });
  if (own >= g.cache_size_limit) {
    // A recompile storm (a guard that fails on every call) would otherwise check every entry
    // and run eagerly on every call: past the limit the frame runs its original bytecode,
    // with one warning naming the guard that failed last.
    ++g.stats.cache_limit_hits;
    ++g.stats.eager_frames;
    std::erase_if(s->over_limit, [](const auto& o) { return o.second.expired(); });
    s->over_limit.emplace_back(compiler.get(), compiler);
    HookDisabled off(st);
    std::string why = own > 0 ? recompile_reason(f, *s, compiler.get()) : "";
    std::string text = "ember: " + frame_text(f) + " reached the cache size limit (" +
                       std::to_string(g.cache_size_limit) +
                       " entries; ember.config.cache_size_limit): from now on it runs without "
                       "compiling" +
                       (why.empty() ? std::string() : "; last guard failure: " + why);
    if (log_enabled("recompiles")) log_warning(text);
    if (PyErr_WarnEx(PyExc_RuntimeWarning, text.c_str(), 1) < 0) return fail(ts, frame);
    return eval_default(ts, frame);
  }

  CompileResult result;
  std::optional<CompileResult::Action> decided;
  {
    HookDisabled off(st);
    decided = compiler->decided(f);
  }
  if (decided.has_value()) {
    result.action = *decided;  // runs eagerly, as decided before: no compile
  } else {
    ++g.stats.compiles;
    if (own > 0) {
      ++g.stats.recompiles;
      HookDisabled off(st);
      if (log_enabled("recompiles")) {
        log_warning("ember: recompiling " + frame_text(f) + ": " +
                    recompile_reason(f, *s, compiler.get()));
      }
    }
    {
      HookDisabled off(st);
      s->compiling = &st;
      try {
        result = compiler->compile(f);
      } catch (...) {
        set_python_error_from_exception();
      }
      s->compiling = nullptr;
    }
    if (PyErr_Occurred()) return fail(ts, frame);
  }
  switch (result.action) {
    case CompileResult::Action::Run: {
      if (result.entry == nullptr) {
        PyErr_SetString(PyExc_SystemError, "ember: a compiler returned Run without an entry");
        return fail(ts, frame);
      }
      std::shared_ptr<CacheEntry> entry(std::move(result.entry));
      s->entries.insert(s->entries.begin(), Entry{entry, compiler.get(), compiler});
      if (entry->runs_original()) {
        ++g.stats.eager_frames;
        return eval_default(ts, frame);
      }
      return run_entry(ts, frame, *entry, f);
    }
    case CompileResult::Action::SkipCode:
      s->skip_code = true;
      ++g.stats.eager_frames;
      return eval_default(ts, frame);
    case CompileResult::Action::EagerUnhooked: {
      ++g.stats.eager_frames;
      HookDisabled off(st);
      return eval_default(ts, frame);
    }
    case CompileResult::Action::Eager:
      break;
  }
  ++g.stats.eager_frames;
  return eval_default(ts, frame);
}

PyObject* intercept(PyThreadState* ts, _PyInterpreterFrame* frame, ThreadState& st, ExtraState* s) {
  EmberFrameInfo info;
  ember_compat_frame_info(frame, &info);
  FrameView f;
  f.code = info.code;
  f.function = info.function;
  f.globals = info.globals;
  f.builtins = info.builtins;
  f.localsplus = info.localsplus;
  f.nlocalsplus = info.nlocalsplus;
  f.closure = (info.function != nullptr && PyFunction_Check(info.function))
                  ? PyFunction_GET_CLOSURE(info.function)
                  : nullptr;
  f.top = reinterpret_cast<PyObject*>(f.code) == st.top_code;

  FrameCompiler* active = st.compiler->get();
  std::shared_ptr<CacheEntry> hit;
  {
    HookDisabled off(st);
    // By index: a guard that runs Python code may let another thread add entries.
    for (size_t i = 0; i < s->entries.size(); ++i) {
      const Entry& candidate = s->entries[i];
      if (candidate.owner != active || candidate.owner_ref.expired()) continue;
      std::shared_ptr<CacheEntry> entry = candidate.entry;  // alive through check and run
      int ok = check_entry(*entry, f);
      if (ok < 0) return fail(ts, frame);
      if (ok > 0) {
        if (i != 0) move_to_front(s, entry.get());
        hit = std::move(entry);
        break;
      }
    }
  }
  if (hit != nullptr) {
    ++globals().stats.cache_hits;
    if (hit->runs_original()) {
      ++globals().stats.eager_frames;
      return eval_default(ts, frame);
    }
    return run_entry(ts, frame, *hit, f);
  }
  return on_miss(ts, frame, st, s, f);
}

/// Marks the code of the function in closure cell `cell` of `frame`'s function as disabled.
void disable_cell_function(_PyInterpreterFrame* frame, int cell) {
  EmberFrameInfo info;
  ember_compat_frame_info(frame, &info);
  if (info.function == nullptr || !PyFunction_Check(info.function)) return;
  PyObject* closure = PyFunction_GET_CLOSURE(info.function);
  if (closure == nullptr || cell >= PyTuple_GET_SIZE(closure)) return;
  PyObject* fn = PyCell_GET(PyTuple_GET_ITEM(closure, cell));
  if (fn != nullptr && PyMethod_Check(fn)) fn = PyMethod_GET_FUNCTION(fn);
  if (fn == nullptr || !PyFunction_Check(fn)) return;
  if (ExtraState* target = extra_state(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn)))) {
    target->disabled = true;
  }
}

PyObject* eval_frame(PyThreadState* ts, _PyInterpreterFrame* frame, int throwflag) {
  ThreadState& st = thread_state;
  if (st.compiler == nullptr || ember_compat_is_chaining(frame)) {
    return ember_compat_eval_default(ts, frame, throwflag);
  }
  Globals& g = globals();
  ++g.stats.frames_seen;
  // Generator resumptions, gen.throw/close, frames of trace callbacks: never ours.
  if (throwflag != 0 || !ember_compat_frame_is_fresh_call(frame) ||
      ember_compat_tstate_tracing(ts)) {
    return ember_compat_eval_default(ts, frame, throwflag);
  }
  PyCodeObject* code = ember_compat_frame_code(frame);
  // The creation call of a generator or coroutine function: left alone.
  if ((code->co_flags & kGeneratorFlags) != 0) return eval_default(ts, frame);
  ExtraState* s = extra_state(code);
  if (s == nullptr) return eval_default(ts, frame);
  // (Skipped as a library file is: not counted as an eager frame.)
  if (s->unhooked) {
    HookDisabled off(st);
    return eval_default(ts, frame);
  }
  if (s->disables_cell >= 0) disable_cell_function(frame, s->disables_cell);
  if (s->disabled && reinterpret_cast<PyObject*>(code) != st.top_code) {
    return eval_default(ts, frame);
  }
  if (s->skip_code &&
      !(reinterpret_cast<PyObject*>(code) == st.top_code && (*st.compiler)->fullgraph())) {
    return eval_default(ts, frame);
  }
  if (!s->over_limit.empty() && is_over_limit(*s, st.compiler->get())) {
    return eval_default(ts, frame);
  }
  if (reinterpret_cast<PyObject*>(code) != st.top_code && file_skipped(code, s)) {
    return eval_default(ts, frame);
  }
  return intercept(ts, frame, st, s);
}

}  // namespace

namespace detail {

void activate_thread() {
  if (globals().active_threads++ == 0) ember_compat_install(eval_frame);
}

void deactivate_thread() {
  Globals& g = globals();
  if (--g.active_threads == 0) {
    ember_compat_uninstall(eval_frame);
    if (g.purge_pending) purge_dead_compilers();
  }
}

}  // namespace detail

void run_unhooked(PyCodeObject* code) {
  if (ExtraState* s = extra_state(code)) s->unhooked = true;
}

void disable_closure_function(PyCodeObject* code, int cell) {
  if (ExtraState* s = extra_state(code)) s->disables_cell = cell;
}

void set_skip_prefixes(std::vector<std::string> prefixes) {
  Globals& g = globals();
  g.skip_prefixes = std::move(prefixes);
  ++g.skip_generation;
}

void set_cache_size_limit(int limit) {
  EMBER_CHECK(limit >= 0) << "the cache size limit must be >= 0, got " << limit;
  globals().cache_size_limit = limit;
}

bool hook_installed() {
  return ember_compat_is_installed(eval_frame) != 0;
}

HookStats hook_stats() {
  return globals().stats;
}

void reset_hook_stats() {
  globals().stats = HookStats{};
}

void purge_dead_compilers() {
  Globals& g = globals();
  if (g.active_threads > 0) {  // some thread may be walking a code object's entries
    g.purge_pending = true;
    return;
  }
  g.purge_pending = false;
  std::vector<Entry> dropped;  // destroyed after the walk: destructors may run Python code
  for (ExtraState* s : g.states) {
    auto dead = std::stable_partition(s->entries.begin(), s->entries.end(),
                                      [](const Entry& x) { return !x.owner_ref.expired(); });
    std::move(dead, s->entries.end(), std::back_inserter(dropped));
    s->entries.erase(dead, s->entries.end());
  }
  dropped.clear();
}

void clear_cache(PyCodeObject* code) {
  std::vector<Entry> dropped;  // destroyed after the walk: destructors may run Python code
  auto clear_one = [&dropped](ExtraState* s) {
    std::move(s->entries.begin(), s->entries.end(), std::back_inserter(dropped));
    s->entries.clear();
    s->skip_code = false;
    s->over_limit.clear();
  };
  if (code != nullptr) {
    if (ExtraState* s = find_extra(code)) clear_one(s);
  } else {
    for (ExtraState* s : globals().states) clear_one(s);
  }
  ThreadState& st = thread_state;
  HookDisabled off(st);
  dropped.clear();
}

}  // namespace ember::capture
