/// \file
/// Calls of wrappers of Python functions (call_policy.cpp): a torch.jit.script function (its
/// Python original inlined), a functools.lru_cache wrapper (run for real on values, else the
/// wrapped function inlined) and a functools.partial (its function called with the arguments
/// merged).
#include <string>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

nb::object Interpreter::call_script_function(nb::handle callable, std::vector<nb::object> args,
                                             nb::handle kwnames) {
  PyObject* c = callable.ptr();
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

nb::object Interpreter::call_lru_cache_wrapper(nb::handle callable, std::vector<nb::object> args,
                                               nb::handle kwnames) {
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

nb::object Interpreter::call_partial(nb::handle callable, std::vector<nb::object> args,
                                     nb::handle kwnames) {
  PyObject* c = callable.ptr();
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

}  // namespace ember::capture
