/// \file
/// The interpreter's attribute stores: on objects the frame made (directly, or through their
/// class's __setattr__, inlined), and on objects from outside it, done for real, recorded for
/// replay and undone when the interpreter stops (side_effects.h). With the handlers of the
/// store ops (op_table.cpp): locals, cells, attributes, items and slices.
#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;

void Interpreter::op_STORE_FAST(Frame& fr, const Instr& in, StepResult&) {
  fr.locals[static_cast<size_t>(in.arg)] = pop(fr);
}

void Interpreter::op_DELETE_FAST(Frame& fr, const Instr& in, StepResult&) {
  fr.locals[static_cast<size_t>(in.arg)] = nb::object();
}

void Interpreter::op_STORE_DEREF(Frame& fr, const Instr& in, StepResult&) {
  nb::object cell = fr.locals[static_cast<size_t>(in.arg)];
  EMBER_UNSUPPORTED(is_fresh(cell))
      << "assigning a closure variable of an enclosing function at " << location();
  nb::object v = pop(fr);
  if (PyCell_Set(cell.ptr(), v.ptr()) < 0) throw nb::python_error();
}

void Interpreter::op_STORE_ATTR(Frame& fr, const Instr& in, StepResult&) {
  nb::object obj = pop(fr);
  nb::object v = pop(fr);
  store_attr(obj, name_at(fr.code, in.arg), v);
}

void Interpreter::op_STORE_SUBSCR(Frame& fr, const Instr&, StepResult&) {
  nb::object key = pop(fr);
  nb::object obj = pop(fr);
  nb::object v = pop(fr);
  pin_identity(key);
  EMBER_UNSUPPORTED(is_tensor(obj) || is_fresh(obj) || mutates_outside(obj))
      << "assigning an item of a " << type_name_of(obj) << " at " << location();
  if (nb::object m = special_method(obj, "__setitem__"); m.is_valid()) {
    call(m, {key, v}, {});
    return;
  }
  if (is_tensor(obj)) key = tensor_index(obj, key);
  if (PyObject_SetItem(obj.ptr(), key.ptr(), v.ptr()) < 0) throw nb::python_error();
}

void Interpreter::op_STORE_SLICE(Frame& fr, const Instr&, StepResult&) {
  nb::object stop = pop(fr);
  nb::object start = pop(fr);
  nb::object obj = pop(fr);
  nb::object v = pop(fr);
  EMBER_UNSUPPORTED(is_tensor(obj) || is_fresh(obj) || mutates_outside(obj))
      << "assigning a slice of a " << type_name_of(obj) << " at " << location();
  nb::object key = checked(PySlice_New(start.ptr(), stop.ptr(), nullptr));
  if (PyObject_SetItem(obj.ptr(), key.ptr(), v.ptr()) < 0) throw nb::python_error();
}

void Interpreter::op_DELETE_SUBSCR(Frame& fr, const Instr&, StepResult&) {
  nb::object key = pop(fr);
  nb::object obj = pop(fr);
  EMBER_UNSUPPORTED(is_fresh(obj) || mutates_outside(obj))
      << "deleting an item of a " << type_name_of(obj) << " at " << location();
  if (nb::object m = special_method(obj, "__delitem__"); m.is_valid()) {
    call(m, {key}, {});
    return;
  }
  if (PyObject_DelItem(obj.ptr(), key.ptr()) < 0) throw nb::python_error();
}

const Interpreter::Store* Interpreter::find_store(nb::handle obj, PyObject* name) const {
  for (const Store& s : stores_) {
    if (s.obj.ptr() == obj.ptr() && PyUnicode_Compare(s.name.ptr(), name) == 0) return &s;
  }
  return nullptr;
}

void Interpreter::store_attr(nb::handle obj, PyObject* name, nb::handle value) {
  if (!is_fresh(obj)) {
    store_attr_outside(obj, name, value);
    return;
  }
  if (nb::object m = special_method(obj, "__setattr__"); m.is_valid()) {
    call(m, {nb::borrow(name), nb::borrow(value)}, {});
    return;
  }
  if (PyObject_SetAttr(obj.ptr(), name, value.ptr()) < 0) throw nb::python_error();
}

namespace {

/// Whether `obj.name = value` on an nn.Module lands in its instance dict as a plain store:
/// nn.Module.__setattr__ (not a subclass's own) puts a value that is no tensor or module, under
/// a name none of its registries (_parameters, _buffers, _modules) holds, there.
bool module_attr_store_is_plain(nb::handle obj, PyObject* name, nb::handle value) {
  if (!is_nn_module(obj) || THPVariable_Check(value.ptr()) || is_nn_module(value)) return false;
  static PyObject* module_setattr = [] {
    nb::object setattr_name = nb::steal(PyUnicode_InternFromString("__setattr__"));
    PyObject* f =
        _PyType_Lookup(reinterpret_cast<PyTypeObject*>(module_type()), setattr_name.ptr());
    Py_XINCREF(f);
    return f;  // kept for the process
  }();
  nb::object setattr_name = nb::steal(PyUnicode_InternFromString("__setattr__"));
  if (_PyType_Lookup(Py_TYPE(obj.ptr()), setattr_name.ptr()) != module_setattr) return false;
  for (int registry = 0; registry < 3; ++registry) {
    PyObject* member = module_member_of(obj.ptr(), name, registry);
    if (member != nullptr) {
      Py_DECREF(member);
      return false;
    }
    PyErr_Clear();
  }
  return true;
}

}  // namespace

void Interpreter::store_attr_outside(nb::handle obj, PyObject* name, nb::handle value) {
  int source = source_of(obj);
  if (source >= 0 && find_store(obj, name) == nullptr) {
    // The object the attribute holds stored back (`self.pos_encoding =
    // self.pos_encoding.to(device, dtype)`, where `.to` returned the tensor itself): the value
    // was read from this very attribute, no store came since, so the store changes nothing.
    const int vs = is_tensor(value) ? input_source_of(value) : source_of(value);
    if (vs >= 0) {
      const Source& v = sources_.at(vs);
      if ((v.kind == SourceKind::Attr || v.kind == SourceKind::ModuleMember) &&
          v.parent == source && PyObject_RichCompareBool(v.key.ptr(), name, Py_EQ) == 1) {
        return;
      }
      PyErr_Clear();
    }
  }
  // Only a store that lands in the instance dict (no data descriptor, no __setattr__) and whose
  // object the compiled frame can find again (it has a source) can be replayed.
  PyTypeObject* t = Py_TYPE(obj.ptr());
  PyObject* descr = _PyType_Lookup(t, name);
  nb::object dict = nb::steal(PyObject_GenericGetDict(obj.ptr(), nullptr));
  if (!dict.is_valid()) PyErr_Clear();
  // A Function's ctx records through _FunctionBase's descriptors (Note [A Function's ctx]):
  // the replay sets them (PyObject_SetAttr); the trace's own store only shadows them in the
  // instance dict, undone when the interpreter stops.
  const bool ctx_record = is_function_ctx_record(obj, name);
  EMBER_UNSUPPORTED(
      source >= 0 &&
      (t->tp_setattro == PyObject_GenericSetAttr || module_attr_store_is_plain(obj, name, value)) &&
      (descr == nullptr || Py_TYPE(descr)->tp_descr_set == nullptr || ctx_record) &&
      dict.is_valid() && !PyType_Check(obj.ptr()) && !PyModule_Check(obj.ptr()))
      << "setting attribute '" << nb::cast<std::string>(nb::handle(name)) << "' of a "
      << type_name_of(obj) << " at " << location();
  Store* s = const_cast<Store*>(find_store(obj, name));
  if (s == nullptr) {
    Store added;
    added.obj = nb::borrow(obj);
    added.name = nb::borrow(name);
    PyObject* original = PyDict_GetItemWithError(dict.ptr(), name);
    if (original == nullptr && PyErr_Occurred()) throw nb::python_error();
    added.original = original != nullptr ? nb::borrow(original) : nb::object();
    added.source = source;
    stores_.push_back(std::move(added));
    s = &stores_.back();
  }
  s->value = nb::borrow(value);
  if (PyDict_SetItem(dict.ptr(), name, value.ptr()) < 0) throw nb::python_error();
}

void Interpreter::undo_stores() {
  for (auto it = stores_.rbegin(); it != stores_.rend(); ++it) {
    nb::object dict = nb::steal(PyObject_GenericGetDict(it->obj.ptr(), nullptr));
    if (!dict.is_valid()) {
      PyErr_Clear();
      continue;
    }
    int r = it->original.is_valid() ? PyDict_SetItem(dict.ptr(), it->name.ptr(), it->original.ptr())
                                    : PyDict_DelItem(dict.ptr(), it->name.ptr());
    if (r < 0) PyErr_Clear();
  }
}

}  // namespace ember::capture
