/// \file
/// The one place where C++ errors become Python exceptions. The Python classes live in
/// ember/errors.py; they are looked up at import, so `except ember.errors.Unsupported` catches
/// errors raised in C++.
#include <c10/util/Exception.h>

#include "python/bindings.h"
#include "support/error.h"

namespace nb = nanobind;

namespace ember::python {

void bind_errors(nb::module_& m) {
  nb::module_ errors = nb::module_::import_("ember.errors");
  // Owned by the module for the life of the interpreter.
  static nb::object compile_error = errors.attr("CompileError");
  static nb::object unsupported = errors.attr("Unsupported");
  static nb::object data_dependent = errors.attr("DataDependentError");
  static nb::object internal = errors.attr("InternalError");
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const DataDependentError& e) {
      PyErr_SetString(data_dependent.ptr(), e.what());
    } catch (const Unsupported& e) {
      PyErr_SetString(unsupported.ptr(), e.what());
    } catch (const UserError& e) {
      PyErr_SetString(compile_error.ptr(), e.what());
    } catch (const InternalError& e) {
      PyErr_SetString(internal.ptr(), e.what());
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
    }
  });
}

}  // namespace ember::python
