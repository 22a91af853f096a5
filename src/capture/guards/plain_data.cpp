#include "capture/guards/plain_data.h"

#include <nanobind/nanobind.h>

#include <string_view>

#include "capture/guards/guards.h"
#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

namespace {

bool is_atom(PyObject* v) {
  if (v == Py_None || v == Py_Ellipsis || PyBool_Check(v) || PyLong_CheckExact(v) ||
      PyFloat_CheckExact(v) || PyComplex_CheckExact(v) || PyUnicode_CheckExact(v) ||
      PyBytes_CheckExact(v)) {
    return true;
  }
  std::string_view n(Py_TYPE(v)->tp_name);
  return n == "torch.dtype" || n == "torch.device";
}

/// Atoms deepcopy keeps as they are and capture compares by identity.
bool is_identity_atom(PyObject* v) {
  return PyType_Check(v) || PyFunction_Check(v) || PyCFunction_Check(v) || PyModule_Check(v);
}

/// A plain class's instance that copies like any object (no copy or pickle hooks of its own).
bool is_plain_object(PyObject* v) {
  if (rebuildable_object_type(v) != &PyBaseObject_Type) return false;
  PyTypeObject* t = Py_TYPE(v);
  for (const char* hook : {"__deepcopy__", "__copy__", "__reduce__", "__reduce_ex__",
                           "__getstate__", "__setstate__"}) {
    nb::object name = nb::steal(PyUnicode_InternFromString(hook));
    PyObject* mine = _PyType_Lookup(t, name.ptr());
    PyObject* base = _PyType_Lookup(&PyBaseObject_Type, name.ptr());
    if (mine != base) return false;
  }
  return true;
}

nb::object instance_dict(PyObject* v) {
  nb::object d = nb::steal(PyObject_GenericGetDict(v, nullptr));
  if (!d.is_valid()) PyErr_Clear();
  return d;
}

}  // namespace

bool is_plain_data(PyObject* v, int& budget) {
  if (--budget < 0) return false;
  if (is_atom(v) || is_identity_atom(v) || is_enum_member(v)) return true;
  if (PyTuple_CheckExact(v) || PyList_CheckExact(v)) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(v); ++i) {
      if (!is_plain_data(PySequence_Fast_GET_ITEM(v, i), budget)) return false;
    }
    return true;
  }
  if (PyDict_CheckExact(v)) {
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(v, &pos, &key, &value)) {
      if (!is_atom(key) || !is_plain_data(value, budget)) return false;
    }
    return true;
  }
  if (PySet_CheckExact(v) || PyFrozenSet_CheckExact(v)) {
    nb::object items = nb::steal(PySequence_List(v));
    if (!items.is_valid()) {
      PyErr_Clear();
      return false;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items.ptr()); ++i) {
      if (!is_atom(PyList_GET_ITEM(items.ptr(), i))) return false;
    }
    return true;
  }
  if (is_plain_object(v)) {
    nb::object d = instance_dict(v);
    return d.is_valid() && is_plain_data(d.ptr(), budget);
  }
  return false;
}

bool plain_data_equal(PyObject* a, PyObject* b) {
  if (Py_TYPE(a) != Py_TYPE(b)) return false;
  if (is_identity_atom(b) || is_enum_member(b)) return a == b;
  if (is_atom(b)) return values_equal(a, b);
  if (PyTuple_CheckExact(b) || PyList_CheckExact(b)) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(b);
    if (PySequence_Fast_GET_SIZE(a) != n) return false;
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (!plain_data_equal(PySequence_Fast_GET_ITEM(a, i), PySequence_Fast_GET_ITEM(b, i))) {
        return false;
      }
    }
    return true;
  }
  if (PyDict_CheckExact(b)) {
    if (PyDict_GET_SIZE(a) != PyDict_GET_SIZE(b)) return false;
    PyObject *ka = nullptr, *va = nullptr, *kb = nullptr, *vb = nullptr;
    Py_ssize_t pa = 0, pb = 0;
    while (PyDict_Next(b, &pb, &kb, &vb)) {
      if (!PyDict_Next(a, &pa, &ka, &va)) return false;
      if (!values_equal(ka, kb) || !plain_data_equal(va, vb)) return false;
    }
    return true;
  }
  if (PySet_CheckExact(b) || PyFrozenSet_CheckExact(b)) {
    int r = PyObject_RichCompareBool(a, b, Py_EQ);
    if (r < 0) PyErr_Clear();
    return r == 1;
  }
  nb::object da = instance_dict(a);
  nb::object db = instance_dict(b);
  return da.is_valid() && db.is_valid() && plain_data_equal(da.ptr(), db.ptr());
}

void for_each_mutable(PyObject* v, const std::function<void(PyObject*)>& f) {
  if (PyTuple_CheckExact(v)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); ++i)
      for_each_mutable(PyTuple_GET_ITEM(v, i), f);
  } else if (PyList_CheckExact(v)) {
    f(v);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); ++i) for_each_mutable(PyList_GET_ITEM(v, i), f);
  } else if (PyDict_CheckExact(v)) {
    f(v);
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(v, &pos, &key, &value)) for_each_mutable(value, f);
  } else if (PySet_CheckExact(v)) {
    f(v);
  } else if (!is_atom(v) && !is_identity_atom(v) && !is_enum_member(v) &&
             !PyFrozenSet_CheckExact(v)) {
    f(v);
    nb::object d = instance_dict(v);
    if (d.is_valid()) for_each_mutable(d.ptr(), f);
  }
}

}  // namespace ember::capture
