/// \file
/// Calls of Python functions and bound methods (call_policy.cpp): the program's functions,
/// torch.optim's code and nn.Module methods are inlined (inline_function: the arguments bound as
/// CPython binds them, a new Frame interpreted); library functions run for real where
/// runs_for_real allows; Dynamo-disabled, torch.compile'd and lru_cache'd wrappers are seen
/// through.
#include <string>
#include <string_view>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

namespace {

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

nb::object Interpreter::call_method(nb::handle callable, std::vector<nb::object> args,
                                    nb::handle kwnames) {
  PyObject* c = callable.ptr();
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
  if (is_function_ctx_recorder(nb::handle(self), nb::handle(fn))) {
    // Note [A Function's ctx]: its stores are replayed on each call's ctx.
    args.insert(args.begin(), nb::borrow(self));
    return inline_function(nb::borrow(fn), std::move(args), kwnames);
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

nb::object Interpreter::call_function(nb::handle callable, std::vector<nb::object> args,
                                      nb::handle kwnames) {
  PyObject* c = callable.ptr();
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
  nb::object disabled = nb::steal(PyObject_GetAttrString(c, "_torchdynamo_disable"));
  if (!disabled.is_valid()) PyErr_Clear();
  EMBER_UNSUPPORTED(!(disabled.is_valid() && PyObject_IsTrue(disabled.ptr()) == 1))
      << "calling " << module_of(callable) << "." << name_of(callable)
      << " (torch.compiler.disable'd: it runs uncompiled) at " << location();
  EMBER_UNSUPPORTED(runs_for_real(callable))
      << "calling " << module_of(callable) << "." << name_of(callable) << " at " << location();
  return call_real(callable, std::move(args), kwnames);
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
