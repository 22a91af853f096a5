/// \file
/// Calls of classes (call_policy.cpp): torch.set_grad_enabled, type(obj), functools.partial,
/// zero-argument super(), builtin types over the frame's values, numpy scalar types, exception
/// classes, and the program's plain classes (constructed, their __init__ inlined:
/// interpreter_objects.cpp) and named tuples; any other class only where runs_for_real allows.
#include <string>
#include <string_view>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

/// Builtin types whose constructors are safe to run for real.
bool is_safe_builtin_type(PyObject* t) {
  static PyObject* const kTypes[] = {
      reinterpret_cast<PyObject*>(&PyLong_Type),      reinterpret_cast<PyObject*>(&PyFloat_Type),
      reinterpret_cast<PyObject*>(&PyBool_Type),      reinterpret_cast<PyObject*>(&PyUnicode_Type),
      reinterpret_cast<PyObject*>(&PyTuple_Type),     reinterpret_cast<PyObject*>(&PyList_Type),
      reinterpret_cast<PyObject*>(&PyDict_Type),      reinterpret_cast<PyObject*>(&PySet_Type),
      reinterpret_cast<PyObject*>(&PyFrozenSet_Type), reinterpret_cast<PyObject*>(&PySlice_Type),
      reinterpret_cast<PyObject*>(&PyRange_Type),     reinterpret_cast<PyObject*>(&PyEnum_Type),
      reinterpret_cast<PyObject*>(&PyReversed_Type),  reinterpret_cast<PyObject*>(&PyZip_Type),
      reinterpret_cast<PyObject*>(&PyMap_Type),       reinterpret_cast<PyObject*>(&PyFilter_Type),
      reinterpret_cast<PyObject*>(&PyComplex_Type),   reinterpret_cast<PyObject*>(&PySuper_Type)};
  for (PyObject* k : kTypes) {
    if (t == k) return true;
  }
  // A dict that keeps its order (timm's feature extractors collect their outputs in one).
  return t == reinterpret_cast<PyObject*>(ordered_dict_type());
}

nb::object Interpreter::call_class(nb::handle callable, std::vector<nb::object> args,
                                   nb::handle kwnames) {
  PyObject* c = callable.ptr();
  static PyObject* set_grad = imported("torch", "set_grad_enabled");
  if (c == set_grad) return set_grad_enabled(callable, std::move(args), kwnames);
  if (c == reinterpret_cast<PyObject*>(&PyType_Type) && args.size() == 1) {
    return call_real(callable, std::move(args), kwnames, /*pin=*/false);  // type(obj)
  }
  if (type_name_of(callable) == "type" &&
      std::string_view(reinterpret_cast<PyTypeObject*>(c)->tp_name) == "functools.partial") {
    return fresh(call_real(callable, std::move(args), kwnames));
  }
  if (c == reinterpret_cast<PyObject*>(&PySuper_Type) && args.empty()) {
    // Zero-argument super(): the __class__ cell and the first argument of the current frame.
    Frame& fr = *frames_.back();
    PyCodeObject* co = fr.code;
    nb::object cls;
    for (int i = 0; i < static_cast<int>(fr.locals.size()); ++i) {
      PyObject* n = local_name(co, i);
      if (n != nullptr && PyUnicode_CompareWithASCIIString(n, "__class__") == 0 &&
          fr.locals[static_cast<size_t>(i)].is_valid() &&
          PyCell_Check(fr.locals[static_cast<size_t>(i)].ptr())) {
        cls = nb::borrow(PyCell_GET(fr.locals[static_cast<size_t>(i)].ptr()));
      }
    }
    EMBER_UNSUPPORTED(cls.is_valid() && co->co_argcount > 0 && fr.locals[0].is_valid())
        << "super() outside a method at " << location();
    nb::object self = fr.locals[0];
    if (PyCell_Check(self.ptr())) self = nb::borrow(PyCell_GET(self.ptr()));
    args = {cls, self};
    return call_real(callable, std::move(args), kwnames, /*pin=*/false);
  }
  static PyObject* chain = imported("itertools", "chain");
  if (is_safe_builtin_type(c) || c == chain) {
    for (auto& a : args) {
      a = materialized(a);
      EMBER_UNSUPPORTED(!a.is_valid() || is_plain_value(a) || is_fresh(a) ||
                        PyIter_Check(a.ptr()) || PyFunction_Check(a.ptr()) ||
                        PyType_Check(a.ptr()) || PyModule_Check(a.ptr()) ||
                        PyCFunction_Check(a.ptr()))
          << "calling " << name_of(callable) << " on a " << type_name_of(a) << " at " << location();
    }
    if (c == reinterpret_cast<PyObject*>(&PyMap_Type) ||
        c == reinterpret_cast<PyObject*>(&PyFilter_Type)) {
      EMBER_UNSUPPORTED(!args.empty() && !PyFunction_Check(args[0].ptr()))
          << name_of(callable) << " with a Python function at " << location();
    }
    // list, tuple, enumerate, zip, reversed, chain, range and slice hold what they are given;
    // the others hash, compare, convert or call it.
    bool holds_only = c == reinterpret_cast<PyObject*>(&PyList_Type) ||
                      c == reinterpret_cast<PyObject*>(&PyTuple_Type) ||
                      c == reinterpret_cast<PyObject*>(&PyEnum_Type) ||
                      c == reinterpret_cast<PyObject*>(&PyZip_Type) ||
                      c == reinterpret_cast<PyObject*>(&PyReversed_Type) ||
                      c == reinterpret_cast<PyObject*>(&PyRange_Type) ||
                      c == reinterpret_cast<PyObject*>(&PySlice_Type) || c == chain;
    return call_real(callable, std::move(args), kwnames, /*pin=*/!holds_only);
  }
  if (is_numpy_scalar_type(c) && !kwnames.is_valid() && args.size() <= 1 &&
      (args.empty() || is_guardable_constant(args[0].ptr()))) {
    return call_real(callable, std::move(args), kwnames);  // np.float64(1.5)
  }
  if (PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(c),
                       reinterpret_cast<PyTypeObject*>(PyExc_BaseException))) {
    return call_real(callable, std::move(args), kwnames);
  }
  if (constructible(callable)) return construct(callable, std::move(args), kwnames);
  if (is_namedtuple_class(c)) return fresh(call_real(callable, std::move(args), kwnames));
  EMBER_UNSUPPORTED(runs_for_real(callable))
      << "constructing a " << name_of(callable) << " at " << location();
  return call_real(callable, std::move(args), kwnames);
}

}  // namespace ember::capture
