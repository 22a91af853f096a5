/// \file
/// The interpreter's call policy: what a call does, by the kind of its callable, decided by
/// the ordered list of kinds in call_kinds() (the first kind that matches the callable handles
/// the call; each kind's handler lives in the file of its concept, call_*.cpp). With the call
/// ops (op_table.cpp): CALL and CALL_FUNCTION_EX, whose callables go through call_from, and
/// MAKE_FUNCTION; and call_real, which runs a callable for real.
#include <string>
#include <string_view>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

std::string str_of(nb::handle o) {
  nb::object s = nb::steal(PyObject_Str(o.ptr()));
  if (!s.is_valid()) {
    PyErr_Clear();
    return "?";
  }
  return nb::cast<std::string>(s);
}

/// The `__module__` of a callable, or "".
std::string module_of(nb::handle c) {
  PyObject* m = PyObject_GetAttrString(c.ptr(), "__module__");
  if (m == nullptr) {
    PyErr_Clear();
    return {};
  }
  nb::object mod = nb::steal(m);
  return PyUnicode_Check(m) ? std::string(PyUnicode_AsUTF8(m)) : std::string();
}

const std::vector<Interpreter::CallKind>& Interpreter::call_kinds() {
  // The order matters: an nn.Module is also callable as an object, a bound method's function is
  // also a Python function, a class is also a type of a wrapper, ... The first match decides.
  static const std::vector<CallKind> kinds = {
      // call_library.cpp: torch.cond, while_loop, ...: the frame runs eagerly, unhooked.
      {"higher-order op", is_higher_order_op, &Interpreter::call_higher_order_op},
      // call_library.cpp: checkpoint(fn, *args): fn(*args), inlined.
      {"torch.utils.checkpoint", is_checkpoint, &Interpreter::call_checkpointed},
      // call_vmap.cpp: torch.vmap's wrapper, done by the interpreter around func.
      {"torch.vmap wrapper", is_vmapped, &Interpreter::call_vmapped},
      // call_module.cpp: its forward (or the program's __call__) inlined.
      {"nn.Module", is_nn_module, &Interpreter::call_module},
      // call_function.cpp: inlined, or a library method run for real.
      {"bound method", [](nb::handle c) { return PyMethod_Check(c.ptr()) != 0; },
       &Interpreter::call_method},
      // call_function.cpp: inlined (program code, torch.optim), or run for real (runs_for_real).
      {"Python function", [](nb::handle c) { return PyFunction_Check(c.ptr()) != 0; },
       &Interpreter::call_function},
      // call_builtin.cpp: builtins, methods of containers; call_torch.cpp: tensor methods and
      // torch functions, recorded into the graph.
      {"C function", [](nb::handle c) { return PyCFunction_Check(c.ptr()) != 0; },
       &Interpreter::call_c_function},
      // call_class.cpp: construction (program classes' __init__ inlined), builtin types.
      {"class", [](nb::handle c) { return PyType_Check(c.ptr()) != 0; }, &Interpreter::call_class},
      // call_wrappers.cpp: what the wrapper wraps, inlined.
      {"torch.jit.script function",
       [](nb::handle c) { return type_name_of(c) == "ScriptFunction"; },
       &Interpreter::call_script_function},
      {"functools.lru_cache wrapper",
       [](nb::handle c) { return type_name_of(c) == "functools._lru_cache_wrapper"; },
       &Interpreter::call_lru_cache_wrapper},
      {"functools.partial", [](nb::handle c) { return type_name_of(c) == "functools.partial"; },
       &Interpreter::call_partial},
      // call_builtin.cpp: C descriptors, method-wrappers and torch ops, run for real.
      {"C descriptor or torch op",
       [](nb::handle c) {
         std::string tname = type_name_of(c);
         return tname == "method_descriptor" || tname == "wrapper_descriptor" ||
                tname == "method-wrapper" || tname == "builtin_function_or_method" ||
                starts_with(tname, "torch._ops.") || tname == "OpOverloadPacket" ||
                tname == "OpOverload";
       },
       &Interpreter::call_descriptor},
      // call_builtin.cpp: numpy functions of numbers, run for real.
      {"numpy ufunc", [](nb::handle c) { return type_name_of(c) == "numpy.ufunc"; },
       &Interpreter::call_numpy_ufunc},
  };
  return kinds;
}

std::vector<std::string> Interpreter::call_kind_names() {
  std::vector<std::string> out;
  for (const CallKind& kind : call_kinds()) out.emplace_back(kind.name);
  return out;
}

nb::object Interpreter::call_from(Frame& fr, nb::handle callable, std::vector<nb::object> args,
                                  nb::handle kwnames) {
  struct Direct {
    Interpreter& interp;
    ~Direct() {
      interp.direct_caller_ = nullptr;
      interp.direct_callable_ = nullptr;
    }
  } direct{*this};
  direct_caller_ = &fr;
  direct_callable_ = callable.ptr();
  return call(callable, std::move(args), kwnames);
}

nb::object Interpreter::call(nb::handle callable, std::vector<nb::object> args,
                             nb::handle kwnames) {
  EMBER_UNSUPPORTED(callable.ptr() != nullptr) << "calling NULL at " << location();
  for (const CallKind& kind : call_kinds()) {
    if (kind.matches(callable)) return (this->*kind.handler)(callable, std::move(args), kwnames);
  }
  return call_unsupported(callable);
}

nb::object Interpreter::call_unsupported(nb::handle callable) {
  EMBER_UNSUPPORTED(false) << "calling a " << type_name_of(callable) << " (" << str_of(callable)
                           << ") at " << location();
  return {};
}

nb::object Interpreter::call_real(nb::handle callable, std::vector<nb::object> args,
                                  nb::handle kwnames, bool pin) {
  if (pin && !identity_free_.empty()) {
    // Code that runs for real reads what it is given without guards: objects guarded by type
    // are guarded by identity from here on.
    pin_identities(args);
    PyObject* c = callable.ptr();
    if (PyMethod_Check(c)) pin_identity(PyMethod_GET_SELF(c));
    if (PyCFunction_Check(c) && PyCFunction_GET_SELF(c) != nullptr) {
      pin_identity(PyCFunction_GET_SELF(c));
    }
  }
  size_t nkw = kwnames.is_valid() ? static_cast<size_t>(PyTuple_GET_SIZE(kwnames.ptr())) : 0;
  std::vector<PyObject*> raw(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    EMBER_UNSUPPORTED(args[i].is_valid()) << "a NULL argument at " << location();
    raw[i] = args[i].ptr();
  }
  nb::object r = checked(PyObject_Vectorcall(callable.ptr(), raw.data(), args.size() - nkw,
                                             nkw > 0 ? kwnames.ptr() : nullptr));
  // A container nobody else holds was made by this call: the frame owns it.
  if ((PyList_CheckExact(r.ptr()) || PyDict_CheckExact(r.ptr()) || PySet_CheckExact(r.ptr()) ||
       Py_TYPE(r.ptr()) == ordered_dict_type()) &&
      Py_REFCNT(r.ptr()) == 1) {
    fresh(r);
  }
  if (PyIter_Check(r.ptr()) && !is_tensor(r)) fresh(r);
  return r;
}

using bytecode::Instr;

void Interpreter::op_CALL(Frame& fr, const Instr& in, StepResult&) {
  size_t argc = static_cast<size_t>(in.arg);
  std::vector<nb::object> args = pop_n(fr, argc);
  nb::object b = pop(fr);
  nb::object a = pop(fr);
  nb::object callable;
  if (kNullBeforeCallable) {
    if (a.is_valid()) {
      callable = a;
      args.insert(args.begin(), b);
    } else {
      callable = b;
    }
  } else {
    callable = a;
    if (b.is_valid()) args.insert(args.begin(), b);
  }
  nb::object kwnames = in.kwnames >= 0 ? const_at(fr.code, in.kwnames) : nb::object();
  fr.stack.push_back(call_from(fr, callable, std::move(args), kwnames));
}

void Interpreter::op_CALL_FUNCTION_EX(Frame& fr, const Instr& in, StepResult&) {
  nb::object kwargs = (in.arg & 1) ? pop(fr) : nb::object();
  nb::object posargs = pop(fr);
  nb::object b = pop(fr);
  nb::object a = pop(fr);
  nb::object callable = kNullBeforeCallable ? b : a;
  EMBER_UNSUPPORTED(PyTuple_Check(posargs.ptr()) || PyList_CheckExact(posargs.ptr()))
      << "f(*args) with args a " << type_name_of(posargs) << " at " << location();
  std::vector<nb::object> args;
  nb::object fast = checked(PySequence_Fast(posargs.ptr(), "*args"));
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.ptr()); ++i) {
    args.push_back(nb::borrow(PySequence_Fast_GET_ITEM(fast.ptr(), i)));
  }
  nb::object kwnames;
  if (kwargs.is_valid() && PyDict_GET_SIZE(kwargs.ptr()) > 0) {
    EMBER_UNSUPPORTED(PyDict_CheckExact(kwargs.ptr()))
        << "f(**kwargs) with kwargs a " << type_name_of(kwargs) << " at " << location();
    nb::object names = checked(PyList_New(0));
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs.ptr(), &pos, &key, &value)) {
      if (PyList_Append(names.ptr(), key) < 0) throw nb::python_error();
      args.push_back(nb::borrow(value));
    }
    kwnames = checked(PyList_AsTuple(names.ptr()));
  }
  fr.stack.push_back(call_from(fr, callable, std::move(args), kwnames));
}

void Interpreter::op_MAKE_FUNCTION(Frame& fr, [[maybe_unused]] const Instr& in, StepResult&) {
  nb::object code = pop(fr);
  EMBER_UNSUPPORTED(PyCode_Check(code.ptr())) << "MAKE_FUNCTION without a code object";
  nb::object fn = checked(PyFunction_New(code.ptr(), fr.globals.ptr()));
#if PY_MINOR_VERSION < 13
  int flags = in.arg;
  if (flags & 0x08) {
    nb::object closure = pop(fr);
    if (PyFunction_SetClosure(fn.ptr(), closure.ptr()) < 0) throw nb::python_error();
  }
  if (flags & 0x04) pop(fr);  // annotations
  if (flags & 0x02) {
    nb::object kwdefaults = pop(fr);
    if (PyFunction_SetKwDefaults(fn.ptr(), kwdefaults.ptr()) < 0) throw nb::python_error();
  }
  if (flags & 0x01) {
    nb::object defaults = pop(fr);
    if (PyFunction_SetDefaults(fn.ptr(), defaults.ptr()) < 0) throw nb::python_error();
  }
#endif
  fr.stack.push_back(fresh(fn));
}

}  // namespace ember::capture
