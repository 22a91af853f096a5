/// \file
/// The part of the compatibility layer (compat.h) that is public (unstable) API on every supported
/// minor: installing the eval function, chaining to the previous one, co_extra, thread tracing.
#include <Python.h>

#if PY_MAJOR_VERSION != 3 || PY_MINOR_VERSION < 11
#error "ember's frame hook supports CPython 3.11 to 3.13"
#elif PY_MINOR_VERSION > 13
// A new minor changes _PyInterpreterFrame and who pops frames: audit compat_3XX.c before adding it.
#error "ember's frame hook has not been audited for this CPython minor (3.11 to 3.13 only)"
#endif

#include "capture/hook/compat.h"

// The evaluator that was installed before ours; frames we do not answer go there. One interpreter
// only (subinterpreters are not supported).
static _PyFrameEvalFunction previous_eval = NULL;

// The frame this thread is passing to a previous evaluator, if any. Two evaluators that each
// saved the other as their previous (Dynamo's shim installed before ember's hook, then again
// over it by a torch.compile call inside an ember-compiled program) would pass a frame between
// them forever: a frame that comes back while it is being chained runs in the default evaluator.
// One slot per thread for the whole process: both of ember's modules (_C and _capture_core) carry
// this file, and a frame can pass through both; the first module installed publishes its slot
// as the capsule sys._ember_chaining_slot, and later ones use it.
static _Thread_local struct _PyInterpreterFrame* own_chaining = NULL;
static struct _PyInterpreterFrame** own_chaining_slot(void) {
  return &own_chaining;
}
typedef struct _PyInterpreterFrame** (*ChainingSlot)(void);
static ChainingSlot chaining_slot = own_chaining_slot;

static void share_chaining_slot(void) {
  static int done = 0;
  if (done) return;
  done = 1;
  PyObject* capsule = PySys_GetObject("_ember_chaining_slot");  // borrowed
  if (capsule != NULL && PyCapsule_IsValid(capsule, "ember.chaining_slot")) {
    chaining_slot = (ChainingSlot)PyCapsule_GetPointer(capsule, "ember.chaining_slot");
    return;
  }
  PyObject* mine = PyCapsule_New((void*)own_chaining_slot, "ember.chaining_slot", NULL);
  if (mine == NULL || PySys_SetObject("_ember_chaining_slot", mine) != 0) PyErr_Clear();
  Py_XDECREF(mine);
}

PyObject* ember_compat_eval_default(PyThreadState* ts, struct _PyInterpreterFrame* frame,
                                    int throwflag) {
  struct _PyInterpreterFrame** chaining = chaining_slot();
  if (previous_eval != NULL && frame != *chaining &&
      previous_eval != _PyInterpreterState_GetEvalFrameFunc(ts->interp)) {
    struct _PyInterpreterFrame* saved = *chaining;
    *chaining = frame;
    PyObject* result = previous_eval(ts, frame, throwflag);
    *chaining = saved;
    return result;
  }
  return _PyEval_EvalFrameDefault(ts, frame, throwflag);
}

int ember_compat_is_chaining(struct _PyInterpreterFrame* frame) {
  return frame == *chaining_slot();
}

void ember_compat_install(_PyFrameEvalFunction fn) {
  share_chaining_slot();
  PyInterpreterState* interp = PyInterpreterState_Get();
  _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
  if (current == fn) return;
  previous_eval = current == _PyEval_EvalFrameDefault ? NULL : current;
  _PyInterpreterState_SetEvalFrameFunc(interp, fn);
}

void ember_compat_uninstall(_PyFrameEvalFunction fn) {
  PyInterpreterState* interp = PyInterpreterState_Get();
  if (_PyInterpreterState_GetEvalFrameFunc(interp) != fn) return;
  _PyInterpreterState_SetEvalFrameFunc(
      interp, previous_eval != NULL ? previous_eval : _PyEval_EvalFrameDefault);
}

int ember_compat_is_installed(_PyFrameEvalFunction fn) {
  return _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == fn;
}

int ember_compat_tstate_tracing(PyThreadState* ts) {
  return ts->tracing > 0;
}

uintptr_t ember_compat_datastack_top(PyThreadState* ts) {
  return (uintptr_t)ts->datastack_top;
}

Py_ssize_t ember_compat_request_code_extra_index(freefunc free_fn) {
#if PY_MINOR_VERSION == 11
  return _PyEval_RequestCodeExtraIndex(free_fn);
#else
  return PyUnstable_Eval_RequestCodeExtraIndex(free_fn);
#endif
}

int ember_compat_get_code_extra(PyObject* code, Py_ssize_t index, void** extra) {
#if PY_MINOR_VERSION == 11
  return _PyCode_GetExtra(code, index, extra);
#else
  return PyUnstable_Code_GetExtra(code, index, extra);
#endif
}

int ember_compat_set_code_extra(PyObject* code, Py_ssize_t index, void* extra) {
#if PY_MINOR_VERSION == 11
  return _PyCode_SetExtra(code, index, extra);
#else
  return PyUnstable_Code_SetExtra(code, index, extra);
#endif
}
