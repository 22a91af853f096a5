/// \file
/// Calls of tensor methods and torch's C functions (call_builtin.cpp's call_c_function hands
/// them here): run for real on tracer tensors, so that the trace records them into the graph.
/// Reads of tensor data are data-dependent breaks; torch functions that change global state
/// (is_denied_torch_function) are refused; a few calls whose arguments the meta kernels cannot
/// take as given are rewritten to equal ones; torch.tensor of literal data is a constant.
#include <string>
#include <string_view>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

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

}  // namespace

nb::object Interpreter::call_tensor_method(nb::handle callable, std::vector<nb::object> args,
                                           nb::handle kwnames, const std::string& name) {
  std::string_view leaf = std::string_view(name).substr(name.rfind('.') + 1);
  if (is_data_read(name)) {
    throw DataDependentError("calling " + name + " reads tensor data, at " + location());
  }
  // The tensor of a bound method (`t.requires_grad_()`), or the first argument.
  nb::handle self = args.empty() && PyCFunction_Check(callable.ptr())
                        ? nb::handle(PyCFunction_GET_SELF(callable.ptr()))
                        : (args.empty() ? nb::handle() : nb::handle(args[0]));
  if (leaf == "requires_grad_" && self.is_valid() && is_tensor(self) && source_of(self) < 0 &&
      input_source_of(self) < 0 && !at::GradMode::is_enabled()) {
    // A tensor the program made, under no_grad (`torch.zeros_like(q).requires_grad_()`): only
    // its own flag changes (no later op records autograd), so it runs on the tracer tensor, for
    // the program's reads of `.requires_grad`. The executor's outputs do not carry the flag:
    // finish refuses a graph that returns such a tensor.
    return call_real(callable, std::move(args), kwnames);
  }
  EMBER_UNSUPPORTED(!is_denied_torch_function(name)) << "calling " << name << " at " << location();
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

nb::object Interpreter::call_torch_function(nb::handle callable, std::vector<nb::object> args,
                                            nb::handle kwnames, const std::string& name) {
  std::string_view leaf = std::string_view(name).substr(name.rfind('.') + 1);
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
        << "calling " << name << " with " << PyTuple_GET_SIZE(scalars.ptr()) << " scalars for " << n
        << " tensors at " << location();
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
  if ((leaf == "tensor" || leaf == "as_tensor") && !args.empty() && is_number_data(args[0].ptr())) {
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

}  // namespace ember::capture
