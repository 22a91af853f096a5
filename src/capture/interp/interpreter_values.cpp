/// \file
/// The interpreter's bookkeeping of values: sources, guards, graph inputs and freshness.
#include "capture/hook/logs.h"
#include "capture/interp/interpreter_internal.h"
#include "tracer/tracer_tensor.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/grad_mode.h>

namespace nb = nanobind;

namespace ember::capture {

PyObject* imported(const char* module, const char* name) {
  nb::object m = checked(PyImport_ImportModule(module));
  return checked(PyObject_GetAttrString(m.ptr(), name)).release().ptr();  // kept for the process
}

namespace {

PyObject* parameter_type() {
  static PyObject* t = imported("torch.nn", "Parameter");
  return t;
}

PyObject* size_type() {
  static PyObject* t = imported("torch", "Size");
  return t;
}

bool isinstance(nb::handle v, PyObject* type) {
  int r = PyObject_IsInstance(v.ptr(), type);
  if (r < 0) throw nb::python_error();
  return r == 1;
}

/// nn containers whose items the capture reads one by one, by index.
/// An nn.ModuleList, Sequential or ParameterList, or a subclass that indexes, iterates and
/// measures itself as they do.
bool is_indexed_nn_container(nb::handle v) {
  static PyObject* const kBases[] = {imported("torch.nn", "ModuleList"),
                                     imported("torch.nn", "Sequential"),
                                     imported("torch.nn", "ParameterList")};
  PyTypeObject* t = Py_TYPE(v.ptr());
  for (PyObject* base : kBases) {
    if (reinterpret_cast<PyObject*>(t) == base) return true;
    if (!PyType_IsSubtype(t, reinterpret_cast<PyTypeObject*>(base))) continue;
    for (const char* name : {"__iter__", "__getitem__", "__len__"}) {
      nb::object key = nb::steal(PyUnicode_InternFromString(name));
      if (_PyType_Lookup(t, key.ptr()) !=
          _PyType_Lookup(reinterpret_cast<PyTypeObject*>(base), key.ptr())) {
        return false;
      }
    }
    return true;
  }
  return false;
}

}  // namespace

bool is_tracer(nb::handle v) {
  if (!is_tensor(v)) return false;
  at::Tensor t = THPVariable_Unpack(v.ptr());
  if (at::functionalization::impl::isFunctionalTensor(t)) {
    at::functionalization::impl::sync(t);
    t = at::functionalization::impl::from_functional_tensor(t);
  }
  return tracer::as_tracer(t) != nullptr;
}

PyObject* module_type() {
  static PyObject* t = imported("torch.nn", "Module");
  return t;
}

bool is_nn_module(nb::handle m) {
  return m.ptr() != nullptr && isinstance(m, module_type());
}

bool is_plain_value(nb::handle v) {
  PyObject* o = v.ptr();
  if (o == nullptr) return false;
  if (THPVariable_Check(o) || o == Py_None || o == Py_Ellipsis || o == Py_NotImplemented)
    return true;
  if (PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) || PyComplex_CheckExact(o) ||
      PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) || PyTuple_CheckExact(o) ||
      PyList_CheckExact(o) || PyDict_CheckExact(o) || PySet_CheckExact(o) ||
      PyFrozenSet_CheckExact(o) || PySlice_Check(o) || PyRange_Check(o)) {
    return true;
  }
  if (Py_TYPE(o) == reinterpret_cast<PyTypeObject*>(size_type())) return true;
  // A symbolic size (docs/design/symbolic.md): arithmetic on it builds ember's expressions, and
  // a decision on it records a size guard.
  static PyObject* sym_int = imported("torch", "SymInt");
  static PyObject* sym_bool = imported("torch", "SymBool");
  static PyObject* sym_float = imported("torch", "SymFloat");
  if (reinterpret_cast<PyObject*>(Py_TYPE(o)) == sym_int ||
      reinterpret_cast<PyObject*>(Py_TYPE(o)) == sym_bool ||
      reinterpret_cast<PyObject*>(Py_TYPE(o)) == sym_float) {
    return true;
  }
  std::string_view n(Py_TYPE(o)->tp_name);
  if (n.substr(0, 19) == "torch.return_types.") return true;  // (values, indices) structseqs
  if (is_enum_member(v) || is_numpy_scalar(o)) return true;
  return n == "torch.dtype" || n == "torch.device" || n == "torch.layout" ||
         n == "torch.memory_format" || n == "dict_keys" || n == "dict_values" ||
         n == "dict_items" || n == "odict_keys" || n == "odict_values" || n == "odict_items" ||
         n == "torch.finfo" || n == "torch.iinfo";
}

PyObject* local_name(PyCodeObject* co, int i) {
  PyObject* names = co->co_localsplusnames;
  if (names == nullptr || i < 0 || i >= PyTuple_GET_SIZE(names)) return nullptr;
  return PyTuple_GET_ITEM(names, i);
}

nb::object Interpreter::fresh(nb::object v) {
  if (v.is_valid() && !v.is_none()) {
    fresh_.insert(v.ptr());
    keepalive_.push_back(v);
  }
  return v;
}

bool Interpreter::is_fresh(nb::handle v) const {
  return fresh_.count(v.ptr()) != 0;
}

int Interpreter::source_of(nb::handle v) const {
  auto it = source_of_.find(v.ptr());
  return it == source_of_.end() ? -1 : it->second;
}

bool is_static_key(PyObject* key) {
  // Classes, functions and typing's forms (a table of validators keyed by List, Union, ...):
  // program structure, looked up again per call with the object itself (Source::key).
  if (PyType_Check(key) || PyFunction_Check(key) || PyCFunction_Check(key)) return true;
  nb::object module =
      nb::steal(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(key)), "__module__"));
  if (!module.is_valid()) {
    PyErr_Clear();
    return false;
  }
  return PyUnicode_Check(module.ptr()) &&
         (PyUnicode_CompareWithASCIIString(module.ptr(), "typing") == 0 ||
          PyUnicode_CompareWithASCIIString(module.ptr(), "types") == 0);
}

bool is_identity_free(nb::handle v) {
  PyObject* o = v.ptr();
  PyTypeObject* t = Py_TYPE(o);
  // Instances of classes written in Python; not classes, functions, methods or modules (whose
  // identity is what the program means), not objects of C types (their state is not read as
  // attributes), not tensors (TensorMatch).
  if (!PyType_HasFeature(t, Py_TPFLAGS_HEAPTYPE) || PyType_Check(o) || PyModule_Check(o) ||
      PyFunction_Check(o) || PyMethod_Check(o) || PyCFunction_Check(o) || THPVariable_Check(o)) {
    return false;
  }
  // Optimizers, LR schedulers and grad scalers: their methods change real state, and an
  // optimizer's state is keyed by its parameters.
  return !is_stateful_torch_object(v);
}

// Note [Functions by their code]
// A nested function (a closure a factory returns: transformers' mask functions, made per call)
// is a new object on every call, so guarded by identity it recompiled every call ("L['mask_
// functions'][1] is not the object seen when compiling (since freed)"). What the trace reads
// of it is its code, its globals, its defaults and its closure cells, and the cells are read
// through sources (fn.__closure__[i].cell_contents, guarded as read: load_deref). So such a
// function is guarded as Dynamo guards a closure: its type, its code, its globals and its
// defaults; its identity only where the trace depends on it (pin_identity). Only functions
// with nothing else a trace could read unguarded: no instance attributes (functools.wraps'
// __wrapped__, torch's _torchdynamo_* marks), no keyword-only defaults, positional defaults
// of constants only.
bool guarded_by_code(PyObject* fn) {
  if (!PyFunction_Check(fn)) return false;
  PyFunctionObject* f = reinterpret_cast<PyFunctionObject*>(fn);
  if (f->func_closure == nullptr) return false;  // module-level functions keep their identity
  if (f->func_kwdefaults != nullptr && f->func_kwdefaults != Py_None) return false;
  if (f->func_defaults != nullptr && !is_guardable_constant(f->func_defaults)) return false;
  return f->func_dict == nullptr || PyDict_GET_SIZE(f->func_dict) == 0;
}

nb::object Interpreter::wrap(nb::handle v, int source) {
  auto cached = wrapped_.find(source);
  if (cached != wrapped_.end() && cached->second.ptr() != nullptr) return cached->second;
  nb::object out;
  PyObject* o = v.ptr();
  if (THPVariable_Check(o)) {
    auto known = tracer_of_.find(o);
    if (known != tracer_of_.end()) {
      guards_.add_same(source, tensor_source_.at(o));
      out = nb::borrow(known->second);
    } else {
      const at::Tensor& real = THPVariable_Unpack(o);
      EMBER_UNSUPPORTED(real.layout() == c10::kStrided && !real.is_quantized() && !real.is_nested())
          << sources_.name(source) << " is a " << real.layout() << " tensor; only strided "
          << "tensors are supported";
      if (real.requires_grad()) grad_inputs_ = true;
      // A module's registered buffer (read through its _buffers) is module state like a
      // parameter: the executor may keep the outputs of kernels that read only such inputs.
      const Source& src = sources_.at(source);
      const bool buffer = src.kind == SourceKind::ModuleMember && src.index == 1;
      graph::InputKind kind = isinstance(v, parameter_type()) ? graph::InputKind::Parameter
                              : buffer                        ? graph::InputKind::Buffer
                                                              : graph::InputKind::User;
      std::vector<int64_t> dynamic;
      if (options_.dynamic_dims) dynamic = options_.dynamic_dims(sources_.name(source), real, kind);
      guards_.add_tensor(source, o, dynamic);
      session_.exit();
      at::Tensor tracer;
      try {
        tracer = session_.add_input(real, kind, sources_.name(source), std::nullopt, dynamic);
        // The symbols add_input made, read off the input's type: a dim that is a new symbol.
        const graph::Graph& g = session_.graph();
        const graph::TensorType& type = g.type(g.inputs.back().value);
        for (size_t d = 0; d < type.sizes.size(); ++d) {
          std::optional<sym::SymbolId> id = type.sizes[d].expr().as_symbol();
          if (id && static_cast<size_t>(*id) == symbol_sources_.size()) {
            symbol_sources_.emplace_back(source, static_cast<int64_t>(d));
          }
        }
      } catch (...) {
        session_.enter();
        throw;
      }
      session_.enter();
      if (real.requires_grad() && (entry_grad_ || at::GradMode::is_enabled())) {
        // Autograd records the program's ops on it: the joint graph (capture_compiler.cpp),
        // whose backward node the call attaches under grad mode only. In a frame called under
        // grad mode it requires grad even when read under no_grad (inside an optimizer's step),
        // so that ops on it after grad mode is back on are recorded, as in eager. A leaf when
        // the tensor is one, else a non-leaf the program may modify in place (Note [Traced
        // inputs modified in place], tracer/grad_inputs.h).
        EMBER_UNSUPPORTED(entry_grad_)
            << sources_.name(source) << " requires grad and is read under enable_grad in a frame "
            << "called under no_grad: training graphs are captured for calls under grad mode";
        grad_tracers_.add(tracer, /*leaf=*/real.is_leaf());
        grad_tracer_inputs_.push_back(static_cast<int>(input_sources_.size()));
      }
      out = nb::steal(THPVariable_Wrap(tracer));
      input_sources_.push_back(source);
      tracer_of_[o] = out.ptr();
      real_of_[out.ptr()] = o;
      tensor_source_[o] = source;
      keepalive_.push_back(nb::borrow(v));
    }
  } else if (is_guardable_constant(o)) {
    guards_.add_equals(source, o);
    out = nb::borrow(v);
  } else if (auto copy = copy_of_.find(o); copy != copy_of_.end()) {
    // A list or dict read before through another source: the same copy (mutations through one
    // path are seen through the other), and the call must give both the same object.
    guards_.add_same(source, copy_source_.at(copy->second.ptr()));
    out = copy->second;
  } else if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {
    // A copy whose items are wrapped. A mutation of it is written back to the original after
    // the graph (mutates_outside).
    guards_.add_len(source, o);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    nb::object copy = checked(PyList_New(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      nb::object key = checked(PyLong_FromSsize_t(i));
      nb::object item = wrap(PySequence_Fast_GET_ITEM(o, i), sources_.item(source, key.ptr()));
      PyList_SET_ITEM(copy.ptr(), i, item.release().ptr());
    }
    out = PyTuple_CheckExact(o) ? checked(PyList_AsTuple(copy.ptr())) : copy;
    copy_source_[out.ptr()] = source;
    if (PyList_CheckExact(o)) copy_of_.emplace(o, out);
  } else if (PyDict_CheckExact(o)) {
    guards_.add_len(source, o);
    out = checked(PyDict_New());
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &key, &value)) {
      EMBER_UNSUPPORTED(is_guardable_constant(key) || is_static_key(key))
          << sources_.name(source) << " has a key of type " << Py_TYPE(key)->tp_name;
      nb::object item = wrap(value, sources_.item(source, key));
      if (PyDict_SetItem(out.ptr(), key, item.ptr()) < 0) throw nb::python_error();
    }
    copy_source_[out.ptr()] = source;
    copy_of_.emplace(o, out);
  } else if (PyMethod_Check(o)) {
    nb::object name = nb::steal(PyUnicode_FromString("__func__"));
    guards_.add_id(sources_.attr(source, name.ptr()), PyMethod_GET_FUNCTION(o));
    out = nb::borrow(v);
    source_of_.emplace(o, source);
  } else if (is_identity_free(v)) {
    // An nn.Module or an object of a program's class: its type, not its identity, so one
    // compiled frame serves every layer of a class and a new object per call (a cache, a
    // ModelOutput a caller made) does not recompile; what the frame reads of it is guarded as
    // read. Anything that depends on its identity pins it (pin_identity).
    guards_.add_type(source, o);
    // Read before through another source: what the trace reads of it is guarded through that
    // one, so this source must hold the same object.
    if (auto known = source_of_.find(o); known != source_of_.end()) {
      guards_.add_same(source, known->second);
    }
    identity_free_[o].push_back(source);
    out = nb::borrow(v);
    source_of_.emplace(o, source);
  } else if (guarded_by_code(o)) {
    // Note [Functions by their code].
    PyFunctionObject* f = reinterpret_cast<PyFunctionObject*>(o);
    guards_.add_type(source, o);
    auto attr = [&](const char* name) {
      nb::object n = nb::steal(PyUnicode_FromString(name));
      return sources_.attr(source, n.ptr());
    };
    guards_.add_id(attr("__code__"), f->func_code);
    guards_.add_id(attr("__globals__"), f->func_globals);
    guards_.add_equals(attr("__defaults__"),
                       f->func_defaults != nullptr ? f->func_defaults : Py_None);
    guards_.add_equals(attr("__kwdefaults__"), Py_None);
    // The function's own attributes: none (a later call's function must have none either).
    nb::object no_attrs = nb::steal(PyDict_New());
    guards_.add_len(attr("__dict__"), no_attrs.ptr());
    if (auto known = source_of_.find(o); known != source_of_.end()) {
      guards_.add_same(source, known->second);
    }
    identity_free_[o].push_back(source);
    out = nb::borrow(v);
    source_of_.emplace(o, source);
  } else {
    guards_.add_id(source, o);
    out = nb::borrow(v);
    source_of_.emplace(o, source);
  }
  keepalive_.push_back(out);
  wrapped_[source] = out;
  return out;
}

nb::object Interpreter::constant_tensor(nb::handle real_tensor) {
  at::Tensor real = THPVariable_Unpack(real_tensor.ptr());
  if (at::functionalization::impl::isFunctionalTensor(real)) {
    real = at::functionalization::impl::from_functional_tensor(real);
  }
  session_.exit();
  at::Tensor tracer;
  try {
    tracer = session_.add_constant_tensor(real);
  } catch (...) {
    session_.enter();
    throw;
  }
  session_.enter();
  return nb::steal(THPVariable_Wrap(tracer));
}

namespace {

/// Whether `v` is a list of bools and ints (nested lists of them when `nested`), and whether
/// every leaf is a bool.
bool is_index_list(PyObject* v, bool nested, bool& all_bool) {
  if (!PyList_CheckExact(v) || PyList_GET_SIZE(v) == 0) return false;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); ++i) {
    PyObject* item = PyList_GET_ITEM(v, i);
    if (PyList_CheckExact(item)) {
      if (!nested || !is_index_list(item, nested, all_bool)) return false;
    } else if (PyBool_Check(item)) {
    } else if (PyLong_CheckExact(item)) {
      all_bool = false;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

nb::object Interpreter::tensor_index(nb::handle tensor, nb::handle key) {
  // Tensor indexing turns a list of ints (or bools) into an index tensor of the indexed
  // tensor's device (torch's sequenceToVariable), a real tensor the trace would refuse: it is
  // made here, as a constant of the graph. A list at the top level counts only when flat (a
  // nested one is read as a tuple, as numpy's legacy rule has it); inside a tuple, nested
  // lists count too.
  auto convert = [&](PyObject* list, bool nested) -> nb::object {
    bool all_bool = true;
    if (!is_index_list(list, nested, all_bool)) return {};
    static PyObject* torch_tensor = imported("torch", "tensor");
    static PyObject* torch_bool = imported("torch", "bool");
    static PyObject* torch_long = imported("torch", "long");
    nb::object device = checked(PyObject_GetAttrString(tensor.ptr(), "device"));
    nb::object kwargs = checked(PyDict_New());
    PyDict_SetItemString(kwargs.ptr(), "dtype", all_bool ? torch_bool : torch_long);
    PyDict_SetItemString(kwargs.ptr(), "device", device.ptr());
    nb::object args = checked(PyTuple_Pack(1, list));
    session_.exit();
    PyObject* real = PyObject_Call(torch_tensor, args.ptr(), kwargs.ptr());
    session_.enter();
    return constant_tensor(checked(real));
  };
  PyObject* k = key.ptr();
  if (PyList_CheckExact(k)) {
    bool all_bool = true;
    if (is_index_list(k, /*nested=*/false, all_bool) && all_bool) {
      // A mask over dimension 0 of the size it masks: the positions of its True items (a
      // bool index's output shape depends on them; a constant's does not).
      const at::Tensor& t = THPVariable_Unpack(tensor.ptr());
      // (A symbolic dim 0 is compared through a size guard.)
      if (t.dim() == 0 || t.sym_size(0) != PyList_GET_SIZE(k)) return nb::borrow(key);
      nb::object positions = checked(PyList_New(0));
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(k); ++i) {
        if (PyList_GET_ITEM(k, i) != Py_True) continue;
        nb::object p = checked(PyLong_FromSsize_t(i));
        if (PyList_Append(positions.ptr(), p.ptr()) < 0) throw nb::python_error();
      }
      if (PyList_GET_SIZE(positions.ptr()) == 0) return nb::borrow(key);
      return convert(positions.ptr(), /*nested=*/false);
    }
    nb::object t = convert(k, /*nested=*/false);
    return t.is_valid() ? t : nb::borrow(key);
  }
  if (!PyTuple_CheckExact(k)) return nb::borrow(key);
  nb::object items;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(k); ++i) {
    PyObject* item = PyTuple_GET_ITEM(k, i);
    nb::object t = PyList_CheckExact(item) ? convert(item, /*nested=*/true) : nb::object();
    if (!t.is_valid()) continue;
    if (!items.is_valid()) {
      items = checked(PyList_New(0));
      for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(k); ++j) {
        if (PyList_Append(items.ptr(), PyTuple_GET_ITEM(k, j)) < 0) throw nb::python_error();
      }
    }
    if (PyList_SetItem(items.ptr(), i, t.release().ptr()) < 0) throw nb::python_error();
  }
  return items.is_valid() ? checked(PyList_AsTuple(items.ptr())) : nb::borrow(key);
}

bool Interpreter::materialize(nb::handle v, std::vector<nb::object>& items) {
  int source = source_of(v);
  if (source < 0 || !is_indexed_nn_container(v)) return false;
  guards_.add_len(source, v.ptr());
  Py_ssize_t n = PyObject_Length(v.ptr());
  if (n < 0) throw nb::python_error();
  items.clear();
  for (Py_ssize_t i = 0; i < n; ++i) {
    nb::object key = checked(PyLong_FromSsize_t(i));
    nb::object item = checked(PyObject_GetItem(v.ptr(), key.ptr()));
    items.push_back(wrap(item, sources_.item(source, key.ptr())));
  }
  return true;
}

nb::object Interpreter::materialized(nb::object v) {
  std::vector<nb::object> items;
  if (!materialize(v, items)) return v;
  nb::object list = fresh(checked(PyList_New(0)));
  for (auto& item : items) {
    if (PyList_Append(list.ptr(), item.ptr()) < 0) throw nb::python_error();
  }
  return list;
}

std::vector<nb::object> Interpreter::unpack_items(nb::handle v) {
  std::vector<nb::object> items;
  if (materialize(v, items)) return items;
  EMBER_UNSUPPORTED(is_plain_value(v) || is_fresh(v))
      << "unpacking a " << type_name_of(v) << " at " << location();
  nb::object fast = checked(PySequence_Fast(v.ptr(), "cannot unpack"));
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.ptr()); ++i) {
    items.push_back(nb::borrow(PySequence_Fast_GET_ITEM(fast.ptr(), i)));
  }
  return items;
}

bool Interpreter::mutates_outside(nb::handle v) {
  if (!(PyList_CheckExact(v.ptr()) || PyDict_CheckExact(v.ptr()))) return false;
  auto it = copy_source_.find(v.ptr());
  if (it == copy_source_.end()) return false;
  if (mutated_set_.insert(v.ptr()).second) {
    mutated_containers_.emplace_back(nb::borrow(v), it->second);
  }
  return true;
}

void Interpreter::pin_identity(nb::handle v) {
  if (identity_free_.empty() || !v.is_valid()) return;
  PyObject* o = v.ptr();
  if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {  // what a container holds, one level down
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i) {
      PyObject* item = PySequence_Fast_GET_ITEM(o, i);
      if (!PyList_CheckExact(item) && !PyTuple_CheckExact(item)) pin_identity(item);
    }
    return;
  }
  if (PyDict_CheckExact(o)) {
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &key, &value)) {
      if (!PyList_CheckExact(value) && !PyTuple_CheckExact(value)) pin_identity(value);
    }
    return;
  }
  auto it = identity_free_.find(o);
  if (it == identity_free_.end()) return;
  if (log_enabled("guards")) {
    log_warning("ember: guarding " + sources_.name(it->second[0]) +
                " by identity from here on: " + "the trace depends on it at " + location());
  }
  for (int source : it->second) guards_.add_id(source, v.ptr());
  identity_free_.erase(it);
}

void Interpreter::pin_identities(const std::vector<nb::object>& values) {
  if (identity_free_.empty()) return;
  for (const nb::object& v : values) pin_identity(v);
}

}  // namespace ember::capture
