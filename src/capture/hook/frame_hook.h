/// \file
/// The PEP 523 frame hook: which frames ember sees, the per-code-object cache, and how a cached
/// entry runs in place of a frame. Version-neutral C++; every CPython internal it needs comes
/// from the per-minor compatibility layer (compat.h). No torch here.
///
/// Flow of one intercepted frame (only while some CompiledFunction call is active on the thread):
///  1. throwflag, generator-owned or already-started frames, and code the skip rules exclude
///     run with the default evaluator (the hook stays active for their callees; for code marked
///     run_unhooked, it is off for them too);
///  2. the code object's cache (co_extra) is searched, most recently used first: the first entry
///     of the active compiler whose check() passes runs, and its result is the frame's result
///     (the original frame is never evaluated);
///  3. on a miss the active compiler's compile() is called with the hook disabled on the thread;
///     a returned entry is cached and run; otherwise the frame runs with the default evaluator.
///     When a compiler's entries for a code object reach the cache-size limit, the frame runs its
///     original bytecode for that compiler from then on (its entries no longer checked), with
///     one warning naming the guard that failed last.
#pragma once

#include <Python.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ember::capture {

/// A read-only view of a frame that has not started: arguments are bound, other locals are
/// unbound (nullptr), argument cells still hold the raw value, free variables are read through
/// the function's closure.
struct FrameView {
  PyCodeObject* code = nullptr;
  PyObject* function = nullptr;  ///< borrowed; the frame's function object
  PyObject* globals = nullptr;   ///< borrowed
  PyObject* builtins = nullptr;  ///< borrowed
  PyObject* const* localsplus = nullptr;
  int nlocalsplus = 0;
  PyObject* closure = nullptr;  ///< borrowed tuple of cells, or nullptr
  bool top = false;             ///< the compiled function's own code (CompiledFunction's top_code)

  /// Slot `i` of localsplus as the code sees it at its start: for a free variable the cell
  /// itself (from the closure, as LOAD_CLOSURE would read it), for others the slot's object.
  /// Borrowed; nullptr when unbound.
  PyObject* local(int i) const;
  /// The value a LOAD_FAST / LOAD_DEREF of slot `i` would read at the start of the frame: an
  /// argument's value (for argument cells too), a free variable's cell contents. Borrowed;
  /// nullptr when unbound.
  PyObject* value(int i) const;
};

class FrameCompiler;

/// One compiled version of a code object: its guards and what runs when they pass.
class CacheEntry {
 public:
  virtual ~CacheEntry() = default;
  /// 1: the guards pass; 0: they fail; -1: error (a Python exception is set).
  virtual int check(const FrameView& f) = 0;
  /// Produces the frame's return value: a new reference, or nullptr with an exception set.
  /// Runs with the hook active (frames it calls are intercepted).
  virtual PyObject* run(const FrameView& f) = 0;
  /// A description of the first guard that fails for `f` (for EMBER_LOGS=recompiles); empty
  /// when none fails or the entry cannot tell.
  virtual std::string first_failure(const FrameView& f) { return {}; }
  /// True for an entry that stands for running the frame's own bytecode on the calls its guards
  /// admit: the hook evaluates the frame itself and never calls run().
  virtual bool runs_original() const { return false; }
};

/// What a compiler decided for a frame.
struct CompileResult {
  enum class Action {
    Run,            ///< cache `entry` and run it
    Eager,          ///< run this call with the default evaluator; try again on the next call
    EagerUnhooked,  ///< as Eager, and the frames this call makes are not intercepted either
    SkipCode        ///< never intercept this code object again (callees still are)
  };
  Action action = Action::Eager;
  std::unique_ptr<CacheEntry> entry;
  std::string reason;  ///< why not Run (for logs)
};

/// Compiles frames. One instance per ember.compile call (it carries that call's options);
/// cache entries remember their compiler and match only while it is the active one.
class FrameCompiler {
 public:
  virtual ~FrameCompiler() = default;
  /// Called with the hook disabled on this thread. May raise a Python exception: return Eager
  /// with the exception set to propagate it to the caller of the frame.
  virtual CompileResult compile(const FrameView& f) = 0;
  /// How a frame whose cache entries all missed runs when this compiler decided before, for its
  /// code under the current global state, that it runs eagerly (Eager or EagerUnhooked); nullopt
  /// when it must compile. A decided frame is no compile: the hook counts no recompile, logs
  /// none, and the compiler makes no record (a frame called now and then under a
  /// TorchFunctionMode, which always runs eagerly, recompiled on each such call).
  virtual std::optional<CompileResult::Action> decided(const FrameView&) { return std::nullopt; }
  /// fullgraph=True: its top frame must be captured whole or raise, so a code object that
  /// another compiler marked SkipCode is still compiled when it is this compiler's top frame.
  virtual bool fullgraph() const { return false; }
};

/// Creates `ember.<module>.CompiledFunction(fn)`: a callable that calls `fn` with `compiler`
/// active on the calling thread. The frame of `top_code` (fn's code, or a module's forward) is
/// eligible even where the skip rules would exclude it. New reference.
PyObject* make_compiled_function(PyObject* fn, PyObject* top_code,
                                 std::shared_ptr<FrameCompiler> compiler);

/// While alive, frames started on this thread are not intercepted (as during compile() and
/// check()): for code a cache entry runs that is not the program's (reading sources).
class HookPause {
 public:
  HookPause();
  ~HookPause();
  HookPause(const HookPause&) = delete;
  HookPause& operator=(const HookPause&) = delete;

 private:
  const void* saved_;
};

/// Frames of `code`, and every frame they call, are not intercepted (torch.compiler.disable's
/// wrapper: the function it wraps runs as if no compiler were active). Permanent for the code.
void run_unhooked(PyCodeObject* code);
/// A frame of `code` marks the code of the function in its closure cell `cell` disabled
/// (torch.compiler.disable(fn, recursive=False)'s wrapper, whose cell holds fn): frames of that
/// code run with the default evaluator, except as a compiled function's top frame, and the
/// frames they call are intercepted. Permanent for the code (clear_cache keeps it).
void disable_closure_function(PyCodeObject* code, int cell);
/// Frames whose co_filename starts with one of these are not intercepted (their callees are).
void set_skip_prefixes(std::vector<std::string> prefixes);
/// Most entries of one compiler per code object (default 8; ember.config.cache_size_limit,
/// EMBER_CACHE_SIZE_LIMIT).
void set_cache_size_limit(int limit);

/// Counters, for tests and ember.metrics.
struct HookStats {
  int64_t frames_seen = 0;       ///< frames the hook was called for while active
  int64_t cache_hits = 0;        ///< cached entries whose check() passed and that ran
  int64_t compiles = 0;          ///< compile() calls
  int64_t recompiles = 0;        ///< compile() calls for a code object that already had entries
  int64_t eager_frames = 0;      ///< frames run with the default evaluator after a miss
  int64_t cache_limit_hits = 0;  ///< times a compiler's entries for a code reached the limit
};
HookStats hook_stats();
void reset_hook_stats();

/// Whether ember's eval function is the interpreter's eval function now (it is installed only
/// while some thread is inside a CompiledFunction call).
bool hook_installed();

/// Drops the cache entries of every compiler that no longer exists, everywhere. A compiled
/// function calls it when it is freed (its compiler usually goes with it): without it the entries
/// of a dropped ember.compile, with the compiled graphs and everything their guards hold (the
/// model's modules and parameters), would live as long as the code objects they are cached on,
/// that is, for the whole process. While a thread is inside a compiled call the purge waits until
/// the last one returns: a call may be walking a code object's entries.
void purge_dead_compilers();

/// Drops every cache entry of `code` (all codes when nullptr), and forgets SkipCode decisions and
/// cache-limit warnings for it.
void clear_cache(PyCodeObject* code);

}  // namespace ember::capture
