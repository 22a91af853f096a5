#include "capture/guards/source.h"

#include "capture/guards/guards.h"

#include <nanobind/stl/string.h>

#include <array>

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

// Note [Items of torch's module containers]
// A Sequential's or ModuleList's items are sources `L['self'][i]` (a loop over the container),
// and their __getitem__ is Python: about 1 us a call, and a Sequential's walks its modules up to
// i (80 items: 120 us of guard sources per call, more than the graph's run at batch 1). Where the
// container's type has torch's own __getitem__ (an exact type or a subclass that keeps it), the
// item is read from its `_modules` dict as that __getitem__ reads it: a Sequential's i-th value
// (negative i from the end), a ModuleList's value under str(i), a ModuleDict's under the key. A
// Sequential's values are listed once for the items of one container that follow each other in
// the table (Python code that could change the dict, a getattr, ends the list's use). An index
// out of range, or another type, takes __getitem__ itself (its IndexError fails the source).
enum class Container { None, Sequential, ModuleList, ModuleDict };

/// The method `name` of torch.nn's class `cls` (borrowed from the type, which torch.nn keeps
/// imported), or null.
PyObject* nn_method(const char* cls, PyObject* name) {
  PyObject* nn = PyImport_ImportModule("torch.nn");
  PyObject* type = nn != nullptr ? PyObject_GetAttrString(nn, cls) : nullptr;
  PyObject* f = type != nullptr && PyType_Check(type)
                    ? _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type), name)
                    : nullptr;
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(nn);
  return f;
}

/// nn.Module's registries in an instance dict, in the order its __getattr__ reads them.
const std::array<PyObject*, 3>& module_registries() {
  static const std::array<PyObject*, 3> names = {PyUnicode_InternFromString("_parameters"),
                                                 PyUnicode_InternFromString("_buffers"),
                                                 PyUnicode_InternFromString("_modules")};
  return names;
}

Container container_of(PyObject* obj) {
  // Each container's __getitem__ and __len__ (its index check reads len(self)).
  struct Methods {
    PyObject* getitem = nullptr;
    PyObject* len = nullptr;
  };
  static PyObject* const getitem_name = PyUnicode_InternFromString("__getitem__");
  static PyObject* const len_name = PyUnicode_InternFromString("__len__");
  static const std::array<Methods, 3> methods = [] {
    std::array<Methods, 3> m{};
    const char* names[] = {"Sequential", "ModuleList", "ModuleDict"};
    for (size_t i = 0; i < m.size(); ++i) {
      m[i] = {nn_method(names[i], getitem_name), nn_method(names[i], len_name)};
    }
    return m;
  }();
  PyObject* getitem = _PyType_Lookup(Py_TYPE(obj), getitem_name);  // borrowed, or null
  if (getitem == nullptr) return Container::None;
  for (size_t i = 0; i < methods.size(); ++i) {
    if (getitem == methods[i].getitem && _PyType_Lookup(Py_TYPE(obj), len_name) == methods[i].len) {
      return static_cast<Container>(i + 1);
    }
  }
  return Container::None;
}

/// `obj`'s `_modules` dict (new reference), or null (no error set) where it has none.
PyObject* modules_dict(PyObject* obj) {
  static PyObject* const key = PyUnicode_InternFromString("_modules");
  PyObject* dict = PyObject_GenericGetDict(obj, nullptr);
  if (dict == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* m = PyDict_GetItemWithError(dict, key);  // borrowed
  Py_XINCREF(m);
  Py_DECREF(dict);
  if (m != nullptr && PyDict_Check(m)) return m;
  PyErr_Clear();
  Py_XDECREF(m);
  return nullptr;
}

/// The values of the last Sequential whose item was read (Note [Items of torch's module
/// containers]).
struct SequentialValues {
  nb::object modules;  ///< the `_modules` dict they were listed from
  nb::object values;   ///< a list
  void clear() {
    modules.reset();
    values.reset();
  }
};

/// obj[key] for torch's module containers, as their __getitem__ gives it (new reference); null
/// with no error set where it does not apply (then __getitem__ is called).
PyObject* container_item(PyObject* obj, PyObject* key, SequentialValues& cache) {
  const Container kind = container_of(obj);
  if (kind == Container::None) return nullptr;
  const bool int_key = PyLong_CheckExact(key);
  if ((kind == Container::ModuleDict) == int_key) return nullptr;  // a slice, or another key
  if (kind == Container::ModuleDict && !PyUnicode_CheckExact(key)) return nullptr;
  nb::object modules = nb::steal(modules_dict(obj));
  if (!modules.is_valid()) return nullptr;
  PyObject* v = nullptr;
  if (kind == Container::ModuleDict) {
    v = PyDict_GetItemWithError(modules.ptr(), key);
  } else {
    Py_ssize_t i = PyLong_AsSsize_t(key);
    if (i == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return nullptr;
    }
    const Py_ssize_t n = PyDict_Size(modules.ptr());
    if (i < -n || i >= n) return nullptr;  // __getitem__ raises its IndexError
    if (i < 0) i += n;
    if (kind == Container::ModuleList) {
      nb::object name = nb::steal(PyUnicode_FromFormat("%zd", i));
      if (!name.is_valid()) {
        PyErr_Clear();
        return nullptr;
      }
      v = PyDict_GetItemWithError(modules.ptr(), name.ptr());
    } else {
      if (!cache.modules.is(modules)) {
        cache.values = nb::steal(PyDict_Values(modules.ptr()));
        cache.modules = cache.values.is_valid() ? modules : nb::object();
      }
      if (cache.values.is_valid() && i < PyList_GET_SIZE(cache.values.ptr())) {
        v = PyList_GET_ITEM(cache.values.ptr(), i);
      }
    }
  }
  if (v == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  Py_INCREF(v);
  return v;
}

// Note [hasattr of a module]
// `hasattr(module, name)` sources (transformers' attention layers ask for
// `num_key_value_groups`, one per layer) raise and clear an AttributeError each call when the
// name is missing, and nn.Module.__getattr__ formats its message first: about 2.5 us each. Where
// the module's type keeps object's __getattribute__ and nn.Module's __getattr__, the answer is
// what they give without the exception: the generic lookup (type, then instance dict; an
// AttributeError a property raises counts as missing, as it sends getattr to __getattr__), then
// the _parameters, _buffers and _modules registries of the instance dict. Any other error, or
// another type, takes getattr itself.
/// 1 or 0 for hasattr(obj, name) as above; -1 where it does not apply (no error set).
int module_has_attr(PyObject* obj, PyObject* name) {
  static PyObject* const getattr_name = PyUnicode_InternFromString("__getattr__");
  static PyObject* const getattribute_name = PyUnicode_InternFromString("__getattribute__");
  static PyObject* const object_getattribute =
      _PyType_Lookup(&PyBaseObject_Type, getattribute_name);
  static PyObject* const module_getattr = nn_method("Module", getattr_name);
  if (module_getattr == nullptr || !PyUnicode_CheckExact(name)) return -1;
  PyTypeObject* t = Py_TYPE(obj);
  if (_PyType_Lookup(t, getattr_name) != module_getattr ||
      _PyType_Lookup(t, getattribute_name) != object_getattribute) {
    return -1;
  }
  PyObject* found = _PyObject_GenericGetAttrWithDict(obj, name, nullptr, /*suppress=*/1);
  if (found != nullptr) {
    Py_DECREF(found);
    return 1;
  }
  if (PyErr_Occurred()) {  // not an AttributeError: getattr raises it
    PyErr_Clear();
    return -1;
  }
  nb::object dict = nb::steal(PyObject_GenericGetDict(obj, nullptr));
  if (!dict.is_valid()) {
    PyErr_Clear();
    return -1;
  }
  for (PyObject* registry : module_registries()) {
    PyObject* reg = PyDict_GetItemWithError(dict.ptr(), registry);  // borrowed
    if (reg == nullptr && PyErr_Occurred()) {
      PyErr_Clear();
      return -1;
    }
    if (reg == nullptr) continue;
    const int in = PySequence_Contains(reg, name);  // `name in registry`, as __getattr__ asks
    if (in < 0) {
      PyErr_Clear();
      return -1;
    }
    if (in == 1) return 1;
  }
  return 0;
}

}  // namespace

PyObject* module_member_of(PyObject* module, PyObject* name, int registry) {
  PyObject* dict = PyObject_GenericGetDict(module, nullptr);
  if (dict == nullptr) return nullptr;
  PyObject* v = nullptr;
  // An instance attribute of that name would shadow the registry (getattr looks there first).
  if (PyDict_GetItemWithError(dict, name) == nullptr && !PyErr_Occurred()) {
    PyObject* reg =
        PyDict_GetItemWithError(dict, module_registries().at(static_cast<size_t>(registry)));
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
  SequentialValues sequential;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Source& s = nodes_[i];
    PyObject* v = nullptr;
    // Only items of containers and dict lookups run no Python code that could change a
    // Sequential's modules.
    if (s.kind != SourceKind::Item && s.kind != SourceKind::ModuleMember &&
        s.kind != SourceKind::Local && s.kind != SourceKind::Const) {
      sequential.clear();
    }
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
      case SourceKind::Item: {
        PyObject* parent = out[static_cast<size_t>(s.parent)].ptr();
        v = container_item(parent, s.key.ptr(), sequential);
        if (v == nullptr) {
          sequential.clear();
          v = PyObject_GetItem(parent, s.key.ptr());
        }
        break;
      }
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
        if (int has = module_has_attr(out[static_cast<size_t>(s.parent)].ptr(), s.key.ptr());
            has >= 0) {
          v = Py_NewRef(has == 1 ? Py_True : Py_False);
          break;
        }
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
