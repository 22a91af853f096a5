/// \file
/// compat.h for CPython 3.12. The frame is `_PyInterpreterFrame` with `f_code`, `f_funcobj` and
/// `prev_instr` (a fresh frame has lasti -1). `_PyEval_Vector` leaves clearing and popping the
/// frame to the eval function (the default evaluator does it when the frame returns), so a frame
/// we answered without evaluating it must be cleared and popped here. CPython's own
/// `_PyFrame_ClearExceptCode` and `_PyThreadState_PopFrame` are not exported; the two functions
/// below do what they do for the only case we need: a thread-owned frame that has not started,
/// so no frame object can exist and its stack holds only localsplus.
#include <Python.h>

#if PY_MAJOR_VERSION == 3 && PY_MINOR_VERSION == 12

#define Py_BUILD_CORE
// python/cpython#105268: the public and internal headers of 3.12.0/3.12.1 both define this.
#undef _PyGC_FINALIZED
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
  out->function = frame->f_funcobj;
  out->globals = frame->f_globals;
  out->builtins = frame->f_builtins;
  out->localsplus = frame->localsplus;
  out->nlocalsplus = frame->f_code->co_nlocalsplus;
}

// The data-stack pop of CPython 3.12 (Python/pystate.c, _PyThreadState_PopFrame): the frame is the
// top of the data stack; when it starts a chunk, that chunk is released and the previous one
// becomes current again (push_chunk saved its `top`, and never pops the root chunk).
static void pop_frame(PyThreadState* ts, struct _PyInterpreterFrame* frame) {
  PyObject** base = (PyObject**)frame;
  _PyStackChunk* chunk = ts->datastack_chunk;
  if (base == &chunk->data[0]) {
    _PyStackChunk* previous = chunk->previous;
    ts->datastack_top = &previous->data[previous->top];
    ts->datastack_chunk = previous;
    ts->datastack_limit = (PyObject**)(((char*)previous) + previous->size);
    // Chunks come from the object arena allocator (_PyObject_VirtualAlloc/Free).
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    arena.free(arena.ctx, chunk, chunk->size);
  } else {
    ts->datastack_top = base;
  }
}

void ember_compat_abandon_frame(PyThreadState* ts, struct _PyInterpreterFrame* frame) {
  // As clear_thread_frame (Python/ceval.c) = _PyFrame_ClearExceptCode + code + pop. The frame is
  // incomplete, so nothing could have created its frame object (sys._getframe and tracebacks skip
  // incomplete frames) and take_ownership is never needed.
  if (frame->frame_obj != NULL) {
    Py_FatalError("ember: abandoning a frame that has a frame object");
  }
  for (int i = 0; i < frame->stacktop; i++) Py_XDECREF(frame->localsplus[i]);
  Py_XDECREF(frame->f_locals);
  Py_DECREF(frame->f_funcobj);
  Py_DECREF(frame->f_code);
  // Decrefs above may run finalizers; they push frames above ours and pop them again, so the
  // frame is still the top of the data stack here.
  pop_frame(ts, frame);
}

#endif  // 3.12
