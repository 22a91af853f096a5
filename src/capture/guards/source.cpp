#include "capture/guards/source.h"

#include "capture/guards/guards.h"

#include <nanobind/stl/string.h>

#include "support/error.h"

namespace nb = nanobind;

namespace ember::capture {

namespace {

std::string repr(PyObject* o) {
  nb::object r = nb::steal(PyObject_Repr(o));
  if (!r.is_valid()) {
    PyErr_Clear();
    return "<?>";
  }
  return nb::cast<std::string>(r);
}

}  // namespace

PyObject* module_member_of(PyObject* module, PyObject* name, int registry) {
  static PyObject* const kRegistries[] = {PyUnicode_InternFromString("_parameters"),
                                          PyUnicode_InternFromString("_buffers"),
                                          PyUnicode_InternFromString("_modules")};
  PyObject* dict = PyObject_GenericGetDict(module, nullptr);
  if (dict == nullptr) return nullptr;
  PyObject* v = nullptr;
  // An instance attribute of that name would shadow the registry (getattr looks there first).
  if (PyDict_GetItemWithError(dict, name) == nullptr && !PyErr_Occurred()) {
    PyObject* reg = PyDict_GetItemWithError(dict, kRegistries[registry]);
    if (reg != nullptr && PyDict_Check(reg)) {
      v = PyDict_GetItemWithError(reg, name);
      Py_XINCREF(v);
    }
  }
  Py_DECREF(dict);
  if (v == nullptr && !PyErr_Occurred()) {
    PyErr_SetObject(PyExc_AttributeError, name);
  }
  return v;
}

int SourceTable::add(SourceKind kind, int parent, int index, PyObject* key) {
  std::string key_text;
  if (key != nullptr) {
    // A value by its type and repr; anything else (a class or typing form as a dict key) by
    // its identity: two of them may print the same.
    key_text =
        std::string(Py_TYPE(key)->tp_name) + ":" +
        (is_guardable_constant(key) ? repr(key)
                                    : "id:" + std::to_string(reinterpret_cast<uintptr_t>(key)));
  }
  auto k = std::make_tuple(static_cast<int>(kind), parent, index, key_text);
  auto it = dedup_.find(k);
  if (it != dedup_.end()) return it->second;
  Source s;
  s.kind = kind;
  s.parent = parent;
  s.index = index;
  if (key != nullptr) s.key = nb::borrow(key);
  nodes_.push_back(std::move(s));
  local_names_.emplace_back();
  int id = static_cast<int>(nodes_.size()) - 1;
  dedup_.emplace(k, id);
  return id;
}

int SourceTable::local(int slot, PyObject* name) {
  int id = add(SourceKind::Local, -1, slot, nullptr);
  if (local_names_[static_cast<size_t>(id)].empty() && name != nullptr && PyUnicode_Check(name)) {
    local_names_[static_cast<size_t>(id)] = PyUnicode_AsUTF8(name);
  }
  return id;
}

int SourceTable::global(PyObject* name) {
  return add(SourceKind::Global, -1, 0, name);
}
int SourceTable::builtin(PyObject* name) {
  return add(SourceKind::Builtin, -1, 0, name);
}

int SourceTable::constant(PyObject* obj) {
  // Keyed by identity: two dicts may print the same.
  auto k = std::make_tuple(static_cast<int>(SourceKind::Const), -1, 0,
                           std::to_string(reinterpret_cast<uintptr_t>(obj)));
  auto it = dedup_.find(k);
  if (it != dedup_.end()) return it->second;
  Source s;
  s.kind = SourceKind::Const;
  s.key = nb::borrow(obj);
  nodes_.push_back(std::move(s));
  local_names_.emplace_back();
  int id = static_cast<int>(nodes_.size()) - 1;
  dedup_.emplace(k, id);
  return id;
}

int SourceTable::module_member(int parent, PyObject* name, int registry) {
  EMBER_INTERNAL_ASSERT(parent >= 0 && parent < size() && registry >= 0 && registry < 3)
      << "a module member of a missing source";
  return add(SourceKind::ModuleMember, parent, registry, name);
}

int SourceTable::item_of(int parent, int key_source) {
  EMBER_INTERNAL_ASSERT(parent >= 0 && parent < size() && key_source >= 0 && key_source < size())
      << "an item of a missing source";
  return add(SourceKind::ItemOf, parent, key_source, nullptr);
}

int SourceTable::has_attr(int parent, PyObject* name) {
  EMBER_INTERNAL_ASSERT(parent >= 0 && parent < size()) << "hasattr of a missing source";
  return add(SourceKind::HasAttr, parent, 0, name);
}

int SourceTable::iter_rest(int parent) {
  EMBER_INTERNAL_ASSERT(parent >= 0 && parent < size()) << "the rest of a missing source";
  return add(SourceKind::IterRest, parent, 0, nullptr);
}

PyObject* iterator_rest(PyObject* it) {
  std::string_view type(Py_TYPE(it)->tp_name);
  if (type != "list_iterator" && type != "tuple_iterator" && type != "range_iterator" &&
      type != "dict_keyiterator" && type != "dict_valueiterator" && type != "dict_itemiterator") {
    PyErr_Format(PyExc_TypeError, "ember: the rest of a %s is not read", Py_TYPE(it)->tp_name);
    return nullptr;
  }
  // (iter, (sequence,), position), or (iter, (sequence,)) from position 0: dict iterators give
  // a list of what is left, list and tuple iterators their sequence itself.
  nb::object reduced = nb::steal(PyObject_CallMethod(it, "__reduce__", nullptr));
  if (!reduced.is_valid()) return nullptr;
  PyObject* r = reduced.ptr();
  if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) < 2 || !PyTuple_Check(PyTuple_GET_ITEM(r, 1)) ||
      PyTuple_GET_SIZE(PyTuple_GET_ITEM(r, 1)) != 1) {
    PyErr_SetString(PyExc_TypeError, "ember: an iterator's __reduce__ of an unknown form");
    return nullptr;
  }
  Py_ssize_t position = 0;
  if (PyTuple_GET_SIZE(r) >= 3) {
    position = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 2));
    if (position < 0 && PyErr_Occurred()) return nullptr;
  }
  nb::object all = nb::steal(PySequence_List(PyTuple_GET_ITEM(PyTuple_GET_ITEM(r, 1), 0)));
  if (!all.is_valid()) return nullptr;
  return PyList_GetSlice(all.ptr(), position, PY_SSIZE_T_MAX);
}

int SourceTable::attr(int parent, PyObject* name) {
  EMBER_INTERNAL_ASSERT(parent >= 0 && parent < size()) << "attr of a missing source";
  return add(SourceKind::Attr, parent, 0, name);
}

int SourceTable::item(int parent, PyObject* key) {
  EMBER_INTERNAL_ASSERT(parent >= 0 && parent < size()) << "item of a missing source";
  return add(SourceKind::Item, parent, 0, key);
}

std::string SourceTable::name(int id) const {
  const Source& s = at(id);
  switch (s.kind) {
    case SourceKind::Local: {
      const std::string& n = local_names_[static_cast<size_t>(id)];
      return "L['" + (n.empty() ? std::to_string(s.index) : n) + "']";
    }
    case SourceKind::Global:
      return "G[" + repr(s.key.ptr()) + "]";
    case SourceKind::Builtin:
      return "B[" + repr(s.key.ptr()) + "]";
    case SourceKind::Attr:
    case SourceKind::ModuleMember:
      return name(s.parent) + "." + nb::cast<std::string>(nb::str(s.key));
    case SourceKind::Item:
      return name(s.parent) + "[" + repr(s.key.ptr()) + "]";
    case SourceKind::ItemOf:
      return name(s.parent) + "[" + name(s.index) + "]";
    case SourceKind::HasAttr:
      return "hasattr(" + name(s.parent) + ", " + repr(s.key.ptr()) + ")";
    case SourceKind::IterRest:
      return "list(" + name(s.parent) + ")";
    case SourceKind::Const:
      if (PyDict_Check(s.key.ptr())) {
        PyObject* mod = PyDict_GetItemString(s.key.ptr(), "__name__");
        if (mod != nullptr && PyUnicode_Check(mod)) {
          return std::string("globals of ") + PyUnicode_AsUTF8(mod);
        }
      }
      return "<" + std::string(Py_TYPE(s.key.ptr())->tp_name) + " object>";
  }
  return "?";
}

int SourceTable::evaluate(const FrameView& f, std::vector<nb::object>& out) const {
  out.resize(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Source& s = nodes_[i];
    PyObject* v = nullptr;
    switch (s.kind) {
      case SourceKind::Local:
        v = f.value(s.index);
        Py_XINCREF(v);
        break;
      case SourceKind::Global:
      case SourceKind::Builtin: {
        PyObject* dict = s.kind == SourceKind::Global ? f.globals : f.builtins;
        v = PyDict_GetItemWithError(dict, s.key.ptr());  // borrowed
        Py_XINCREF(v);
        break;
      }
      case SourceKind::Attr:
        v = PyObject_GetAttr(out[static_cast<size_t>(s.parent)].ptr(), s.key.ptr());
        break;
      case SourceKind::Item:
        v = PyObject_GetItem(out[static_cast<size_t>(s.parent)].ptr(), s.key.ptr());
        break;
      case SourceKind::ItemOf: {
        PyObject* d = out[static_cast<size_t>(s.parent)].ptr();
        PyObject* key = out[static_cast<size_t>(s.index)].ptr();
        if (PyDict_Check(d)) {
          v = PyDict_GetItemWithError(d, key);  // borrowed; no __missing__
          if (v == nullptr && !PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
          Py_XINCREF(v);
        } else {
          v = PyObject_GetItem(d, key);
        }
        break;
      }
      case SourceKind::HasAttr: {
        v = PyObject_GetAttr(out[static_cast<size_t>(s.parent)].ptr(), s.key.ptr());
        if (v != nullptr) {
          Py_DECREF(v);
          v = Py_NewRef(Py_True);
        } else if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
          PyErr_Clear();
          v = Py_NewRef(Py_False);
        }
        break;
      }
      case SourceKind::Const:
        v = s.key.ptr();
        Py_INCREF(v);
        break;
      case SourceKind::ModuleMember:
        v = module_member_of(out[static_cast<size_t>(s.parent)].ptr(), s.key.ptr(), s.index);
        break;
      case SourceKind::IterRest:
        v = iterator_rest(out[static_cast<size_t>(s.parent)].ptr());
        break;
    }
    if (v == nullptr) {
      PyErr_Clear();
      for (size_t j = i; j < nodes_.size(); ++j) out[j].reset();
      return static_cast<int>(i);
    }
    out[i] = nb::steal(v);
  }
  return -1;
}

}  // namespace ember::capture
