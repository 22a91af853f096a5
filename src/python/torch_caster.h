/// \file
/// nanobind type caster for at::Tensor <-> torch.Tensor, through libtorch_python.
#pragma once

#include <nanobind/nanobind.h>
#include <torch/csrc/autograd/python_variable.h>

#include <vector>

#include "support/error.h"

namespace nanobind::detail {

template <>
struct type_caster<at::Tensor> {
  NB_TYPE_CASTER(at::Tensor, const_name("torch.Tensor"))

  bool from_python(handle src, uint8_t, cleanup_list*) noexcept {
    if (!THPVariable_Check(src.ptr())) return false;
    value = THPVariable_Unpack(src.ptr());
    return true;
  }

  static handle from_cpp(const at::Tensor& t, rv_policy, cleanup_list*) noexcept {
    return THPVariable_Wrap(t);
  }
};

}  // namespace nanobind::detail

namespace ember::python {

/// The tensors a compiled callable was called with (a UserError names an argument that is not a
/// tensor).
inline std::vector<at::Tensor> tensor_args(const nanobind::args& args) {
  std::vector<at::Tensor> inputs;
  inputs.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    PyObject* a = args[i].ptr();
    EMBER_CHECK(THPVariable_Check(a))
        << "argument " << i << " is a " << Py_TYPE(a)->tp_name << ", not a tensor";
    inputs.push_back(THPVariable_Unpack(a));
  }
  return inputs;
}

/// A Python tuple of `tensors`.
inline nanobind::object tensor_tuple(const std::vector<at::Tensor>& tensors) {
  nanobind::object result = nanobind::steal(PyTuple_New(static_cast<Py_ssize_t>(tensors.size())));
  for (size_t i = 0; i < tensors.size(); ++i) {
    PyTuple_SET_ITEM(result.ptr(), static_cast<Py_ssize_t>(i), THPVariable_Wrap(tensors[i]));
  }
  return result;
}

}  // namespace ember::python
