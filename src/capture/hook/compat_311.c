/// \file
/// compat.h for CPython 3.11. The frame is `_PyInterpreterFrame` with `f_func`, `f_code` and
/// `prev_instr` (a fresh frame has lasti -1). The caller of the eval function (`_PyEval_Vector`)
/// clears and pops the frame after the eval function returns, also for a frame we answered
/// without evaluating it, so abandoning a frame is a no-op here.
#include <Python.h>

#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 11

#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#include "capture/hook/compat.h"

PyCodeObject* ember_compat_frame_code(struct _PyInterpreterFrame* frame) {
  return frame->f_code;
}

int ember_compat_frame_is_fresh_call(struct _PyInterpreterFrame* frame) {
  // Same test as _PyFrame_IsIncomplete: no instruction at or after the first RESUME has run.
  return frame->owner == FRAME_OWNED_BY_THREAD &&
         _PyInterpreterFrame_LASTI(frame) < frame->f_code->_co_firsttraceable;
}

int ember_compat_frame_is_generator_owned(struct _PyInterpreterFrame* frame) {
  return frame->owner == FRAME_OWNED_BY_GENERATOR;
}

void ember_compat_frame_info(struct _PyInterpreterFrame* frame, EmberFrameInfo* out) {
  out->code = frame->f_code;
  out->function = (PyObject*)frame->f_func;
  out->globals = frame->f_globals;
  out->builtins = frame->f_builtins;
  out->localsplus = frame->localsplus;
  out->nlocalsplus = frame->f_code->co_nlocalsplus;
}

void ember_compat_abandon_frame(PyThreadState* ts, struct _PyInterpreterFrame* frame) {
  (void)ts;
  (void)frame;
}

#endif  // 3.11
