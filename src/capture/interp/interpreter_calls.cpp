/// \file
/// The interpreter's call policy: which callables are inlined, which run for real, which are
/// unsupported; and inlining itself (argument binding, a new Frame).
#include <string_view>

#include <ATen/FunctionalTensorWrapper.h>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

namespace {

std::string str_of(nb::handle o) {
  nb::object s = nb::steal(PyObject_Str(o.ptr()));
  if (!s.is_valid()) {
    PyErr_Clear();
    return "?";
  }
  return nb::cast<std::string>(s);
}

/// The `__module__` of a callable, or "".
std::string module_of(nb::handle c) {
  PyObject* m = PyObject_GetAttrString(c.ptr(), "__module__");
  if (m == nullptr) {
    PyErr_Clear();
    return {};
  }
  nb::object mod = nb::steal(m);
  return PyUnicode_Check(m) ? std::string(PyUnicode_AsUTF8(m)) : std::string();
}

/// torch functions that change global state or leave the program: never run at capture time.
bool is_denied_torch_function(std::string_view name) {
  static constexpr std::string_view kDenied[] = {"manual_seed",
                                                 "seed",
                                                 "set_grad_enabled",
                                                 "_set_grad_enabled",
                                                 "set_default_dtype",
                                                 "set_default_device",
                                                 "use_deterministic_algorithms",
                                                 "backward",
                                                 "grad",
                                                 "compile",
                                                 "save",
                                                 "load",
                                                 "set_num_threads",
                                                 "set_printoptions",
                                                 "register_buffer",
                                                 "register_parameter",
                                                 "add_module",
                                                 "register_module",
                                                 "requires_grad_",
                                                 "retain_grad",
                                                 "register_hook",
                                                 "tolist",
                                                 "numpy",
                                                 "item",
                                                 "_assert_async",
                                                 "cuda",
                                                 "synchronize"};
  for (std::string_view d : kDenied) {
    if (name == d || (name.size() > d.size() && name[name.size() - d.size() - 1] == '.' &&
                      name.substr(name.size() - d.size()) == d)) {
      return true;
    }
  }
  return false;
}

}  // namespace

PyObject* torch_class(const char* module, const char* name) {
  PyObject* m = PyImport_ImportModule(module);
  PyObject* t = m != nullptr ? PyObject_GetAttrString(m, name) : nullptr;
  Py_XDECREF(m);
  if (t == nullptr) PyErr_Clear();
  return t;  // kept for the process
}

bool is_stateful_torch_object(nb::handle v) {
  static PyObject* optimizer = torch_class("torch.optim", "Optimizer");
  static PyObject* scheduler = torch_class("torch.optim.lr_scheduler", "LRScheduler");
  static PyObject* scaler = torch_class("torch.amp", "GradScaler");
  for (PyObject* t : {optimizer, scheduler, scaler}) {
    if (t == nullptr) continue;
    int r = PyObject_IsInstance(v.ptr(), t);
    if (r < 0) throw nb::python_error();
    if (r == 1) return true;
  }
  return false;
}

namespace {

/// Tensor methods that read a tensor's data into Python.
bool is_data_read(std::string_view name) {
  size_t dot = name.rfind('.');
  if (dot != std::string_view::npos) name = name.substr(dot + 1);
  return name == "item" || name == "tolist" || name == "numpy" || name == "__bool__" ||
         name == "__int__" || name == "__float__" || name == "__index__";
}

/// Whether `v` is Python data made of numbers (a number, or lists / tuples of them): what
/// torch.tensor(data) turns into a constant.
bool is_number_data(PyObject* v) {
  if (PyBool_Check(v) || PyLong_CheckExact(v) || PyFloat_CheckExact(v)) return true;
  if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) {
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(v); ++i) {
      if (!is_number_data(PySequence_Fast_GET_ITEM(v, i))) return false;
    }
    return true;
  }
  return false;
}

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
  return false;
}

/// Functions of the standard library that read their arguments and return a new value, with
/// no side effect and no call into program code: they run for real.
bool is_pure_library_function(std::string_view module, std::string_view name) {
  if (module == "contextlib") {
    return name == "nullcontext" || name == "nullcontext.__init__" ||
           name == "nullcontext.__enter__" || name == "nullcontext.__exit__";
  }
  if (module == "dataclasses") return name == "fields" || name == "is_dataclass";
  if (module == "inspect") {
    return name == "signature" || name == "isclass" || name == "isfunction" || name == "ismethod";
  }
  if (module == "typing") return name == "cast" || name == "get_origin" || name == "get_args";
  return false;
}

/// torch's "is compiling" predicates: true inside a captured frame, as under torch.compile, so
/// that programs take the paths they keep for compilation.
bool is_compiling_predicate(std::string_view module, std::string_view name) {
  if (name != "is_compiling" && name != "is_dynamo_compiling") return false;
  return module == "torch.compiler" || module == "torch._utils" ||
         module == "torch._dynamo.external_utils";
}

PyObject* builtins_dict_of(PyObject* globals) {
  PyObject* b = PyDict_GetItemString(globals, "__builtins__");
  if (b != nullptr && PyModule_Check(b)) return PyModule_GetDict(b);
  if (b != nullptr && PyDict_Check(b)) return b;
  return PyEval_GetBuiltins();
}

}  // namespace

bool Interpreter::runs_for_real(nb::handle callable) const {
  std::string module = module_of(callable);
  if (is_pure_library_function(module, name_of(callable))) return true;
  // torch.optim's functions change the optimizers' state (an LR scheduler's wrapper of `step`
  // runs the step): never at capture time.
  if (module == "torch.optim" || starts_with(module, "torch.optim.") ||
      module == "torch.amp.grad_scaler") {
    return false;
  }
  if (!(module == "torch" || starts_with(module, "torch.") || module == "math" ||
        module == "_operator" || module == "operator")) {
    return false;
  }
  // Functions that read or write what tracing does not see: parameters' .grad (clip_grad_norm_
  // on a list of parameters saw no gradients on their tracer tensors and clipped nothing) and
  // .data (vector_to_parameters).
  if (starts_with(module, "torch.nn.utils.clip_grad") ||
      starts_with(module, "torch.nn.utils.convert_parameters")) {
    return false;
  }
  return !is_denied_torch_function(name_of(callable));
}

nb::object Interpreter::call_from(Frame& fr, nb::handle callable, std::vector<nb::object> args,
                                  nb::handle kwnames) {
  struct Direct {
    Interpreter& interp;
    ~Direct() {
      interp.direct_caller_ = nullptr;
      interp.direct_callable_ = nullptr;
    }
  } direct{*this};
  direct_caller_ = &fr;
  direct_callable_ = callable.ptr();
  return call(callable, std::move(args), kwnames);
}

nb::object Interpreter::call(nb::handle callable, std::vector<nb::object> args,
                             nb::handle kwnames) {
  PyObject* c = callable.ptr();
  EMBER_UNSUPPORTED(c != nullptr) << "calling NULL at " << location();
  if (is_higher_order_op(callable)) {
    throw RunsUnhooked("calling " + name_of(callable) +
                       " (a higher-order op: ember does not capture them yet; the frame runs "
                       "eagerly) at " +
                       location());
  }
  if (is_checkpoint(callable)) return call_checkpointed(std::move(args), kwnames);
  if (is_nn_module(callable)) return call_module(callable, std::move(args), kwnames);
  if (PyMethod_Check(c)) {
    PyObject* self = PyMethod_GET_SELF(c);
    PyObject* fn = PyMethod_GET_FUNCTION(c);
    if (nb::object original = dynamo_disabled_original(fn); original.is_valid()) {
      args.insert(args.begin(), nb::borrow(self));
      return inline_function(original, std::move(args), kwnames);
    }
    if (std::string_view(Py_TYPE(fn)->tp_name) == "functools._lru_cache_wrapper") {
      if (nb::object wrapped = lru_wrapped(nb::handle(fn)); wrapped.is_valid()) {
        args.insert(args.begin(), nb::borrow(self));  // an lru_cache'd method
        return inline_function(wrapped, std::move(args), kwnames);
      }
    }
    if (inlines(fn)) {
      int method_source = source_of(callable);
      if (method_source >= 0 && source_of(fn) < 0) {
        // Its closure cells are read through the method's source: m.__func__.__closure__[i].
        nb::object func_name = nb::steal(PyUnicode_FromString("__func__"));
        source_of_.emplace(fn, sources_.attr(method_source, func_name.ptr()));
        keepalive_.push_back(nb::borrow(fn));
      }
      args.insert(args.begin(), nb::borrow(self));
      return inline_function(fn, std::move(args), kwnames);
    }
    if (is_nn_module(self) && PyFunction_Check(fn)) {
      std::string fname = name_of(fn);
      if (fname == "Module._wrapped_call_impl" || fname == "Module._call_impl") {
        return call_module(self, std::move(args), kwnames, true);  // super().__call__(...)
      }
      std::string leaf = fname.substr(fname.rfind('.') + 1);
      if (leaf == "items" || leaf == "keys" || leaf == "values") {
        return module_dict_view(nb::borrow(self), leaf, location());
      }
      // A method of a torch.nn module (super().forward, _conv_forward): inlined like forward;
      // what it would mutate is refused by the store rules.
      EMBER_UNSUPPORTED(module_of(fn).rfind("torch.nn.", 0) == 0)
          << "calling nn.Module method " << fname << " at " << location();
      args.insert(args.begin(), nb::borrow(self));
      return inline_function(fn, std::move(args), kwnames);
    }
    // An optimizer's, learning-rate scheduler's or gradient scaler's methods change real state
    // (the parameters, the step count) when they run, so they never run at capture time: a
    // graph break, and the call runs in Python. (Run for real, SGD.step updated the parameters once
    // during the capture and again when the break ran it: twice per call.) An optimizer's step
    // is torch.optim code, inlined above; what is left here is the methods torch wraps in
    // torch._disable_dynamo (zero_grad, state_dict, load_state_dict), schedulers and scalers.
    EMBER_UNSUPPORTED(!is_stateful_torch_object(nb::handle(self)))
        << "calling " << name_of(fn) << " of a " << type_name_of(nb::handle(self))
        << " (it changes real state: parameters, steps, scales) at " << location();
    // Tensor methods written in Python (Tensor.backward, register_hook, retain_grad) are denied
    // as the torch functions are: backward on tracer tensors would consume the joint graph's
    // autograd graph and fill the tracer leaves' .grad, not the parameters'.
    EMBER_UNSUPPORTED(runs_for_real(fn) ||
                      (is_tensor(self) && !is_denied_torch_function(name_of(fn))))
        << "calling " << name_of(fn) << " (a library method) at " << location();
    return call_real(callable, std::move(args), kwnames);
  }
  if (PyFunction_Check(c)) {
    if (args.empty() && is_compiling_predicate(module_of(callable), name_of(callable))) {
      return nb::borrow(Py_True);
    }
    if (args.size() == 1 && !kwnames.is_valid() && module_of(callable) == "copy" &&
        name_of(callable) == "deepcopy") {
      return deep_copy(args[0]);
    }
    if (inlines(c)) return inline_function(callable, std::move(args), kwnames);
    if (nb::object original = dynamo_disabled_original(callable); original.is_valid()) {
      return inline_function(original, std::move(args), kwnames);
    }
    if (nb::object original = torch_compiled_original(callable); original.is_valid()) {
      return call(original, std::move(args), kwnames);  // a torch.compile'd function
    }
    if (nb::object r = call_scheduler_patched_step(callable, args, kwnames); r.is_valid()) {
      return r;
    }
    if (!args.empty() && is_nn_module(args[0]) &&
        starts_with(module_of(callable), "torch.nn.modules.")) {
      // nn.LayerNorm.forward(self, x) called on the class: inlined as a module's forward is
      // (run for real, it read the module's parameters as real tensors).
      return inline_function(callable, std::move(args), kwnames);
    }
    EMBER_UNSUPPORTED(runs_for_real(callable))
        << "calling " << module_of(callable) << "." << name_of(callable) << " at " << location();
    return call_real(callable, std::move(args), kwnames);
  }
  if (PyCFunction_Check(c)) {
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
      if (is_data_read(name)) {
        throw DataDependentError("calling " + name + " reads tensor data, at " + location());
      }
      EMBER_UNSUPPORTED(!is_denied_torch_function(name))
          << "calling " << name << " at " << location();
      if ((leaf == "addcdiv_" || leaf == "addcmul_" || leaf == "addcdiv" || leaf == "addcmul") &&
          args.size() == 3 && kwnames.is_valid() && PyTuple_GET_SIZE(kwnames.ptr()) == 1 &&
          PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames.ptr(), 0), "value") == 0 &&
          is_tensor(args[2])) {
        // A tensor `value` (an optimizer's step size, which _get_value keeps a tensor under
        // compilation) is read as a number by the argument parser: .item(), a data read. The
        // kernel computes self + (value * t1) / t2 (or * t2), so scaling t1 first is the same.
        nb::object scaled = checked(PyNumber_Multiply(args[0].ptr(), args[2].ptr()));
        return call_real(callable, {scaled, args[1]}, nb::handle());
      }
      return call_real(callable, std::move(args), kwnames);
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
    EMBER_UNSUPPORTED(runs_for_real(callable))
        << "calling " << module_of(callable) << "." << name << " at " << location();
    if ((leaf == "_foreach_addcdiv_" || leaf == "_foreach_addcmul_" || leaf == "_foreach_addcdiv" ||
         leaf == "_foreach_addcmul") &&
        args.size() == 4 && !kwnames.is_valid() && is_tensor(args[3])) {
      // Per-tensor scalars as a tensor (a foreach optimizer's step sizes, stacked under
      // compilation), which the meta kernel wants on the CPU: tensor1 scaled first instead,
      // self + (s_i * t1_i) / t2_i as the kernel computes it.
      static PyObject* unbind = imported("torch", "unbind");
      nb::object scalars = checked(PyObject_CallOneArg(unbind, args[3].ptr()));
      nb::object t1 = checked(PySequence_Fast(args[1].ptr(), "tensor1 must be a sequence"));
      Py_ssize_t n = PySequence_Fast_GET_SIZE(t1.ptr());
      EMBER_UNSUPPORTED(PyTuple_GET_SIZE(scalars.ptr()) == n)
          << "calling " << name << " with " << PyTuple_GET_SIZE(scalars.ptr()) << " scalars for "
          << n << " tensors at " << location();
      nb::object scaled = checked(PyList_New(n));
      for (Py_ssize_t i = 0; i < n; ++i) {
        PyList_SET_ITEM(scaled.ptr(), i,
                        checked(PyNumber_Multiply(PySequence_Fast_GET_ITEM(t1.ptr(), i),
                                                  PyTuple_GET_ITEM(scalars.ptr(), i)))
                            .release()
                            .ptr());
      }
      return call_real(callable, {args[0], scaled, args[2]}, nb::handle());
    }
    if ((leaf == "tensor" || leaf == "as_tensor") && !args.empty() &&
        is_number_data(args[0].ptr())) {
      // Its data is written in the program: the tensor it makes is a constant of the graph.
      session_.set_strict_constants(false);
      nb::object r;
      try {
        r = call_real(callable, std::move(args), kwnames);
      } catch (...) {
        session_.set_strict_constants(true);
        throw;
      }
      session_.set_strict_constants(true);
      // torch.tensor makes a real tensor: it becomes a constant of the graph.
      if (is_tensor(r) && !is_tracer(r)) r = constant_tensor(r);
      return r;
    }
    return call_real(callable, std::move(args), kwnames);
  }
  if (PyType_Check(c)) {
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
            << "calling " << name_of(callable) << " on a " << type_name_of(a) << " at "
            << location();
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
  std::string tname = type_name_of(callable);
  if (tname == "ScriptFunction") {
    // A torch.jit.script function keeps its Python original in _torchdynamo_inline, which is
    // inlined as torch.compile does (DeBERTa's position buckets and expands are scripted).
    nb::object original = nb::steal(PyObject_GetAttrString(c, "_torchdynamo_inline"));
    if (!original.is_valid()) PyErr_Clear();
    EMBER_UNSUPPORTED(original.is_valid() && PyFunction_Check(original.ptr()))
        << "calling a ScriptFunction with no Python original (" << str_of(callable) << ") at "
        << location();
    keepalive_.push_back(original);
    return inline_function(original, std::move(args), kwnames);
  }
  if (tname == "functools._lru_cache_wrapper") {
    // lru_cache is for pure functions. Of values (transformers' is_*_available checks), the
    // call runs for real: its result is the cache's for those values, in eager too. Otherwise
    // the cache is left out and the wrapped function inlined, as Dynamo does.
    bool values = true;
    for (const nb::object& a : args) values = values && is_guardable_constant(a.ptr());
    if (values) {
      nb::object r = call_real(callable, args, kwnames);
      if (is_guardable_constant(r.ptr())) return r;
    }
    nb::object wrapped = lru_wrapped(callable);
    EMBER_UNSUPPORTED(wrapped.is_valid())
        << "calling " << str_of(callable) << ", whose wrapped function is not inlined, at "
        << location();
    return inline_function(wrapped, std::move(args), kwnames);
  }
  if (tname == "functools.partial") {
    nb::object fn = checked(PyObject_GetAttrString(c, "func"));
    nb::object pargs = checked(PyObject_GetAttrString(c, "args"));
    nb::object pkw = checked(PyObject_GetAttrString(c, "keywords"));
    // partial(fn, *pargs, **pkw)(*args, **kw) is fn(*pargs, *args, **{**pkw, **kw}).
    size_t nkw = kwnames.is_valid() ? static_cast<size_t>(PyTuple_GET_SIZE(kwnames.ptr())) : 0;
    std::vector<nb::object> all;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pargs.ptr()); ++i) {
      all.push_back(nb::borrow(PyTuple_GET_ITEM(pargs.ptr(), i)));
    }
    for (size_t i = 0; i < args.size() - nkw; ++i) all.push_back(args[i]);
    nb::object names = kwnames.is_valid() ? nb::borrow(kwnames) : nb::object();
    if (PyDict_GET_SIZE(pkw.ptr()) > 0) {
      nb::object merged = checked(PyDict_Copy(pkw.ptr()));
      for (size_t j = 0; j < nkw; ++j) {
        PyObject* key = PyTuple_GET_ITEM(kwnames.ptr(), static_cast<Py_ssize_t>(j));
        if (PyDict_SetItem(merged.ptr(), key, args[args.size() - nkw + j].ptr()) < 0) {
          throw nb::python_error();
        }
      }
      nb::object list = checked(PyList_New(0));
      PyObject* key = nullptr;
      PyObject* value = nullptr;
      Py_ssize_t pos = 0;
      while (PyDict_Next(merged.ptr(), &pos, &key, &value)) {
        if (PyList_Append(list.ptr(), key) < 0) throw nb::python_error();
        all.push_back(nb::borrow(value));
      }
      names = checked(PyList_AsTuple(list.ptr()));
    } else {
      for (size_t j = 0; j < nkw; ++j) all.push_back(args[args.size() - nkw + j]);
    }
    return call(fn, std::move(all), names);
  }
  if (tname == "method_descriptor" || tname == "wrapper_descriptor" || tname == "method-wrapper" ||
      tname == "builtin_function_or_method" || starts_with(tname, "torch._ops.") ||
      tname == "OpOverloadPacket" || tname == "OpOverload") {
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
      EMBER_UNSUPPORTED((tensor_method && !is_denied_torch_function(name_of(callable))) ||
                        immutable)
          << "calling " << owner_name << "." << name_of(callable) << " at " << location();
      return call_real(callable, std::move(args), kwnames);
    }
    EMBER_UNSUPPORTED(runs_for_real(callable) || starts_with(tname, "torch._ops."))
        << "calling " << name_of(callable) << " at " << location();
    return call_real(callable, std::move(args), kwnames);
  }
  if (tname == "numpy.ufunc" && !kwnames.is_valid()) {
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
  EMBER_UNSUPPORTED(false) << "calling a " << tname << " (" << str_of(callable) << ") at "
                           << location();
  return {};
}

nb::object Interpreter::lru_wrapped(nb::handle wrapper) {
  nb::object name = nb::steal(PyUnicode_FromString("__wrapped__"));
  nb::object wrapped = nb::steal(PyObject_GetAttr(wrapper.ptr(), name.ptr()));
  if (!wrapped.is_valid()) {
    PyErr_Clear();
    return {};
  }
  if (!PyFunction_Check(wrapped.ptr()) || !inlines(wrapped.ptr())) return {};
  int source = source_of(wrapper);
  if (source >= 0) return wrap(wrapped, sources_.attr(source, name.ptr()));
  keepalive_.push_back(wrapped);
  return wrapped;
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

nb::object Interpreter::module_dict_view(nb::object module, std::string_view what,
                                         const std::string& where) {
  int source = source_of(module);
  static PyObject* module_dict = imported("torch.nn", "ModuleDict");
  int is_dict = PyObject_IsInstance(module.ptr(), module_dict);
  if (is_dict < 0) throw nb::python_error();
  EMBER_UNSUPPORTED(source >= 0 && is_dict == 1)
      << "calling " << what << "() of a " << type_name_of(module) << " at " << where;
  guards_.add_len(source, module.ptr());
  nb::object keys = checked(PySequence_List(module.ptr()));  // ModuleDict iterates its keys
  nb::object out = fresh(checked(PyList_New(0)));
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.ptr()); ++i) {
    PyObject* key = PyList_GET_ITEM(keys.ptr(), i);
    EMBER_UNSUPPORTED(PyUnicode_CheckExact(key)) << "a ModuleDict key that is not a str";
    nb::object item = checked(PyObject_GetItem(module.ptr(), key));
    nb::object value = wrap(item, sources_.item(source, key));
    nb::object entry;
    if (what == "keys") {
      entry = nb::borrow(key);
    } else if (what == "values") {
      entry = value;
    } else {
      entry = checked(PyTuple_Pack(2, key, value.ptr()));
    }
    if (PyList_Append(out.ptr(), entry.ptr()) < 0) throw nb::python_error();
  }
  return out;
}

nb::object Interpreter::call_real(nb::handle callable, std::vector<nb::object> args,
                                  nb::handle kwnames, bool pin) {
  if (pin && !identity_free_.empty()) {
    // Code that runs for real reads what it is given without guards: objects guarded by type
    // are guarded by identity from here on.
    pin_identities(args);
    PyObject* c = callable.ptr();
    if (PyMethod_Check(c)) pin_identity(PyMethod_GET_SELF(c));
    if (PyCFunction_Check(c) && PyCFunction_GET_SELF(c) != nullptr) {
      pin_identity(PyCFunction_GET_SELF(c));
    }
  }
  size_t nkw = kwnames.is_valid() ? static_cast<size_t>(PyTuple_GET_SIZE(kwnames.ptr())) : 0;
  std::vector<PyObject*> raw(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    EMBER_UNSUPPORTED(args[i].is_valid()) << "a NULL argument at " << location();
    raw[i] = args[i].ptr();
  }
  nb::object r = checked(PyObject_Vectorcall(callable.ptr(), raw.data(), args.size() - nkw,
                                             nkw > 0 ? kwnames.ptr() : nullptr));
  // A container nobody else holds was made by this call: the frame owns it.
  if ((PyList_CheckExact(r.ptr()) || PyDict_CheckExact(r.ptr()) || PySet_CheckExact(r.ptr())) &&
      Py_REFCNT(r.ptr()) == 1) {
    fresh(r);
  }
  if (PyIter_Check(r.ptr()) && !is_tensor(r)) fresh(r);
  return r;
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

nb::object Interpreter::call_module(nb::handle module, std::vector<nb::object> args,
                                    nb::handle kwnames, bool plain_call) {
  static const char* const kHooks[] = {"_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                       "_backward_pre_hooks"};
  for (const char* h : kHooks) {
    PyObject* d = PyObject_GetAttrString(module.ptr(), h);
    if (d == nullptr) {
      PyErr_Clear();
      continue;
    }
    nb::object hooks = nb::steal(d);
    EMBER_UNSUPPORTED(PyObject_Length(d) == 0)
        << "a module with " << h << " (" << type_name_of(module) << ") at " << location();
  }
  static PyObject* global_hooks = [] {
    nb::object m = checked(PyImport_ImportModule("torch.nn.modules.module"));
    nb::object list = checked(PyList_New(0));
    for (const char* n : {"_global_forward_hooks", "_global_forward_pre_hooks",
                          "_global_backward_hooks", "_global_backward_pre_hooks"}) {
      PyObject* d = PyObject_GetAttrString(m.ptr(), n);
      if (d == nullptr) {
        PyErr_Clear();
        continue;
      }
      PyList_Append(list.ptr(), d);
      Py_DECREF(d);
    }
    return list.release().ptr();
  }();
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(global_hooks); ++i) {
    EMBER_UNSUPPORTED(PyObject_Length(PyList_GET_ITEM(global_hooks, i)) == 0)
        << "global nn.Module hooks are registered";
  }
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(module.ptr()));
  static PyObject* module_call = [] {
    nb::object m = checked(PyImport_ImportModule("torch.nn"));
    nb::object cls = checked(PyObject_GetAttrString(m.ptr(), "Module"));
    return checked(PyObject_GetAttrString(cls.ptr(), "__call__")).release().ptr();
  }();
  nb::object call_attr = checked(PyObject_GetAttrString(type, "__call__"));
  if (call_attr.ptr() != module_call && !plain_call) {
    // A __call__ of the program's (one that ends in super().__call__): inlined.
    EMBER_UNSUPPORTED(
        PyFunction_Check(call_attr.ptr()) &&
        !is_library_code(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(call_attr.ptr()))))
        << type_name_of(module) << " overrides __call__ at " << location();
    give_closure_source(call_attr.ptr());
    args.insert(args.begin(), nb::borrow(module));
    return inline_function(call_attr, std::move(args), kwnames);
  }
  PyObject* dict = PyObject_GenericGetDict(module.ptr(), nullptr);
  if (dict != nullptr) {
    nb::object d = nb::steal(dict);
    if (PyDict_GetItemString(dict, "forward") != nullptr) {
      // `self.forward = self.forward_slicing` (timm's FasterNet): the instance's own forward,
      // read (and guarded) as an attribute, is what nn.Module.__call__ calls.
      int source = source_of(module);
      EMBER_UNSUPPORTED(source >= 0)
          << type_name_of(module) << " has an instance attribute 'forward' at " << location();
      nb::object forward = load_attr(module, nb::str("forward").ptr());
      return call(forward, std::move(args), kwnames);
    }
  } else {
    PyErr_Clear();
  }
  nb::object forward = checked(PyObject_GetAttrString(type, "forward"));
  EMBER_UNSUPPORTED(PyFunction_Check(forward.ptr()))
      << type_name_of(module) << ".forward is a " << type_name_of(forward) << " at " << location();
  int source = source_of(module);
  if (source >= 0 && PyFunction_GET_CLOSURE(forward.ptr()) != nullptr) {
    nb::object cls_name = nb::steal(PyUnicode_FromString("__class__"));
    nb::object fwd_name = nb::steal(PyUnicode_FromString("forward"));
    forward = wrap(forward, sources_.attr(sources_.attr(source, cls_name.ptr()), fwd_name.ptr()));
  }
  args.insert(args.begin(), nb::borrow(module));
  return inline_function(forward, std::move(args), kwnames);
}

nb::object Interpreter::inline_function(nb::handle fn, std::vector<nb::object> args,
                                        nb::handle kwnames) {
  EMBER_UNSUPPORTED(static_cast<int>(frames_.size()) < options_.max_inline_depth)
      << "calls nested deeper than " << options_.max_inline_depth << " at " << location();
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn.ptr()));
  EMBER_UNSUPPORTED((co->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR)) == 0)
      << "calling coroutine " << name_of(fn) << " at " << location();
  // A generator (a generator expression, mostly) runs to completion here, and the call returns
  // an iterator over what it yielded. Its body can have no side effect capture would miss (the
  // store rules hold inside it), so running it ahead of its consumer gives the same values.
  const bool generator = (co->co_flags & CO_GENERATOR) != 0;
  ++inlined_calls_;
  Frame fr;
  if (direct_caller_ != nullptr) {
    // The function a CALL calls (itself, a method's function, a module's forward or __call__)
    // returns the call's result; a class's __init__ or a builtin's callback does not.
    PyObject* c = direct_callable_;
    fr.passthrough = !generator && !frames_.empty() && direct_caller_ == frames_.back() &&
                     (c == fn.ptr() || is_nn_module(c) ||
                      (PyMethod_Check(c) && (PyMethod_GET_FUNCTION(c) == fn.ptr() ||
                                             is_nn_module(PyMethod_GET_SELF(c)))));
    direct_caller_ = nullptr;
    direct_callable_ = nullptr;
  }
  fr.code_obj = nb::borrow(reinterpret_cast<PyObject*>(co));
  fr.code = co;
  fr.bc = decoded(co);
  fr.globals = nb::borrow(PyFunction_GET_GLOBALS(fn.ptr()));
  fr.builtins = nb::borrow(builtins_dict_of(fr.globals.ptr()));
  PyObject* closure = PyFunction_GET_CLOSURE(fn.ptr());
  fr.closure = closure != nullptr ? nb::borrow(closure) : nb::none();
  fr.function_source = source_of(fn);
  fr.locals.resize(static_cast<size_t>(co->co_nlocalsplus));

  // Bind the arguments as CPython does (positional, keywords, defaults, *args, **kwargs).
  size_t nkw = kwnames.is_valid() ? static_cast<size_t>(PyTuple_GET_SIZE(kwnames.ptr())) : 0;
  size_t npos = args.size() - nkw;
  int argcount = co->co_argcount;
  int kwonly = co->co_kwonlyargcount;
  bool varargs = (co->co_flags & CO_VARARGS) != 0;
  bool varkw = (co->co_flags & CO_VARKEYWORDS) != 0;
  auto fail = [&](const char* what) {
    PyErr_Format(PyExc_TypeError, "%U() %s", co->co_qualname, what);
    throw nb::python_error();
  };
  for (size_t i = 0; i < npos && i < static_cast<size_t>(argcount); ++i) fr.locals[i] = args[i];
  if (varargs) {
    size_t extra = npos > static_cast<size_t>(argcount) ? npos - argcount : 0;
    nb::object t = checked(PyTuple_New(static_cast<Py_ssize_t>(extra)));
    for (size_t i = 0; i < extra; ++i) {
      PyTuple_SET_ITEM(t.ptr(), static_cast<Py_ssize_t>(i), args[argcount + i].inc_ref().ptr());
    }
    fr.locals[static_cast<size_t>(argcount + kwonly)] = t;
  } else if (npos > static_cast<size_t>(argcount)) {
    fail("got too many positional arguments");
  }
  nb::object kwdict;
  if (varkw) {
    kwdict = fresh(checked(PyDict_New()));
    fr.locals[static_cast<size_t>(argcount + kwonly + (varargs ? 1 : 0))] = kwdict;
  }
  for (size_t j = 0; j < nkw; ++j) {
    PyObject* name = PyTuple_GET_ITEM(kwnames.ptr(), static_cast<Py_ssize_t>(j));
    int slot = -1;
    for (int i = co->co_posonlyargcount; i < argcount + kwonly; ++i) {
      if (PyUnicode_Compare(local_name(co, i), name) == 0) {
        slot = i;
        break;
      }
    }
    if (slot >= 0) {
      if (fr.locals[static_cast<size_t>(slot)].is_valid())
        fail("got multiple values for an argument");
      fr.locals[static_cast<size_t>(slot)] = args[npos + j];
    } else if (varkw) {
      if (PyDict_SetItem(kwdict.ptr(), name, args[npos + j].ptr()) < 0) throw nb::python_error();
    } else {
      fail("got an unexpected keyword argument");
    }
  }
  PyObject* defaults = PyFunction_GET_DEFAULTS(fn.ptr());
  int ndefaults = defaults != nullptr ? static_cast<int>(PyTuple_GET_SIZE(defaults)) : 0;
  for (int i = 0; i < argcount; ++i) {
    if (fr.locals[static_cast<size_t>(i)].is_valid()) continue;
    int d = i - (argcount - ndefaults);
    if (d < 0) fail("missing a required argument");
    fr.locals[static_cast<size_t>(i)] = nb::borrow(PyTuple_GET_ITEM(defaults, d));
  }
  PyObject* kwdefaults = PyFunction_GET_KW_DEFAULTS(fn.ptr());
  for (int i = argcount; i < argcount + kwonly; ++i) {
    if (fr.locals[static_cast<size_t>(i)].is_valid()) continue;
    PyObject* v = kwdefaults != nullptr ? PyDict_GetItem(kwdefaults, local_name(co, i)) : nullptr;
    if (v == nullptr) fail("missing a required keyword-only argument");
    fr.locals[static_cast<size_t>(i)] = nb::borrow(v);
  }
  if (!generator) return run_frame(fr);
  std::vector<nb::object> yields;
  fr.yields = &yields;
  run_frame(fr);
  nb::object list = checked(PyList_New(static_cast<Py_ssize_t>(yields.size())));
  for (size_t i = 0; i < yields.size(); ++i) {
    PyList_SET_ITEM(list.ptr(), static_cast<Py_ssize_t>(i), yields[i].release().ptr());
  }
  keepalive_.push_back(list);
  return fresh(checked(PyObject_GetIter(list.ptr())));
}

}  // namespace ember::capture
