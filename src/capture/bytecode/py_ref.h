/// \file
/// A minimal owning reference to a PyObject for the bytecode layer's C++ code (no nanobind, so
/// that the core library does not depend on the binding library).
#pragma once

#include <Python.h>

#include <string>
#include <utility>

namespace ember::capture::bytecode {

/// Owns one strong reference (or none); releases it when destroyed.
class PyRef {
 public:
  PyRef() = default;
  /// Takes ownership of a new reference (may be null).
  explicit PyRef(PyObject* p) : p_(p) {}
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
  PyRef(PyRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  PyRef& operator=(PyRef&& o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  ~PyRef() { Py_XDECREF(p_); }

  /// A new strong reference to a borrowed one.
  static PyRef borrow(PyObject* p) {
    Py_XINCREF(p);
    return PyRef(p);
  }
  PyObject* get() const { return p_; }
  /// Gives up ownership.
  PyObject* release() { return std::exchange(p_, nullptr); }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  PyObject* p_ = nullptr;
};

/// The pending Python exception as text ("TypeError: ..."), clearing it; "" if none.
std::string fetch_python_error();

}  // namespace ember::capture::bytecode
