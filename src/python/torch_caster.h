/// \file
/// nanobind type caster for at::Tensor <-> torch.Tensor, through libtorch_python.
#pragma once

#include <nanobind/nanobind.h>
#include <torch/csrc/autograd/python_variable.h>

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
