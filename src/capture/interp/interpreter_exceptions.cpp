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

/// Note [Graph breaks inside with blocks]
/// A graph break inside `with torch.no_grad():` (or enable_grad, set_grad_enabled, autocast,
/// nullcontext, inference_mode, a profiler range) keeps the graph before it, as under Dynamo. The
/// segment's graph runs under the caller's modes (what it recorded inside the block carries the
/// block's modes); then the break's code enters a new manager of the same state (made by the
/// factory recorded here for the `__exit__` that BEFORE_WITH pushed), so the unsupported
/// instruction runs inside the block, with an exception handler that exits it as CPython's would;
/// then it exits the block and calls the resume function, whose first instructions enter a new
/// manager again and jump into the copy of the block's body. The resume function is captured like
/// any frame: its with block is one the interpreter enters and exits itself. Blocks around the
/// break must all be such with blocks (no try block, no manager of the program's own: its
/// __enter__ may do anything), in the top frame; graph_break.cpp builds the code.
void Interpreter::op_BEFORE_WITH(Frame& fr, const Instr&, StepResult&) {
  // [mgr] -> [bound __exit__, mgr.__enter__()]. Grad-mode managers and nullcontext run for
  // real (the interpreter restores grad mode when it stops); a manager whose __enter__ is
  // program code is inlined like any method.
  auto& st = fr.stack;
  nb::object mgr = pop(fr);
  static PyObject* nullcontext = imported("contextlib", "nullcontext");
  static PyObject* no_grad = imported("torch", "no_grad");
  static PyObject* record_function = imported("torch.autograd.profiler", "record_function");
  if (PyObject_TypeCheck(mgr.ptr(), reinterpret_cast<PyTypeObject*>(record_function))) {
    // A profiler range (an optimizer's step is one): nothing to record in a graph. Entered as
    // a nullcontext, whose __exit__ runs for real.
    nb::object null = checked(PyObject_CallNoArgs(nullcontext));
    nb::object exit = checked(PyObject_GetAttrString(null.ptr(), "__exit__"));
    reentries_[exit.ptr()] = Reentry{exit, nb::borrow(nullcontext), -1};
    st.push_back(std::move(exit));
    st.push_back(nb::none());
    return;
  }
  if (is_inference_mode(mgr)) {
    // inference_mode(True) is entered as no_grad: the same values; the graph's outputs are
    // ordinary tensors (not inference tensors).
    nb::object mode = checked(PyObject_GetAttrString(mgr.ptr(), "mode"));
    EMBER_UNSUPPORTED(mode.ptr() == Py_True)
        << "a with block over inference_mode(False) at " << location();
    mgr = checked(PyObject_CallNoArgs(no_grad));
  }
  bool real = enters_for_real(mgr);
  // A manager from outside the frame (an argument, an attribute) entered for real: what the
  // graph records depends on its state (autocast's dtype, whether it is enabled), which
  // __enter__ reads without guards, and a break inside it bakes that state into the code that
  // enters it again. Guarded by identity, as the call of its __exit__ at the block's end would.
  if (real) pin_identity(mgr);
  nb::object enter = checked(PyObject_GetAttrString(mgr.ptr(), "__enter__"));
  nb::object exit = checked(PyObject_GetAttrString(mgr.ptr(), "__exit__"));
  if (!real) {
    PyObject* fn = PyMethod_Check(enter.ptr()) ? PyMethod_GET_FUNCTION(enter.ptr()) : nullptr;
    EMBER_UNSUPPORTED(fn != nullptr && PyFunction_Check(fn) &&
                      !is_library_code(reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn))))
        << "a with block over a " << type_name_of(mgr) << " at " << location();
  }
  const bool grad_before = at::GradMode::is_enabled();
  nb::object result = real ? checked(PyObject_CallNoArgs(enter.ptr())) : call(enter, {}, {});
  EMBER_UNSUPPORTED(!(grad_inputs_ && !grad_before && at::GradMode::is_enabled()))
      << "a with block that enables grad mode with inputs that require grad at " << location();
  if (real) {
    if (nb::object factory = reentry_of(mgr); factory.is_valid()) {
      // A grad-mode manager sets its mode (set_grad_enabled's constructor already did).
      nb::handle type = reinterpret_cast<PyObject*>(Py_TYPE(mgr.ptr()));
      const int grad = attr_string(type, "__module__") == "torch.autograd.grad_mode"
                           ? static_cast<int>(at::GradMode::is_enabled())
                           : -1;
      reentries_[exit.ptr()] = Reentry{exit, std::move(factory), grad};
    }
  }
  st.push_back(std::move(exit));
  st.push_back(std::move(result));
}

nb::object Interpreter::reentry_of(nb::handle mgr) const {
  nb::handle type = reinterpret_cast<PyObject*>(Py_TYPE(mgr.ptr()));
  const std::string module = attr_string(type, "__module__");
  const std::string name = attr_string(type, "__qualname__");
  static PyObject* partial = imported("functools", "partial");
  if (module == "contextlib" && name == "nullcontext") return nb::borrow(type);
  if (module == "torch.autograd.grad_mode") {
    if (name == "no_grad" || name == "enable_grad") return nb::borrow(type);
    if (name == "set_grad_enabled") {
      nb::object mode = checked(PyObject_GetAttrString(mgr.ptr(), "mode"));
      return checked(PyObject_CallFunctionObjArgs(partial, type.ptr(), mode.ptr(), nullptr));
    }
    return {};
  }
  static PyObject* autocast = imported("torch.amp.autocast_mode", "autocast");
  if (PyObject_IsInstance(mgr.ptr(), autocast) != 1) return {};
  // torch.autocast(device_type, dtype=..., enabled=..., cache_enabled=...), whichever of its
  // subclasses made it.
  nb::object device = checked(PyObject_GetAttrString(mgr.ptr(), "device"));
  nb::object dtype = checked(PyObject_GetAttrString(mgr.ptr(), "fast_dtype"));
  nb::object enabled = checked(PyObject_GetAttrString(mgr.ptr(), "_enabled"));
  nb::object cache = checked(PyObject_GetAttrString(mgr.ptr(), "_cache_enabled"));
  nb::object args = checked(Py_BuildValue("(OO)", autocast, device.ptr()));
  nb::object kwargs = checked(Py_BuildValue("{sOsOsO}", "dtype", dtype.ptr(), "enabled",
                                            enabled.ptr(), "cache_enabled", cache.ptr()));
  return checked(PyObject_Call(partial, args.ptr(), kwargs.ptr()));
}

nb::handle Interpreter::reentry_factory(nb::handle exit) const {
  auto it = reentries_.find(exit.ptr());
  return it == reentries_.end() ? nb::handle() : nb::handle(it->second.factory);
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
