/// \file
/// The per-CPython-minor compatibility layer of the frame hook: a version-neutral C API over the
/// interpreter internals the hook needs (the `_PyInterpreterFrame` layout, who pops a frame, the
/// eval-function and co_extra entry points). One C file per minor implements it (compat_311.c,
/// compat_312.c, compat_313.c; each compiles to nothing unless PY_MINOR_VERSION matches) and they
/// are the only files that include Py_BUILD_CORE headers; compat_common.c holds what is public
/// API on every supported minor. Everything here runs with the GIL held.
#pragma once

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

struct _PyInterpreterFrame;

/// What the hook reads from a frame, filled by one call (borrowed pointers into the frame).
typedef struct EmberFrameInfo {
  PyCodeObject* code;
  PyObject* function;  ///< the frame's function object
  PyObject* globals;
  PyObject* builtins;
  PyObject** localsplus;
  int nlocalsplus;
} EmberFrameInfo;

/// The frame's code object (borrowed).
PyCodeObject* ember_compat_frame_code(struct _PyInterpreterFrame* frame);

/// 1 when the frame is owned by the thread (a plain call, not a generator or frame object) and has
/// not started: its instruction pointer is before the first RESUME (`_co_firsttraceable`). Only
/// such frames may be answered without evaluation and then abandoned.
int ember_compat_frame_is_fresh_call(struct _PyInterpreterFrame* frame);

/// 1 when the frame belongs to a generator or coroutine (a resumption: send/next/throw).
int ember_compat_frame_is_generator_owned(struct _PyInterpreterFrame* frame);

/// Fills `out` from the frame.
void ember_compat_frame_info(struct _PyInterpreterFrame* frame, EmberFrameInfo* out);

/// 1 while the thread is inside a trace or profile callback (its frames must not be intercepted).
int ember_compat_tstate_tracing(PyThreadState* ts);

/// Evaluates the frame with the evaluator that was installed before ours (CPython's default when
/// there was none). The evaluator owns the frame from then on: never abandon it afterwards.
PyObject* ember_compat_eval_default(PyThreadState* ts, struct _PyInterpreterFrame* frame,
                                    int throwflag);
/// Whether `frame` is the one this thread is passing to the previous evaluator now: it came back
/// to ember's hook through an evaluator that chains to ember (see compat_common.c).
int ember_compat_is_chaining(struct _PyInterpreterFrame* frame);

/// Installs `fn` as the interpreter's eval function, remembering the previous one for
/// ember_compat_eval_default. A no-op when `fn` is already installed.
void ember_compat_install(_PyFrameEvalFunction fn);
/// Puts the previous eval function back if `fn` is the installed one (another PEP 523 user that
/// installed itself on top of us is left in place).
void ember_compat_uninstall(_PyFrameEvalFunction fn);
/// 1 when `fn` is the interpreter's eval function now.
int ember_compat_is_installed(_PyFrameEvalFunction fn);

/// Releases a fresh frame (ember_compat_frame_is_fresh_call) that the hook answered without
/// evaluating it: whatever the version's caller will not do. 3.11: nothing (`_PyEval_Vector` clears
/// and pops the frame after the eval function returns). 3.12: clear (locals, function, code) and
/// pop it from the thread's data stack. 3.13: `_PyEval_FrameClearAndPop`. Must be called exactly
/// once for such a frame, after the last use of its localsplus, also when returning NULL.
void ember_compat_abandon_frame(PyThreadState* ts, struct _PyInterpreterFrame* frame);

/// The thread's data-stack top (`datastack_top`), as an address: for leak tests only.
uintptr_t ember_compat_datastack_top(PyThreadState* ts);

/// co_extra: a new index whose values `free_fn` releases (-1 with no exception when the
/// interpreter's table is full); get/set as CPython's unstable code-extra API (0 / -1 with an
/// exception set).
Py_ssize_t ember_compat_request_code_extra_index(freefunc free_fn);
int ember_compat_get_code_extra(PyObject* code, Py_ssize_t index, void** extra);
int ember_compat_set_code_extra(PyObject* code, Py_ssize_t index, void* extra);

#ifdef __cplusplus
}  // extern "C"
#endif
