/// \file
/// Calls of C functions and methods (call_policy.cpp): builtins (an allow-list run for real,
/// setattr / getattr / delattr as the attribute ops), functools.reduce (its function called as
/// the program's calls are), methods of containers and plain values (mutations only of the
/// frame's own containers or its copies of outside ones), C descriptors and method-wrappers,
/// numpy ufuncs of numbers. Tensor methods and torch's C functions: call_torch.cpp.
#include <string>
#include <string_view>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

namespace {

/// Methods of list, dict and set that mutate their object.
bool is_mutating_method(std::string_view name) {
  size_t dot = name.rfind('.');
  if (dot != std::string_view::npos) name = name.substr(dot + 1);
  static constexpr std::string_view kMutating[] = {"append",
                                                   "extend",
                                                   "insert",
                                                   "pop",
                                                   "remove",
                                                   "clear",
                                                   "sort",
                                                   "reverse",
                                                   "update",
                                                   "setdefault",
                                                   "popitem",
                                                   "add",
                                                   "discard",
                                                   "__setitem__",
                                                   "__delitem__",
                                                   "__iadd__",
                                                   "difference_update",
                                                   "intersection_update",
                                                   "symmetric_difference_update"};
  for (std::string_view m : kMutating) {
    if (name == m) return true;
  }
  return false;
}

/// Builtins that are safe to run for real on the interpreter's values.
bool is_safe_builtin(std::string_view name) {
  static constexpr std::string_view kSafe[] = {
      "len", "isinstance", "issubclass", "callable", "hasattr", "min",  "max",  "sum",    "abs",
      "all", "any",        "round",      "divmod",   "pow",     "iter", "next", "format", "repr",
      "chr", "ord",        "hash",       "sorted",   "ascii",   "bin",  "hex",  "oct"};
  for (std::string_view s : kSafe) {
    if (name == s) return true;
  }
  return false;
}

}  // namespace

nb::object Interpreter::call_c_function(nb::handle callable, std::vector<nb::object> args,
                                        nb::handle kwnames) {
  PyObject* c = callable.ptr();
  PyObject* self = PyCFunction_GET_SELF(c);
  std::string name = name_of(callable);
  if (self != nullptr && PyModule_Check(self) &&
      std::string_view(PyModule_GetName(self)) == "builtins") {
    return call_builtin(callable, std::move(args), kwnames);
  }
  std::string_view leaf = std::string_view(name).substr(name.rfind('.') + 1);
  if (name == "reduce" && self != nullptr && PyModule_Check(self) &&
      std::string_view(PyModule_GetName(self)) == "_functools") {
    return reduce(std::move(args), kwnames);  // its function is called as the program's are
  }
  if (self != nullptr && is_tensor(self)) {
    return call_tensor_method(callable, std::move(args), kwnames, name);
  }
  static PyObject* ordered_dict = imported("collections", "OrderedDict");
  static PyObject* default_dict = imported("collections", "defaultdict");
  if (self != nullptr && args.empty() && !kwnames.is_valid() &&
      (leaf == "keys" || leaf == "values" || leaf == "items") && source_of(self) >= 0 &&
      (Py_TYPE(self) == reinterpret_cast<PyTypeObject*>(ordered_dict) ||
       Py_TYPE(self) == reinterpret_cast<PyTypeObject*>(default_dict) ||
       (PyDict_Check(self) && rebuildable_object_type(self) != nullptr))) {
    // An OrderedDict or defaultdict from outside the frame (an optimizer's hook registries),
    // or an object of a program's dict subclass (a ModelOutput a caller made).
    return dict_view(self, leaf);
  }
  if (self != nullptr && is_fresh(self) && rebuildable_object_type(self) != nullptr) {
    // dict methods of a new object: what they store is rebuilt from its own source.
    return call_real(callable, std::move(args), kwnames, /*pin=*/false);
  }
  if (self != nullptr && PyType_Check(self) &&
      is_safe_builtin_type(self)) {  // dict.fromkeys, int.from_bytes, str.maketrans, ...
    return call_real(callable, std::move(args), kwnames);
  }
  if (self != nullptr && is_plain_value(self)) {
    bool mutable_container = PyList_Check(self) || PyDict_Check(self) || PySet_Check(self);
    EMBER_UNSUPPORTED(!mutable_container || is_fresh(self) || !is_mutating_method(name) ||
                      mutates_outside(self))
        << "calling " << type_name_of(self) << "." << name
        << " on a container from outside the function at " << location();
    return call_container_method(callable, std::move(args), kwnames, self, leaf);
  }
  return call_torch_function(callable, std::move(args), kwnames, name);
}

nb::object Interpreter::call_builtin(nb::handle fn, std::vector<nb::object> args,
                                     nb::handle kwnames) {
  std::string name = name_of(fn);
  size_t nkw = kwnames.is_valid() ? static_cast<size_t>(PyTuple_GET_SIZE(kwnames.ptr())) : 0;
  if (name == "setattr" && nkw == 0 && args.size() == 3 && PyUnicode_Check(args[1].ptr())) {
    store_attr(args[0], args[1].ptr(), args[2]);
    return nb::none();
  }
  if (name == "delattr" && nkw == 0 && args.size() == 2 && PyUnicode_Check(args[1].ptr())) {
    EMBER_UNSUPPORTED(is_fresh(args[0]) && !special_method(args[0], "__delattr__").is_valid())
        << "delattr on a " << type_name_of(args[0]) << " at " << location();
    if (PyObject_DelAttr(args[0].ptr(), args[1].ptr()) < 0) throw nb::python_error();
    return nb::none();
  }
  if (name == "getattr" && nkw == 0 && (args.size() == 2 || args.size() == 3) &&
      PyUnicode_Check(args[1].ptr())) {
    if (args.size() == 2) return load_attr(args[0], args[1].ptr());
    try {
      return load_attr(args[0], args[1].ptr());
    } catch (nb::python_error& e) {
      if (!e.matches(PyExc_AttributeError)) throw;
      // The default stands for a missing attribute: guarded where that is a C lookup (no
      // __getattr__ to run per call), as an optimizer's grad_scale, and on every object guarded
      // by type (another object of the type may have it).
      int source = source_of(args[0]);
      if (source >= 0 && (Py_TYPE(args[0].ptr())->tp_getattro == PyObject_GenericGetAttr ||
                          identity_free_.count(args[0].ptr()) != 0)) {
        guards_.add_equals(sources_.has_attr(source, args[1].ptr()), Py_False);
      }
      return args[2];
    }
  }
  EMBER_UNSUPPORTED(is_safe_builtin(name)) << "calling builtin " << name << " at " << location();
  // What the builtin reads of an object guarded by type is guarded as a value (len, hasattr),
  // or depends on its type alone (isinstance, issubclass, callable); anything else (id(),
  // hash(), repr(), min/max/sorted over objects, ...) pins its identity (call_real).
  bool pin = name != "isinstance" && name != "issubclass" && name != "callable" && name != "iter" &&
             name != "next" && name != "len";
  int source = args.size() >= 1 ? source_of(args[0]) : -1;
  bool by_type = source >= 0 && (is_nn_module(args[0]) || identity_free_.count(args[0].ptr()) != 0);
  if (name == "len" && args.size() == 1 && nkw == 0 && by_type) {
    guards_.add_len(source, args[0].ptr());  // a list's or dict's copy has its own Len guard
  }
  if (name == "hasattr" && args.size() == 2 && nkw == 0 && PyUnicode_Check(args[1].ptr()) &&
      by_type) {
    nb::object attr = args[1];
    nb::object r = call_real(fn, std::move(args), kwnames, /*pin=*/false);
    guards_.add_equals(sources_.has_attr(source, attr.ptr()), r.ptr());
    return r;
  }
  if (name != "len" && name != "isinstance" && name != "issubclass" && name != "callable" &&
      name != "hasattr") {
    for (auto& a : args) a = materialized(a);
  }
  return call_real(fn, std::move(args), kwnames, pin);
}

nb::object Interpreter::reduce(std::vector<nb::object> args, nb::handle kwnames) {
  EMBER_UNSUPPORTED((args.size() == 2 || args.size() == 3) && !kwnames.is_valid())
      << "functools.reduce with " << args.size() << " arguments at " << location();
  std::vector<nb::object> items = unpack_items(materialized(args[1]));
  size_t first = 0;
  nb::object acc;
  if (args.size() == 3) {
    acc = args[2];
  } else {
    if (items.empty()) {
      PyErr_SetString(PyExc_TypeError, "reduce() of empty iterable with no initial value");
      throw nb::python_error();
    }
    acc = items[0];
    first = 1;
  }
  for (size_t i = first; i < items.size(); ++i) acc = call(args[0], {acc, items[i]}, nb::handle());
  return acc;
}

nb::object Interpreter::call_container_method(nb::handle method, std::vector<nb::object> args,
                                              nb::handle kwnames, PyObject* self,
                                              std::string_view leaf) {
  // dict.get(obj), set.add(obj), list.index(obj), ... hash or compare their arguments: those
  // are pinned. A container's item stores and a list's append, insert and extend only hold
  // what they store (a ModelOutput's super().__setitem__(name, cache)).
  size_t held = args.size();
  if (PyList_Check(self) || PyDict_Check(self) || is_fresh(self)) {
    if (leaf == "append" || leaf == "extend") {
      held = 0;
    } else if (leaf == "insert" || leaf == "__setitem__" || leaf == "setdefault" ||
               leaf == "__setattr__") {
      held = 1;
    }
  }
  for (size_t i = 0; i < args.size() && i < held; ++i) pin_identity(args[i]);
  return call_real(method, std::move(args), kwnames, /*pin=*/false);
}

nb::object Interpreter::call_descriptor(nb::handle callable, std::vector<nb::object> args,
                                        nb::handle kwnames) {
  PyObject* c = callable.ptr();
  std::string tname = type_name_of(callable);
  PyObject* self = nullptr;
  if (tname == "method-wrapper") {
    nb::object s = checked(PyObject_GetAttrString(c, "__self__"));
    self = s.ptr();
    std::string mname = name_of(callable);
    if (mname.size() >= 16 && mname.substr(mname.size() - 16) == "__getattribute__" &&
        args.size() == 1 && PyUnicode_Check(args[0].ptr()) && !kwnames.is_valid()) {
      return load_attr(s, args[0].ptr());  // super().__getattribute__(name): an attribute read
    }
    EMBER_UNSUPPORTED(
        is_tensor(s) || is_fresh(s) ||
        (is_plain_value(s) && !PyList_Check(self) && !PyDict_Check(self) && !PySet_Check(self)))
        << "calling " << name_of(callable) << " of a " << type_name_of(s) << " at " << location();
    return call_container_method(callable, std::move(args), kwnames, self,
                                 std::string_view(mname).substr(mname.rfind('.') + 1));
  }
  if (tname == "wrapper_descriptor" && name_of(callable) == "object.__setattr__" &&
      args.size() == 3 && PyUnicode_Check(args[1].ptr()) && !kwnames.is_valid()) {
    // object.__setattr__(obj, name, value): a store that bypasses obj's class __setattr__.
    if (!is_fresh(args[0])) {
      store_attr_outside(args[0], args[1].ptr(), args[2]);
    } else if (PyObject_GenericSetAttr(args[0].ptr(), args[1].ptr(), args[2].ptr()) < 0) {
      throw nb::python_error();
    }
    return nb::none();
  }
  if (tname == "wrapper_descriptor" && name_of(callable) == "object.__getattribute__" &&
      args.size() == 2 && PyUnicode_Check(args[1].ptr()) && !kwnames.is_valid()) {
    // object.__getattribute__(obj, name): an attribute read, with its source and guard.
    return load_attr(args[0], args[1].ptr());
  }
  if (tname == "method_descriptor" || tname == "wrapper_descriptor") {
    nb::object owner = checked(PyObject_GetAttrString(c, "__objclass__"));
    std::string owner_name = reinterpret_cast<PyTypeObject*>(owner.ptr())->tp_name;
    bool tensor_method = starts_with(owner_name, "torch._C.") || owner_name == "TensorBase";
    bool immutable = owner.ptr() == reinterpret_cast<PyObject*>(&PyUnicode_Type) ||
                     owner.ptr() == reinterpret_cast<PyObject*>(&PyTuple_Type) ||
                     owner.ptr() == reinterpret_cast<PyObject*>(&PyLong_Type) ||
                     owner.ptr() == reinterpret_cast<PyObject*>(&PyFloat_Type);
    EMBER_UNSUPPORTED((tensor_method && !is_denied_torch_function(name_of(callable))) || immutable)
        << "calling " << owner_name << "." << name_of(callable) << " at " << location();
    return call_real(callable, std::move(args), kwnames);
  }
  EMBER_UNSUPPORTED(runs_for_real(callable) || starts_with(tname, "torch._ops."))
      << "calling " << name_of(callable) << " at " << location();
  return call_real(callable, std::move(args), kwnames);
}

nb::object Interpreter::call_numpy_ufunc(nb::handle callable, std::vector<nb::object> args,
                                         nb::handle kwnames) {
  if (kwnames.is_valid()) return call_unsupported(callable);
  // np.sqrt(d_model): a numpy function of Python or numpy numbers is a number.
  bool numbers = true;
  for (const nb::object& a : args) {
    numbers = numbers && (PyLong_CheckExact(a.ptr()) || PyFloat_CheckExact(a.ptr()) ||
                          PyBool_Check(a.ptr()) || is_numpy_scalar(a.ptr()));
  }
  EMBER_UNSUPPORTED(numbers) << "calling " << str_of(callable) << " on values that are not "
                             << "numbers at " << location();
  return call_real(callable, std::move(args), kwnames);
}

}  // namespace ember::capture
