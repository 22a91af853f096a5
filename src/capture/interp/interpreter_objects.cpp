/// \file
/// Objects of the program's own classes: constructing them in the frame (a new object, then
/// its __init__ inlined), and the Python-level special methods (__setitem__, __setattr__,
/// __contains__, ...) that the interpreter inlines in place of the C slot that would run them.
///
/// Only "plain" classes are constructed: a class the program defines (its __init__ is program
/// code or inherited from object, dict or OrderedDict), whose instances hold all their state in
/// their __dict__ and, for dict subclasses, their items. That is also what lets an object the
/// frame made be rebuilt from a template when the graph returns it (rebuildable_object_type).
#include <string_view>

#include "capture/guards/plain_data.h"
#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

PyTypeObject* ordered_dict_type() {
  static auto* t = reinterpret_cast<PyTypeObject*>(imported("collections", "OrderedDict"));
  return t;
}

namespace {

/// The first base of `t` that is not a class defined in Python.
PyTypeObject* static_base_of(PyTypeObject* t) {
  while (t != nullptr && PyType_HasFeature(t, Py_TPFLAGS_HEAPTYPE)) t = t->tp_base;
  return t;
}

/// Whether instances of `t` keep state outside their __dict__ (non-empty __slots__, or no
/// __dict__ at all).
bool defines_slots(PyTypeObject* t) {
  if (t->tp_dictoffset == 0) return true;
  PyObject* mro = t->tp_mro;
  for (Py_ssize_t i = 0; mro != nullptr && i < PyTuple_GET_SIZE(mro); ++i) {
    auto* base = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (!PyType_HasFeature(base, Py_TPFLAGS_HEAPTYPE)) continue;
    PyObject* slots = PyDict_GetItemString(base->tp_dict, "__slots__");
    if (slots == nullptr) continue;
    if (PyUnicode_Check(slots) || PyObject_Length(slots) != 0) return true;
  }
  return false;
}

}  // namespace

/// The static base of `t` if `t` is a plain class (see the file comment), else nullptr.
PyTypeObject* plain_class_base(PyTypeObject* t) {
  if (!PyType_HasFeature(t, Py_TPFLAGS_HEAPTYPE)) return nullptr;
  if (Py_TYPE(reinterpret_cast<PyObject*>(t))->tp_call != PyType_Type.tp_call) {
    return nullptr;  // a metaclass with its own __call__
  }
  PyTypeObject* base = static_base_of(t);
  if (base != &PyBaseObject_Type && base != &PyDict_Type && base != ordered_dict_type()) {
    return nullptr;
  }
  if (t->tp_new != base->tp_new || defines_slots(t)) return nullptr;  // a Python __new__
  if (PyType_IsSubtype(t, reinterpret_cast<PyTypeObject*>(PyExc_BaseException))) return nullptr;
  return base;
}

bool is_namedtuple_class(PyObject* cls) {
  if (!PyType_Check(cls)) return false;
  auto* t = reinterpret_cast<PyTypeObject*>(cls);
  if (!PyType_HasFeature(t, Py_TPFLAGS_HEAPTYPE) || t->tp_base != &PyTuple_Type) return false;
  if (Py_TYPE(cls)->tp_call != PyType_Type.tp_call) return false;
  // The __new__ collections.namedtuple writes: it only calls tuple.__new__.
  PyObject* fn = PyDict_GetItemString(t->tp_dict, "__new__");
  if (fn != nullptr && Py_IS_TYPE(fn, &PyStaticMethod_Type))
    fn = PyStaticMethod_Type.tp_descr_get(fn, cls, cls);
  else if (fn != nullptr)
    Py_INCREF(fn);
  if (fn == nullptr) return false;
  nb::object new_fn = nb::steal(fn);
  if (!PyFunction_Check(fn)) return false;
  PyObject* module = PyFunction_GET_MODULE(fn);
  return module != nullptr && PyUnicode_Check(module) &&
         PyUnicode_Tailmatch(module, nb::str("namedtuple_").ptr(), 0, 11, -1) == 1 &&
         PyDict_GetItemString(PyFunction_GET_GLOBALS(fn), "_tuple_new") != nullptr;
}

PyTypeObject* rebuildable_object_type(nb::handle v) {
  if (PyType_Check(v.ptr()) || is_nn_module(v)) return nullptr;
  // An OrderedDict itself: rebuilt as the dict subclasses are, from its items and attributes.
  if (Py_TYPE(v.ptr()) == ordered_dict_type()) return ordered_dict_type();
  return plain_class_base(Py_TYPE(v.ptr()));
}

nb::object Interpreter::special_method(nb::handle obj, const char* name) {
  PyTypeObject* t = Py_TYPE(obj.ptr());
  if (!PyType_HasFeature(t, Py_TPFLAGS_HEAPTYPE)) return {};
  nb::object key = nb::steal(PyUnicode_InternFromString(name));
  PyObject* fn = _PyType_Lookup(t, key.ptr());
  if (fn == nullptr || !PyFunction_Check(fn)) return {};
  if (is_library_code(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn)))) return {};
  give_closure_source(fn);
  return checked(PyMethod_New(fn, obj.ptr()));
}

void Interpreter::give_closure_source(PyObject* fn) {
  if (PyFunction_GET_CLOSURE(fn) == nullptr || source_of(fn) >= 0) return;
  // Its closure cells (a decorator's wrapper) are read through the function: guarded.
  source_of_.emplace(fn, sources_.constant(fn));
  keepalive_.push_back(nb::borrow(fn));
}

bool Interpreter::constructible(nb::handle cls) const {
  PyTypeObject* t = reinterpret_cast<PyTypeObject*>(cls.ptr());
  if (plain_class_base(t) == nullptr) return false;
  if (PyObject_IsSubclass(cls.ptr(), module_type()) != 0) {
    PyErr_Clear();
    return false;  // modules made in the frame are not captured
  }
  nb::object init_name = nb::steal(PyUnicode_InternFromString("__init__"));
  PyObject* init = _PyType_Lookup(t, init_name.ptr());
  if (init != nullptr && PyFunction_Check(init)) {
    return !is_library_code(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(init)));
  }
  // No __init__ of its own: the class must be the program's, not one torch defines.
  PyObject* module = PyDict_GetItemString(t->tp_dict, "__module__");
  if (module == nullptr || !PyUnicode_Check(module)) return true;
  std::string_view m(PyUnicode_AsUTF8(module));
  return !(m == "torch" || m.substr(0, 6) == "torch.");
}

nb::object Interpreter::construct(nb::handle cls, std::vector<nb::object> args,
                                  nb::handle kwnames) {
  PyTypeObject* t = reinterpret_cast<PyTypeObject*>(cls.ptr());
  nb::object empty = checked(PyTuple_New(0));
  nb::object obj = fresh(checked(t->tp_new(t, empty.ptr(), nullptr)));
  nb::object init_name = nb::steal(PyUnicode_InternFromString("__init__"));
  PyObject* init = _PyType_Lookup(t, init_name.ptr());
  if (init != nullptr && PyFunction_Check(init)) {
    args.insert(args.begin(), obj);
    nb::object r = inline_function(init, std::move(args), kwnames);
    if (!r.is_none()) {
      PyErr_Format(PyExc_TypeError, "__init__() should return None, not '%s'",
                   Py_TYPE(r.ptr())->tp_name);
      throw nb::python_error();
    }
    return obj;
  }
  // object.__init__, dict.__init__ or OrderedDict.__init__: run for real on the new object.
  for (auto& a : args) {
    EMBER_UNSUPPORTED(is_plain_value(a) || is_fresh(a))
        << "constructing a " << t->tp_name << " from a " << type_name_of(a) << " at " << location();
  }
  args.insert(args.begin(), obj);
  call_real(nb::handle(init), std::move(args), kwnames);
  return obj;
}

nb::object Interpreter::deep_copy(nb::handle v) {
  int budget = 100000;
  EMBER_UNSUPPORTED(is_plain_data(v.ptr(), budget))
      << "copy.deepcopy of a " << type_name_of(v) << " that is not plain data at " << location();
  static PyObject* deepcopy = imported("copy", "deepcopy");
  bool all_fresh = true;
  for_each_mutable(v.ptr(), [&](PyObject* o) { all_fresh = all_fresh && is_fresh(o); });
  if (!all_fresh) {
    // What the copy holds is read from outside: its whole state is guarded.
    int source = source_of_value(v);
    EMBER_UNSUPPORTED(source >= 0)
        << "copy.deepcopy of a " << type_name_of(v) << " of unknown origin at " << location();
    guards_.add_state_equals(source, checked(PyObject_CallOneArg(deepcopy, v.ptr())).ptr());
  }
  nb::object copy = checked(PyObject_CallOneArg(deepcopy, v.ptr()));
  for_each_mutable(copy.ptr(), [&](PyObject* o) { fresh(nb::borrow(o)); });
  return copy;
}

}  // namespace ember::capture
