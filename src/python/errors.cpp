/// \file
/// The one place where C++ errors become Python exceptions. The Python classes live in
/// ember/errors.py; they are looked up at import, so `except ember.errors.Unsupported` catches
/// errors raised in C++.
#include <c10/util/Exception.h>

#include "python/bindings.h"
#include "support/error.h"

namespace nb = nanobind;

namespace ember::python {

namespace {

// Strong references for the life of the process (never released: no decref after finalization).
PyObject* compile_error = nullptr;
PyObject* unsupported = nullptr;
PyObject* data_dependent = nullptr;
PyObject* internal = nullptr;

}  // namespace

void set_python_error(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const DataDependentError& e) {
    PyErr_SetString(data_dependent, e.what());
  } catch (const Unsupported& e) {
    PyErr_SetString(unsupported, e.what());
  } catch (const UserError& e) {
    PyErr_SetString(compile_error, e.what());
  } catch (const InternalError& e) {
    PyErr_SetString(internal, e.what());
  } catch (const c10::NotImplementedError& e) {
    PyErr_SetString(PyExc_NotImplementedError, e.what_without_backtrace());
  } catch (const c10::IndexError& e) {  // as torch translates them (an ATen call's error)
    PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
  } catch (const c10::ValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

void bind_errors(nb::module_& m) {
  nb::module_ errors = nb::module_::import_("ember.errors");
  // Owned by the module for the life of the interpreter (never released).
  compile_error = nb::object(errors.attr("CompileError")).release().ptr();
  unsupported = nb::object(errors.attr("Unsupported")).release().ptr();
  data_dependent = nb::object(errors.attr("DataDependentError")).release().ptr();
  internal = nb::object(errors.attr("InternalError")).release().ptr();
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error&) {
      set_python_error(p);
    } catch (const c10::Error&) {
      set_python_error(p);
    }
  });
}

}  // namespace ember::python
