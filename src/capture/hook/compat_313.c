/// \file
/// compat.h for CPython 3.13. The frame is `_PyInterpreterFrame` with `f_executable` (the code
/// object here), `f_funcobj` and `instr_ptr` (pointing at the next instruction: a fresh frame has
/// lasti 0). As on 3.12, `_PyEval_Vector` leaves clearing and popping the frame to the eval
/// function; 3.13 exports `_PyEval_FrameClearAndPop` (for its JIT), which does exactly that.
#include <Python.h>

#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 13

#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include "capture/hook/compat.h"

// Declared in internal/pycore_ceval.h (PyAPI_FUNC, exported); that header drags in much more.
PyAPI_FUNC(void) _PyEval_FrameClearAndPop(PyThreadState* tstate, _PyInterpreterFrame* frame);

PyCodeObject* ember_compat_frame_code(struct _PyInterpreterFrame* frame) {
  return _PyFrame_GetCode(frame);
}

int ember_compat_frame_is_fresh_call(struct _PyInterpreterFrame* frame) {
  // instr_ptr points at the next instruction: a fresh frame is at 0 and a frame whose first RESUME
  // has run is past `_co_firsttraceable`.
  PyCodeObject* code = _PyFrame_GetCode(frame);
  return frame->owner == FRAME_OWNED_BY_THREAD &&
         _PyInterpreterFrame_LASTI(frame) <= code->_co_firsttraceable;
}

int ember_compat_frame_is_generator_owned(struct _PyInterpreterFrame* frame) {
  return frame->owner == FRAME_OWNED_BY_GENERATOR;
}

void ember_compat_frame_info(struct _PyInterpreterFrame* frame, EmberFrameInfo* out) {
  PyCodeObject* code = _PyFrame_GetCode(frame);
  out->code = code;
  out->function = frame->f_funcobj;
  out->globals = frame->f_globals;
  out->builtins = frame->f_builtins;
  out->localsplus = frame->localsplus;
  out->nlocalsplus = code->co_nlocalsplus;
}

void ember_compat_abandon_frame(PyThreadState* ts, struct _PyInterpreterFrame* frame) {
  _PyEval_FrameClearAndPop(ts, frame);
}

#endif  // 3.13
