/// \file
/// What the interpreter's files (interpreter*.cpp, op_table.cpp, call_*.cpp) share.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <torch/csrc/autograd/python_variable.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "capture/bytecode/instruction.h"
#include "capture/guards/guards.h"
#include "capture/interp/interpreter.h"
#include "support/error.h"

namespace ember::capture {

/// One Python frame being interpreted: the top frame or an inlined call.
struct Interpreter::Frame {
  nanobind::object code_obj;
  PyCodeObject* code = nullptr;
  std::shared_ptr<const bytecode::Code> bc;
  nanobind::object globals;
  nanobind::object builtins;
  nanobind::object closure;  ///< tuple of cells, or none
  int function_source = -1;  ///< source of the function object (for its closure cells), or -1
  bool top = false;
  std::vector<nanobind::object> locals;  ///< localsplus; null = unbound
  std::vector<nanobind::object> stack;   ///< null entries model CPython's NULL
  size_t pc = 0;
  int line = -1;
  /// A generator function being run to completion: what it yields (see inline_function).
  std::vector<nanobind::object>* yields = nullptr;
  /// Inlined for its caller's CALL, whose result is this frame's return value (a nested graph
  /// break can resume the caller with it).
  bool passthrough = false;
};

// The operand stack of a frame.
inline nanobind::object pop(Interpreter::Frame& fr) {
  EMBER_INTERNAL_ASSERT(!fr.stack.empty()) << "stack underflow";
  nanobind::object v = std::move(fr.stack.back());
  fr.stack.pop_back();
  return v;
}

inline nanobind::object& peek(Interpreter::Frame& fr, size_t n = 1) {
  EMBER_INTERNAL_ASSERT(fr.stack.size() >= n) << "stack underflow";
  return fr.stack[fr.stack.size() - n];
}

inline std::vector<nanobind::object> pop_n(Interpreter::Frame& fr, size_t n) {
  EMBER_INTERNAL_ASSERT(fr.stack.size() >= n) << "stack underflow";
  std::vector<nanobind::object> out(n);
  for (size_t i = n; i > 0; --i) out[i - 1] = pop(fr);
  return out;
}

/// The decoded bytecode of `code`, cached per code object.
std::shared_ptr<const bytecode::Code> decoded(PyCodeObject* code);

/// Throws nanobind::python_error if `o` is null (a Python error is set); returns it stolen.
inline nanobind::object checked(PyObject* o) {
  if (o == nullptr) throw nanobind::python_error();
  return nanobind::steal(o);
}

inline bool is_tensor(nanobind::handle v) {
  return v.ptr() != nullptr && THPVariable_Check(v.ptr());
}

/// Whether `v` is a tensor of the trace (a functional wrapper of a tracer tensor).
bool is_tracer(nanobind::handle v);

/// The type's name, for messages.
inline std::string type_name_of(nanobind::handle v) {
  return v.ptr() == nullptr ? "NULL" : Py_TYPE(v.ptr())->tp_name;
}

/// A callable's __qualname__ (else __name__, else its type's name), for messages and policy.
inline std::string name_of(nanobind::handle c) {
  PyObject* n = PyObject_GetAttrString(c.ptr(), "__qualname__");
  if (n == nullptr) {
    PyErr_Clear();
    n = PyObject_GetAttrString(c.ptr(), "__name__");
    if (n == nullptr) {
      PyErr_Clear();
      return type_name_of(c);
    }
  }
  nanobind::object name = nanobind::steal(n);
  return PyUnicode_Check(n) ? std::string(PyUnicode_AsUTF8(n)) : type_name_of(c);
}

inline bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

/// Whether `v` is of a type whose operators and methods are safe to run for real at capture
/// time: tensors, numbers, strings, builtin containers, slices, torch.Size, dtype and device.
bool is_plain_value(nanobind::handle v);

/// `module`.`name`, imported once and kept for the process (a type or function capture
/// compares against).
PyObject* imported(const char* module, const char* name);

/// torch.nn.Module.
PyObject* module_type();

/// Whether `key`, a dict key that is not a guardable constant, is program structure a source can
/// look up again per call: a class, a function, a form of typing (List, Union, Optional[int]).
bool is_static_key(PyObject* key);

/// Whether `v` is guarded by its type and what is read of it, not by its identity (wrap): an
/// nn.Module or an instance of another class written in Python (not an optimizer, scheduler or
/// grad scaler).
bool is_identity_free(nanobind::handle v);

/// str(o), or "?" where it raises (call_policy.cpp).
std::string str_of(nanobind::handle o);

/// The `__module__` of a callable, or "" (call_policy.cpp).
std::string module_of(nanobind::handle c);

/// torch functions that change global state or leave the program: never run at capture time
/// (call_library.cpp).
bool is_denied_torch_function(std::string_view name);

/// Builtin types whose constructors are safe to run for real (call_class.cpp).
bool is_safe_builtin_type(PyObject* t);

/// collections.OrderedDict.
PyTypeObject* ordered_dict_type();

/// torch.optim optimizers, learning-rate schedulers and AMP's gradient scaler: objects whose
/// methods mutate real tensors and counters they hold.
bool is_stateful_torch_object(nanobind::handle v);

/// An attribute of a torch module (a class, a function), or nullptr when this torch has none by
/// that name; kept for the process.
PyObject* torch_class(const char* module, const char* name);

/// Note [A Function's ctx]
/// The `ctx` of a torch.autograd.Function's forward is made by Function.apply for each call: a
/// frame compiled for the forward (run on its own, as under no_grad, where apply calls it from
/// C++) gets a new one every call, so the capture must never depend on its identity. Its
/// recording methods (save_for_backward, save_for_forward, mark_dirty,
/// mark_non_differentiable, set_materialize_grads) only store their arguments in attributes:
/// they are inlined (not run for real on the trace's ctx, which pinned it and recompiled every
/// call, transformers' Reformer), and those attributes, though _FunctionBase's data
/// descriptors, are stores the compiled frame replays on each call's ctx (by its source).
/// Whether `self` is a FunctionCtx and `fn` one of its recording methods.
bool is_function_ctx_recorder(nanobind::handle self, nanobind::handle fn);
/// Whether `obj` is a FunctionCtx and `name` an attribute its recording methods set.
bool is_function_ctx_record(nanobind::handle obj, PyObject* name);

/// A function of torch's higher-order ops (torch.cond, while_loop, scan, map, ...) or one of those
/// operators (call_library.cpp).
bool is_higher_order_op(nanobind::handle callable);
/// torch.utils.checkpoint.checkpoint.
bool is_checkpoint(nanobind::handle callable);
/// A function torch.vmap returned (call_vmap.cpp).
bool is_vmapped(nanobind::handle callable);

/// Whether `m` is an nn.Module instance.
bool is_nn_module(nanobind::handle m);

/// If `v` is an object of a plain class (interpreter_objects.cpp) that a template can rebuild,
/// the class's static base (object, dict or OrderedDict); else nullptr.
PyTypeObject* rebuildable_object_type(nanobind::handle v);

/// Whether frame `fr` can take a graph break at `in` (interpreter_breaks.cpp): the break code
/// (graph_break.cpp) knows its stack effect, and the frame can be resumed after it.
/// `in_withs`: the blocks around `in` are with blocks the break's code enters again
/// (Interpreter::withs_resumable); any other block refuses.
bool breakable(const Interpreter::Frame& fr, const bytecode::Instr& in, bool cells_captured,
               bool in_withs = false);

/// A frame's locals for a stop state: a cell variable as its contents (the resume function
/// makes a new cell).
std::vector<nanobind::object> stopped_locals(const Interpreter::Frame& fr);

/// Whether `cls` is a class collections.namedtuple (or typing.NamedTuple) made.
bool is_namedtuple_class(PyObject* cls);

/// co_consts[i] and co_names[i] of `co`.
inline nanobind::object const_at(PyCodeObject* co, int i) {
  return nanobind::borrow(PyTuple_GET_ITEM(co->co_consts, i));
}

/// The name of `co`'s localsplus slot `i`.
PyObject* local_name(PyCodeObject* co, int i);

inline PyObject* name_at(PyCodeObject* co, int i) {
  return PyTuple_GET_ITEM(co->co_names, i);
}

/// Whether a call's NULL slot is below the callable (3.11, 3.12) rather than above it (3.13).
inline constexpr bool kNullBeforeCallable = PY_MINOR_VERSION < 13;

}  // namespace ember::capture
