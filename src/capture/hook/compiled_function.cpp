/// \file
/// CompiledFunction: the callable that make_compiled_function returns. A call makes its compiler
/// the active one on the calling thread (installing the eval function when this is the thread's
/// outermost compiled call), calls the wrapped callable, and restores the previous state. It is a
/// vectorcall type with no Python frame of its own; as a descriptor it behaves like a function
/// (Py_TPFLAGS_METHOD_DESCRIPTOR), so it works as a method decorator without a bound-method
/// allocation per call.
#include <Python.h>
#include <structmember.h>

#include <memory>
#include <new>
#include <utility>

#include "capture/hook/frame_hook.h"
#include "capture/hook/hook_state.h"

namespace ember::capture {
namespace {

struct CompiledFunctionObject {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* fn;
  PyObject* top_code;  // a code object or nullptr
  PyObject* weakreflist;
  std::shared_ptr<FrameCompiler> compiler;
};

CompiledFunctionObject* as_cf(PyObject* self) {
  return reinterpret_cast<CompiledFunctionObject*>(self);
}

PyObject* cf_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  CompiledFunctionObject* cf = as_cf(self);
  detail::ThreadState& st = detail::thread_state;
  const std::shared_ptr<FrameCompiler>* saved_compiler = st.compiler;
  PyObject* saved_top = st.top_code;
  if (st.depth++ == 0) detail::activate_thread();
  st.compiler = &cf->compiler;
  st.top_code = cf->top_code;
  PyObject* result = PyObject_Vectorcall(cf->fn, args, nargsf, kwnames);
  st.compiler = saved_compiler;
  st.top_code = saved_top;
  if (--st.depth == 0) detail::deactivate_thread();
  return result;
}

int cf_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(as_cf(self)->fn);
  Py_VISIT(as_cf(self)->top_code);
  return 0;
}

int cf_clear(PyObject* self) {
  Py_CLEAR(as_cf(self)->fn);
  Py_CLEAR(as_cf(self)->top_code);
  return 0;
}

void cf_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  CompiledFunctionObject* cf = as_cf(self);
  if (cf->weakreflist != nullptr) PyObject_ClearWeakRefs(self);
  cf_clear(self);
  std::weak_ptr<FrameCompiler> compiler = cf->compiler;
  cf->compiler.~shared_ptr();
  type->tp_free(self);
  Py_DECREF(type);
  if (compiler.expired()) purge_dead_compilers();
}

PyObject* cf_descr_get(PyObject* self, PyObject* obj, PyObject* type) {
  if (obj == nullptr || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

PyObject* cf_repr(PyObject* self) {
  return PyUnicode_FromFormat("<ember CompiledFunction of %R>", as_cf(self)->fn);
}

PyObject* cf_get_top_code(PyObject* self, void*) {
  PyObject* code = as_cf(self)->top_code;
  return Py_NewRef(code != nullptr ? code : Py_None);
}

PyObject* cf_get_name(PyObject* self, void*) {
  return PyObject_GetAttrString(as_cf(self)->fn, "__name__");
}

PyMemberDef cf_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(CompiledFunctionObject, vectorcall), READONLY,
     nullptr},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(CompiledFunctionObject, weakreflist), READONLY,
     nullptr},
    {"__wrapped__", T_OBJECT, offsetof(CompiledFunctionObject, fn), READONLY,
     const_cast<char*>("the wrapped callable")},
    {nullptr, 0, 0, 0, nullptr},
};

PyGetSetDef cf_getset[] = {
    {"top_code", cf_get_top_code, nullptr,
     const_cast<char*>("the code object eligible even where skip rules exclude it"), nullptr},
    {"__name__", cf_get_name, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot cf_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(cf_dealloc)},
    {Py_tp_traverse, reinterpret_cast<void*>(cf_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(cf_clear)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_descr_get, reinterpret_cast<void*>(cf_descr_get)},
    {Py_tp_repr, reinterpret_cast<void*>(cf_repr)},
    {Py_tp_members, cf_members},
    {Py_tp_getset, cf_getset},
    {0, nullptr},
};

PyType_Spec cf_spec = {
    "ember.CompiledFunction",
    sizeof(CompiledFunctionObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
        Py_TPFLAGS_METHOD_DESCRIPTOR,
    cf_slots,
};

PyTypeObject* compiled_function_type() {
  static PyTypeObject* type = nullptr;
  if (type == nullptr) type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&cf_spec));
  return type;
}

}  // namespace

PyObject* make_compiled_function(PyObject* fn, PyObject* top_code,
                                 std::shared_ptr<FrameCompiler> compiler) {
  if (fn == nullptr || !PyCallable_Check(fn)) {
    PyErr_SetString(PyExc_TypeError, "ember: CompiledFunction needs a callable");
    return nullptr;
  }
  if (top_code == Py_None) top_code = nullptr;
  if (top_code != nullptr && !PyCode_Check(top_code)) {
    PyErr_SetString(PyExc_TypeError, "ember: top_code must be a code object or None");
    return nullptr;
  }
  if (compiler == nullptr) {
    PyErr_SetString(PyExc_TypeError, "ember: CompiledFunction needs a compiler");
    return nullptr;
  }
  PyTypeObject* type = compiled_function_type();
  if (type == nullptr) return nullptr;
  PyObject* self = type->tp_alloc(type, 0);
  if (self == nullptr) return nullptr;
  CompiledFunctionObject* cf = as_cf(self);
  cf->vectorcall = cf_vectorcall;
  cf->fn = Py_NewRef(fn);
  cf->top_code = Py_XNewRef(top_code);
  cf->weakreflist = nullptr;
  new (&cf->compiler) std::shared_ptr<FrameCompiler>(std::move(compiler));
  return self;
}

}  // namespace ember::capture
