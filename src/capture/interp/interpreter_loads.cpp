/// \file
/// The interpreter's reads: globals, attributes (with what a fresh object's class provides),
/// closure cells, and subscripts (a tensor-keyed dict's entry read through its real tensor);
/// the twin of interpreter_stores.cpp. With the handlers of the load ops (op_table.cpp):
/// constants, locals, cells, globals, attributes, subscripts and imports of imported modules.
#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;

void Interpreter::op_LOAD_CONST(Frame& fr, const Instr& in, StepResult&) {
  fr.stack.push_back(const_at(fr.code, in.arg));
}

void Interpreter::op_load_fast(Frame& fr, const Instr& in, StepResult&) {
  nb::object v = fr.locals[static_cast<size_t>(in.arg)];
  if (!v.is_valid()) {
    PyErr_Format(PyExc_UnboundLocalError,
                 "cannot access local variable '%U' where it is not associated with a value",
                 local_name(fr.code, in.arg));
    throw nb::python_error();
  }
  fr.stack.push_back(std::move(v));
}

void Interpreter::op_LOAD_FAST_AND_CLEAR(Frame& fr, const Instr& in, StepResult&) {
  fr.stack.push_back(std::move(fr.locals[static_cast<size_t>(in.arg)]));
  fr.locals[static_cast<size_t>(in.arg)] = nb::object();
}

void Interpreter::op_MAKE_CELL(Frame& fr, const Instr& in, StepResult&) {
  nb::object& slot = fr.locals[static_cast<size_t>(in.arg)];
  slot = fresh(checked(PyCell_New(slot.ptr())));
}

void Interpreter::op_COPY_FREE_VARS(Frame& fr, const Instr& in, StepResult&) {
  EMBER_INTERNAL_ASSERT(!fr.closure.is_none()) << "COPY_FREE_VARS without a closure";
  int n = in.arg;
  int base = static_cast<int>(fr.locals.size()) - n;
  for (int j = 0; j < n; ++j) {
    PyObject* cell = PyTuple_GET_ITEM(fr.closure.ptr(), j);
    fr.locals[static_cast<size_t>(base + j)] = nb::borrow(cell);
    if (!fr.top && !is_fresh(cell) && fr.function_source >= 0) {
      cell_origin_.emplace(cell, std::make_pair(fr.function_source, j));
    }
  }
}

void Interpreter::op_LOAD_CLOSURE(Frame& fr, const Instr& in, StepResult&) {
  fr.stack.push_back(fr.locals[static_cast<size_t>(in.arg)]);
}

void Interpreter::op_LOAD_DEREF(Frame& fr, const Instr& in, StepResult&) {
  fr.stack.push_back(load_deref(fr, in.arg));
}

void Interpreter::op_LOAD_GLOBAL(Frame& fr, const Instr& in, StepResult&) {
  auto& st = fr.stack;
  nb::object v = load_global(fr, name_at(fr.code, in.arg));
  bool null = (in.flags & 1) != 0;
  if (null && kNullBeforeCallable) st.emplace_back();
  st.push_back(std::move(v));
  if (null && !kNullBeforeCallable) st.emplace_back();
}

void Interpreter::op_LOAD_ATTR(Frame& fr, const Instr& in, StepResult&) {
  nb::object obj = pop(fr);
  fr.stack.push_back(load_attr(obj, name_at(fr.code, in.arg)));
}

void Interpreter::op_LOAD_METHOD(Frame& fr, const Instr& in, StepResult&) {
  auto& st = fr.stack;
  nb::object obj = pop(fr);
  nb::object m = load_attr(obj, name_at(fr.code, in.arg));
  if (kNullBeforeCallable) st.emplace_back();
  st.push_back(std::move(m));
  if (!kNullBeforeCallable) st.emplace_back();
}

void Interpreter::op_LOAD_SUPER_ATTR(Frame& fr, const Instr& in, StepResult&) {
  // super().name: [super, __class__, self] -> super(__class__, self).name
  auto& st = fr.stack;
  nb::object self = pop(fr);
  nb::object cls = pop(fr);
  nb::object super_fn = pop(fr);
  EMBER_UNSUPPORTED(super_fn.ptr() == reinterpret_cast<PyObject*>(&PySuper_Type))
      << "LOAD_SUPER_ATTR with a " << type_name_of(super_fn) << " at " << location();
  nb::object sup =
      fresh(checked(PyObject_CallFunctionObjArgs(super_fn.ptr(), cls.ptr(), self.ptr(), nullptr)));
  nb::object v = load_attr(sup, name_at(fr.code, in.arg));
  if (in.flags & 1) {  // a method load: [NULL, bound] (3.12) or [bound, NULL] (3.13)
    if (kNullBeforeCallable) st.emplace_back();
    st.push_back(std::move(v));
    if (!kNullBeforeCallable) st.emplace_back();
  } else {
    st.push_back(std::move(v));
  }
}

void Interpreter::op_BINARY_SUBSCR(Frame& fr, const Instr&, StepResult&) {
  nb::object key = pop(fr);
  nb::object obj = pop(fr);
  fr.stack.push_back(subscr(obj, key));
}

void Interpreter::op_BINARY_SLICE(Frame& fr, const Instr&, StepResult&) {
  nb::object stop = pop(fr);
  nb::object start = pop(fr);
  nb::object obj = pop(fr);
  nb::object key = checked(PySlice_New(start.ptr(), stop.ptr(), nullptr));
  fr.stack.push_back(subscr(obj, key));
}

void Interpreter::op_IMPORT_NAME(Frame& fr, const Instr& in, StepResult&) {
  // `import m` / `from m import x` of a module that is already imported: no side effect.
  nb::object fromlist = pop(fr);
  nb::object level = pop(fr);
  PyObject* name = name_at(fr.code, in.arg);
  EMBER_UNSUPPORTED(PyLong_AsLong(level.ptr()) == 0) << "a relative import at " << location();
  PyObject* modules = PyImport_GetModuleDict();
  PyObject* mod = PyDict_GetItemWithError(modules, name);
  EMBER_UNSUPPORTED(mod != nullptr) << "importing a module that is not imported yet ("
                                    << PyUnicode_AsUTF8(name) << ") at " << location();
  if (fromlist.is_none()) {
    // `import a.b` binds the top package.
    nb::object top = checked(
        PyImport_ImportModuleLevelObject(name, fr.globals.ptr(), nullptr, fromlist.ptr(), 0));
    fr.stack.push_back(top);
  } else {
    fr.stack.push_back(nb::borrow(mod));
  }
}

void Interpreter::op_IMPORT_FROM(Frame& fr, const Instr& in, StepResult&) {
  nb::handle mod = peek(fr);
  fr.stack.push_back(checked(PyObject_GetAttr(mod.ptr(), name_at(fr.code, in.arg))));
}

nb::object Interpreter::load_global(Frame& fr, PyObject* name) {
  // The top frame's globals are the frame's own (FrameView::globals); an inlined function's
  // are its module's dict, which the source table holds.
  PyObject* v = PyDict_GetItemWithError(fr.globals.ptr(), name);
  if (v != nullptr) {
    return wrap(v, fr.top ? sources_.global(name)
                          : sources_.item(sources_.constant(fr.globals.ptr()), name));
  }
  if (PyErr_Occurred()) throw nb::python_error();
  v = PyDict_GetItemWithError(fr.builtins.ptr(), name);
  if (v != nullptr) {
    return wrap(v, fr.top ? sources_.builtin(name)
                          : sources_.item(sources_.constant(fr.builtins.ptr()), name));
  }
  if (PyErr_Occurred()) throw nb::python_error();
  PyErr_Format(PyExc_NameError, "name '%U' is not defined", name);
  throw nb::python_error();
}

nb::object Interpreter::load_attr(nb::handle obj, PyObject* name) {
  if (!stores_.empty()) {
    if (const Store* s = find_store(obj, name)) return s->value;
  }
  if (is_tensor(obj) && (PyUnicode_CompareWithASCIIString(name, "grad") == 0 ||
                         PyUnicode_CompareWithASCIIString(name, "_grad") == 0)) {
    // A tracer tensor has no gradient: a graph input's is its real tensor's, read through the
    // input's source (a tensor input, or None, guarded). Read from the tracer, every `p.grad`
    // would be None (a norm over `if p.grad is not None` would come out 0, silently).
    auto real = real_of_.find(obj.ptr());
    EMBER_UNSUPPORTED(real != real_of_.end())
        << "reading ." << nb::cast<std::string>(nb::handle(name))
        << " of a tensor the frame computed, at " << location();
    nb::object g = checked(PyObject_GetAttr(real->second, name));
    return wrap(g, sources_.attr(tensor_source_.at(real->second), name));
  }
  nb::object v = checked(PyObject_GetAttr(obj.ptr(), name));
  if (is_tensor(obj)) return v;
  // A C method bound to the object (an OrderedDict's values): fixed by the object's own guard.
  if (PyCFunction_Check(v.ptr()) && PyCFunction_GET_SELF(v.ptr()) == obj.ptr()) return v;
  if (is_fresh(obj) && PyUnicode_CompareWithASCIIString(name, "__dict__") == 0) return fresh(v);
  int source = source_of(obj);
  if (source < 0) return is_fresh(obj) ? class_attr_of_fresh(obj, name, v) : v;
  if (PyModule_Check(obj.ptr())) {
    // Attributes of torch's own modules (torch.nn.functional.relu, torch.float32) are taken as
    // they are now, without a guard each.
    const char* mod = PyModule_GetName(obj.ptr());
    if (mod == nullptr) throw nb::python_error();
    std::string_view m(mod);
    if (m == "torch" || m.substr(0, 6) == "torch.") return v;
  }
  if (is_nn_module(obj)) {
    // A parameter, buffer or submodule: read from its registry dict on each call, not through
    // nn.Module.__getattr__, when that gives the same object (nothing on the type or in the
    // instance dict shadows it).
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
    bool on_type = PyObject_HasAttr(type, name) == 1;
    for (int registry = 0; registry < 3 && !on_type; ++registry) {
      PyObject* member = module_member_of(obj.ptr(), name, registry);
      if (member == nullptr) {
        PyErr_Clear();
        continue;
      }
      Py_DECREF(member);
      if (member == v.ptr()) return wrap(v, sources_.module_member(source, name, registry));
    }
  }
  return wrap(v, sources_.attr(source, name));
}

nb::object Interpreter::class_attr_of_fresh(nb::handle obj, PyObject* name, nb::object v) {
  // An attribute of an object the frame made that its class holds (a method, a class-level
  // table of validators, a constant) is read through the class, a source: its guards (and a
  // function's closure cells) follow it. The instance's own attributes are the frame's.
  PyTypeObject* t = Py_TYPE(obj.ptr());
  if (PyType_Check(obj.ptr()) || !PyType_HasFeature(t, Py_TPFLAGS_HEAPTYPE) ||
      is_fresh(reinterpret_cast<PyObject*>(t))) {
    return v;
  }
  PyObject* descr = _PyType_Lookup(t, name);  // borrowed
  if (descr == nullptr) return v;
  if (PyObject** dict = _PyObject_GetDictPtr(obj.ptr()); dict != nullptr && *dict != nullptr) {
    PyObject* own = PyDict_GetItemWithError(*dict, name);
    if (own != nullptr) return v;  // shadowed by the instance's own attribute
    if (PyErr_Occurred()) throw nb::python_error();
  }
  int class_attr = sources_.attr(sources_.constant(reinterpret_cast<PyObject*>(t)), name);
  if (PyMethod_Check(v.ptr()) && PyMethod_GET_SELF(v.ptr()) == obj.ptr() &&
      PyMethod_GET_FUNCTION(v.ptr()) == descr) {
    wrap(nb::handle(descr), class_attr);  // the method's function: guarded, with its cells
    return v;
  }
  return v.ptr() == descr ? wrap(v, class_attr) : v;
}

nb::object Interpreter::load_deref(Frame& fr, int slot) {
  nb::object cell = fr.locals[static_cast<size_t>(slot)];
  EMBER_UNSUPPORTED(cell.is_valid() && PyCell_Check(cell.ptr()))
      << "a closure variable that is not a cell at " << location();
  PyObject* v = PyCell_GET(cell.ptr());
  if (v == nullptr) {
    PyErr_Format(PyExc_NameError, "free variable '%U' referenced before assignment",
                 local_name(fr.code, slot));
    throw nb::python_error();
  }
  if (is_fresh(cell)) return nb::borrow(v);
  PyObject* name = local_name(fr.code, slot);
  if (PyType_Check(v) && name != nullptr &&
      PyUnicode_CompareWithASCIIString(name, "__class__") == 0) {
    return nb::borrow(v);  // the class of a method (zero-argument super): fixed with the function
  }
  auto origin = cell_origin_.find(cell.ptr());
  EMBER_UNSUPPORTED(origin != cell_origin_.end())
      << "closure variable '" << nb::cast<std::string>(nb::handle(local_name(fr.code, slot)))
      << "' of a function of unknown origin, at " << location();
  auto [fn_source, index] = origin->second;
  int source;
  if (fn_source < 0) {
    source = sources_.local(index, local_name(fr.code, slot));
  } else {
    nb::object closure_name = nb::steal(PyUnicode_FromString("__closure__"));
    nb::object contents_name = nb::steal(PyUnicode_FromString("cell_contents"));
    nb::object key = nb::steal(PyLong_FromLong(index));
    source = sources_.attr(sources_.item(sources_.attr(fn_source, closure_name.ptr()), key.ptr()),
                           contents_name.ptr());
  }
  return wrap(v, source);
}

nb::object Interpreter::tensor_keyed_item(nb::handle obj, nb::handle key) {
  int source = source_of(obj);
  auto real = real_of_.find(key.ptr());
  if (source < 0 || real == real_of_.end()) return {};
  static PyTypeObject* defaultdict =
      reinterpret_cast<PyTypeObject*>(imported("collections", "defaultdict"));
  static PyTypeObject* ordered =
      reinterpret_cast<PyTypeObject*>(imported("collections", "OrderedDict"));
  PyTypeObject* t = Py_TYPE(obj.ptr());
  if (t != &PyDict_Type && t != defaultdict && t != ordered) return {};
  int key_source = tensor_source_.at(real->second);
  PyObject* v = PyDict_GetItemWithError(obj.ptr(), real->second);  // borrowed; no __missing__
  if (v == nullptr) {
    if (PyErr_Occurred()) throw nb::python_error();
    std::string what = sources_.name(source) + " has no entry for " + sources_.name(key_source);
    // A defaultdict would make one: run the frame eagerly, and capture it on the next call, when
    // the entry exists (an optimizer's first step creates its state).
    if (t == defaultdict) {
      throw EagerThisCall(what + " (the first step of an optimizer creates its state), at " +
                          location());
    }
    EMBER_UNSUPPORTED(false) << what << " at " << location();
  }
  nb::object value = nb::borrow(v);
  return wrap(value, sources_.item_of(source, key_source));
}

namespace {

bool is_sym_int(PyObject* o) {
  static PyObject* sym_int = imported("torch", "SymInt");
  return reinterpret_cast<PyObject*>(Py_TYPE(o)) == sym_int;
}

/// `tensor[key]` where basic indexing (ints, slices, None, Ellipsis) holds symbolic ints. torch's
/// getitem reads an int index through __index__, which would specialize the size to its value
/// (setitem takes SymInts): the same indexing runs with a full slice in each one's place, then a
/// select.int per such dim, last first. An invalid object when the key has no symbolic int or
/// is not basic (torch's getitem then).
nb::object index_with_sym_ints(nb::handle tensor, nb::handle key) {
  const bool tuple = PyTuple_CheckExact(key.ptr());
  std::vector<PyObject*> items;
  if (tuple) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(key.ptr()); ++i) {
      items.push_back(PyTuple_GET_ITEM(key.ptr(), i));
    }
  } else {
    items.push_back(key.ptr());
  }
  bool any = false;
  int64_t specified = 0;
  for (PyObject* o : items) {
    if (is_sym_int(o)) {
      any = true;
    } else if (!(PyLong_CheckExact(o) || PySlice_Check(o) || o == Py_None || o == Py_Ellipsis)) {
      return {};
    }
    specified += o != Py_None && o != Py_Ellipsis;
  }
  if (!any) return {};
  const int64_t rank = THPVariable_Unpack(tensor.ptr()).dim();
  if (specified > rank) return {};  // torch's error
  nb::object full = checked(PySlice_New(nullptr, nullptr, nullptr));
  nb::object basic = checked(PyTuple_New(static_cast<Py_ssize_t>(items.size())));
  std::vector<std::pair<int64_t, PyObject*>> selects;  // (dim of the result, index)
  int64_t dim = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    PyObject* o = items[i];
    PyObject* item = o;
    if (o == Py_Ellipsis) {
      dim += rank - specified;
    } else if (is_sym_int(o)) {
      selects.emplace_back(dim++, o);
      item = full.ptr();
    } else if (!PyLong_CheckExact(o)) {
      ++dim;  // a slice, or None's new dim
    }
    Py_INCREF(item);
    PyTuple_SET_ITEM(basic.ptr(), static_cast<Py_ssize_t>(i), item);
  }
  nb::object result = checked(PyObject_GetItem(tensor.ptr(), basic.ptr()));
  for (size_t i = selects.size(); i-- > 0;) {
    nb::object d = checked(PyLong_FromLongLong(selects[i].first));
    result = checked(PyObject_CallMethod(result.ptr(), "select", "OO", d.ptr(), selects[i].second));
  }
  return result;
}

}  // namespace

nb::object Interpreter::subscr(nb::handle obj, nb::handle key) {
  pin_identity(key);
  if (is_tensor(obj)) {
    if (nb::object r = index_with_sym_ints(obj, key); r.is_valid()) return r;
    return checked(PyObject_GetItem(obj.ptr(), tensor_index(obj, key).ptr()));
  }
  if (is_tensor(key)) {
    // A dict keyed by the real tensors of graph inputs (an optimizer's `state[p]`).
    if (nb::object v = tensor_keyed_item(obj, key); v.is_valid()) return v;
  }
  if (PyType_Check(obj.ptr()) && (obj.ptr() == reinterpret_cast<PyObject*>(&PyList_Type) ||
                                  obj.ptr() == reinterpret_cast<PyObject*>(&PyDict_Type) ||
                                  obj.ptr() == reinterpret_cast<PyObject*>(&PyTuple_Type) ||
                                  obj.ptr() == reinterpret_cast<PyObject*>(&PySet_Type) ||
                                  obj.ptr() == reinterpret_cast<PyObject*>(&PyType_Type))) {
    return checked(PyObject_GetItem(obj.ptr(), key.ptr()));  // list[Tensor]: a type annotation
  }
  if (!PyType_Check(obj.ptr()) && is_static_key(obj.ptr()) && !PyFunction_Check(obj.ptr()) &&
      !PyCFunction_Check(obj.ptr())) {
    return checked(PyObject_GetItem(obj.ptr(), key.ptr()));  // typing.List[Tensor]
  }
  int source = source_of(obj);
  if (source >= 0 && is_guardable_constant(key.ptr())) {
    nb::object v = checked(PyObject_GetItem(obj.ptr(), key.ptr()));
    return wrap(v, sources_.item(source, key.ptr()));
  }
  if (is_fresh(obj)) {
    if (nb::object m = special_method(obj, "__getitem__"); m.is_valid())
      return call(m, {nb::borrow(key)}, {});
  }
  std::vector<nb::object> items;
  if (PySlice_Check(key.ptr()) && materialize(obj, items)) {
    // A slice of a ModuleList or Sequential: a list of its modules (read one by one).
    nb::object list = fresh(checked(PyList_New(0)));
    for (auto& item : items) {
      if (PyList_Append(list.ptr(), item.ptr()) < 0) throw nb::python_error();
    }
    return fresh(checked(PyObject_GetItem(list.ptr(), key.ptr())));
  }
  EMBER_UNSUPPORTED(is_plain_value(obj) || is_fresh(obj))
      << "indexing a " << type_name_of(obj) << " at " << location();
  return checked(PyObject_GetItem(obj.ptr(), key.ptr()));
}

}  // namespace ember::capture
