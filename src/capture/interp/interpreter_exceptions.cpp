/// \file
/// The interpreter's exception handling and with blocks: the exception table (an exception the
/// program raises inside a try block jumps to its handler, as in CPython), raise, the except
/// clause's opcodes, and the entry and exceptional exit of `with` (their handlers: op_table.cpp).
///
/// An exception is a program exception when ember did not cause it: no ember error is pending
/// in the trace session and it is not PyTorch's error for reading a traced tensor's data. Only
/// program exceptions reach handlers; ember's own errors end the capture as before.
#include <ATen/core/grad_mode.h>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;

namespace {

/// Sets `exc` (an exception instance) as the raised exception and throws it.
[[noreturn]] void raise_instance(nb::handle exc) {
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw nb::python_error();
}

std::string attr_string(nb::handle o, const char* name) {
  PyObject* v = PyObject_GetAttrString(o.ptr(), name);
  if (v == nullptr) {
    PyErr_Clear();
    return {};
  }
  nb::object s = nb::steal(v);
  return PyUnicode_Check(v) ? std::string(PyUnicode_AsUTF8(v)) : std::string();
}

}  // namespace

bool Interpreter::is_program_exception(nb::python_error& e) const {
  if (session_.has_pending_error()) return false;
  if (e.matches(PyExc_RuntimeError) || e.matches(PyExc_NotImplementedError)) {
    return !reads_tensor_data(e.what());
  }
  return true;
}

void Interpreter::catch_exception(Frame& fr, const Instr& in, nb::python_error& e) {
  const bytecode::Handler& h = fr.bc->handlers[static_cast<size_t>(in.handler)];
  EMBER_INTERNAL_ASSERT(fr.stack.size() >= static_cast<size_t>(h.depth))
      << "exception handler deeper than the stack at " << location();
  fr.stack.resize(static_cast<size_t>(h.depth));
  if (h.lasti) fr.stack.push_back(checked(PyLong_FromLong(std::max(in.offset, 0))));
  fr.stack.push_back(nb::borrow(e.value()));
  fr.pc = static_cast<size_t>(h.target);
}

nb::object Interpreter::exception_instance(nb::object exc) {
  if (PyExceptionClass_Check(exc.ptr())) exc = call(exc, {}, nb::handle());
  if (!PyExceptionInstance_Check(exc.ptr())) {
    PyErr_SetString(PyExc_TypeError, "exceptions must derive from BaseException");
    throw nb::python_error();
  }
  return exc;
}

bool Interpreter::enters_for_real(nb::handle mgr) const {
  nb::handle type = reinterpret_cast<PyObject*>(Py_TYPE(mgr.ptr()));
  std::string module = attr_string(type, "__module__");
  std::string name = attr_string(type, "__qualname__");
  if (module == "torch.autograd.grad_mode") {
    return name == "no_grad" || name == "enable_grad" || name == "set_grad_enabled";
  }
  if (module == "contextlib") return name == "nullcontext";
  // torch.autocast (and its torch.cpu.amp / torch.cuda.amp subclasses): ops traced inside see
  // its casts, as in eager (the tracer's tensors carry the autocast key of their device).
  static PyObject* autocast = imported("torch.amp.autocast_mode", "autocast");
  if (PyObject_IsInstance(mgr.ptr(), autocast) == 1) return true;
  // `with torch.device(...)`: its __enter__ pushes torch's DeviceContext mode.
  static PyObject* device = imported("torch", "device");
  if (PyObject_TypeCheck(mgr.ptr(), reinterpret_cast<PyTypeObject*>(device))) return true;
  return is_torch_function_mode_of_torch(mgr);
}

bool Interpreter::is_torch_function_mode_of_torch(nb::handle mgr) const {
  // Note [torch's own torch-function modes]: a TorchFunctionMode that torch defines
  // (TransformGetItemToIndex, which transformers' vmapped masks run under; DeviceContext, the
  // mode of `with torch.device(...)`) is entered for real, as torch's Python functions run for
  // real: the calls the interpreter makes for real inside the block go through its
  // __torch_function__, and the graph records the ATen ops that come out, so a replay needs no
  // mode. A mode of the program's own (its __torch_function__ may count, log or keep state) is
  // not: the with block is unsupported. No graph break is taken inside a with block, and run()
  // pops what an interrupted capture left on the mode stack.
  static PyObject* mode = imported("torch.overrides", "TorchFunctionMode");
  if (mode == nullptr || PyObject_IsInstance(mgr.ptr(), mode) != 1) return false;
  nb::handle type = reinterpret_cast<PyObject*>(Py_TYPE(mgr.ptr()));
  std::string module = attr_string(type, "__module__");
  if (!starts_with(module, "torch.")) return false;
  nb::object fn = nb::steal(PyObject_GetAttrString(type.ptr(), "__torch_function__"));
  if (!fn.is_valid()) {
    PyErr_Clear();
    return false;
  }
  if (PyMethod_Check(fn.ptr())) fn = nb::borrow(PyMethod_GET_FUNCTION(fn.ptr()));
  return PyFunction_Check(fn.ptr()) && starts_with(module_of(fn), "torch.");
}

bool Interpreter::is_inference_mode(nb::handle mgr) const {
  nb::handle type = reinterpret_cast<PyObject*>(Py_TYPE(mgr.ptr()));
  return attr_string(type, "__module__") == "torch.autograd.grad_mode" &&
         attr_string(type, "__qualname__") == "inference_mode";
}

void Interpreter::op_PUSH_EXC_INFO(Frame& fr, const Instr&, StepResult&) {
  nb::object exc = pop(fr);
  fr.stack.push_back(handled_exc_.is_valid() ? handled_exc_ : nb::none());
  handled_exc_ = exc;
  fr.stack.push_back(std::move(exc));
}

void Interpreter::op_POP_EXCEPT(Frame& fr, const Instr&, StepResult&) {
  nb::object exc = pop(fr);
  handled_exc_ = exc.is_none() ? nb::object() : exc;
}

void Interpreter::op_CHECK_EXC_MATCH(Frame& fr, const Instr&, StepResult&) {
  nb::object type = pop(fr);
  if (PyTuple_Check(type.ptr())) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(type.ptr()); ++i) {
      EMBER_UNSUPPORTED(PyExceptionClass_Check(PyTuple_GET_ITEM(type.ptr(), i)))
          << "except with a tuple of non-exception types at " << location();
    }
  } else {
    EMBER_UNSUPPORTED(PyExceptionClass_Check(type.ptr()))
        << "except with a " << type_name_of(type) << " at " << location();
  }
  bool match = PyErr_GivenExceptionMatches(peek(fr).ptr(), type.ptr()) != 0;
  fr.stack.push_back(nb::borrow(match ? Py_True : Py_False));
}

void Interpreter::op_RERAISE(Frame& fr, const Instr&, StepResult&) {
  nb::object exc = pop(fr);
  raise_instance(exc);
}

void Interpreter::op_RAISE_VARARGS(Frame& fr, const Instr& in, StepResult&) {
  if (in.arg == 0) {
    if (!handled_exc_.is_valid()) {
      PyErr_SetString(PyExc_RuntimeError, "No active exception to reraise");
      throw nb::python_error();
    }
    raise_instance(handled_exc_);
  }
  nb::object cause = in.arg == 2 ? pop(fr) : nb::object();
  nb::object exc = exception_instance(pop(fr));
  if (cause.is_valid()) {
    if (!cause.is_none()) cause = exception_instance(cause);
    PyException_SetCause(exc.ptr(), cause.is_none() ? nullptr : cause.inc_ref().ptr());
    if (cause.is_none()) reinterpret_cast<PyBaseExceptionObject*>(exc.ptr())->suppress_context = 1;
  }
  raise_instance(exc);
}

void Interpreter::op_LOAD_ASSERTION_ERROR(Frame& fr, const Instr&, StepResult&) {
  fr.stack.push_back(nb::borrow(PyExc_AssertionError));
}

void Interpreter::op_BEFORE_WITH(Frame& fr, const Instr&, StepResult&) {
  // [mgr] -> [bound __exit__, mgr.__enter__()]. Grad-mode managers and nullcontext run for
  // real (the interpreter restores grad mode when it stops); a manager whose __enter__ is
  // program code is inlined like any method.
  auto& st = fr.stack;
  nb::object mgr = pop(fr);
  static PyObject* record_function = imported("torch.autograd.profiler", "record_function");
  if (PyObject_TypeCheck(mgr.ptr(), reinterpret_cast<PyTypeObject*>(record_function))) {
    // A profiler range (an optimizer's step is one): nothing to record in a graph. Entered as
    // a nullcontext, whose __exit__ runs for real.
    static PyObject* nullcontext = imported("contextlib", "nullcontext");
    nb::object null = checked(PyObject_CallNoArgs(nullcontext));
    st.push_back(checked(PyObject_GetAttrString(null.ptr(), "__exit__")));
    st.push_back(nb::none());
    return;
  }
  if (is_inference_mode(mgr)) {
    // inference_mode(True) is entered as no_grad: the same values; the graph's outputs are
    // ordinary tensors (not inference tensors).
    nb::object mode = checked(PyObject_GetAttrString(mgr.ptr(), "mode"));
    EMBER_UNSUPPORTED(mode.ptr() == Py_True)
        << "a with block over inference_mode(False) at " << location();
    static PyObject* no_grad = imported("torch", "no_grad");
    mgr = checked(PyObject_CallNoArgs(no_grad));
  }
  bool real = enters_for_real(mgr);
  nb::object enter = checked(PyObject_GetAttrString(mgr.ptr(), "__enter__"));
  nb::object exit = checked(PyObject_GetAttrString(mgr.ptr(), "__exit__"));
  if (!real) {
    PyObject* fn = PyMethod_Check(enter.ptr()) ? PyMethod_GET_FUNCTION(enter.ptr()) : nullptr;
    EMBER_UNSUPPORTED(fn != nullptr && PyFunction_Check(fn) &&
                      !is_library_code(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn))))
        << "a with block over a " << type_name_of(mgr) << " at " << location();
  }
  nb::object result = real ? checked(PyObject_CallNoArgs(enter.ptr())) : call(enter, {}, {});
  EMBER_UNSUPPORTED(!(grad_inputs_ && at::GradMode::is_enabled()))
      << "a with block that enables grad mode with inputs that require grad at " << location();
  st.push_back(std::move(exit));
  st.push_back(std::move(result));
}

void Interpreter::op_WITH_EXCEPT_START(Frame& fr, const Instr&, StepResult&) {
  // [exit, lasti, prev_exc, exc] -> [..., exit(type(exc), exc, tb)]
  nb::object exc = peek(fr, 1);
  nb::object exit = peek(fr, 4);
  nb::object type = nb::borrow(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())));
  nb::object tb = nb::steal(PyException_GetTraceback(exc.ptr()));
  if (!tb.is_valid()) tb = nb::none();
  fr.stack.push_back(call(exit, {type, exc, tb}, {}));
}

}  // namespace ember::capture
