/// \file
/// The interpreter's loop: one handler per normalised opcode (bytecode/instruction.h).
#include "capture/interp/interpreter.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>

#include <mutex>
#include <unordered_map>

#include "capture/bytecode/decoder.h"
#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;
using bytecode::Op;

std::shared_ptr<const bytecode::Code> decoded(PyCodeObject* code) {
  // Guarded by the GIL. Entries keep their code object alive.
  // Never destroyed: its objects must not be released after the interpreter is finalized.
  static auto& cache =
      *new std::unordered_map<PyObject*,
                              std::pair<nb::object, std::shared_ptr<const bytecode::Code>>>();
  auto it = cache.find(reinterpret_cast<PyObject*>(code));
  if (it != cache.end()) return it->second.second;
  auto bc = std::make_shared<const bytecode::Code>(bytecode::decode(code));
  cache.emplace(reinterpret_cast<PyObject*>(code),
                std::make_pair(nb::borrow(reinterpret_cast<PyObject*>(code)), bc));
  return bc;
}

namespace {

constexpr bool kNullBeforeCallable = PY_MINOR_VERSION < 13;

// BINARY_OP's oparg (CPython's NB_* values, the same on 3.11-3.13; opcode.h is not included
// because its opcode macros clash with Op's names).
enum BinaryOp {
  NB_ADD,
  NB_AND,
  NB_FLOOR_DIVIDE,
  NB_LSHIFT,
  NB_MATRIX_MULTIPLY,
  NB_MULTIPLY,
  NB_REMAINDER,
  NB_OR,
  NB_POWER,
  NB_RSHIFT,
  NB_SUBTRACT,
  NB_TRUE_DIVIDE,
  NB_XOR,
  NB_INPLACE_ADD,
  NB_INPLACE_AND,
  NB_INPLACE_FLOOR_DIVIDE,
  NB_INPLACE_LSHIFT,
  NB_INPLACE_MATRIX_MULTIPLY,
  NB_INPLACE_MULTIPLY,
  NB_INPLACE_REMAINDER,
  NB_INPLACE_OR,
  NB_INPLACE_POWER,
  NB_INPLACE_RSHIFT,
  NB_INPLACE_SUBTRACT,
  NB_INPLACE_TRUE_DIVIDE,
  NB_INPLACE_XOR
};

PyObject* binary_op(int op, PyObject* a, PyObject* b) {
  switch (op) {
    case NB_ADD:
      return PyNumber_Add(a, b);
    case NB_AND:
      return PyNumber_And(a, b);
    case NB_FLOOR_DIVIDE:
      return PyNumber_FloorDivide(a, b);
    case NB_LSHIFT:
      return PyNumber_Lshift(a, b);
    case NB_MATRIX_MULTIPLY:
      return PyNumber_MatrixMultiply(a, b);
    case NB_MULTIPLY:
      return PyNumber_Multiply(a, b);
    case NB_REMAINDER:
      return PyNumber_Remainder(a, b);
    case NB_OR:
      return PyNumber_Or(a, b);
    case NB_POWER:
      return PyNumber_Power(a, b, Py_None);
    case NB_RSHIFT:
      return PyNumber_Rshift(a, b);
    case NB_SUBTRACT:
      return PyNumber_Subtract(a, b);
    case NB_TRUE_DIVIDE:
      return PyNumber_TrueDivide(a, b);
    case NB_XOR:
      return PyNumber_Xor(a, b);
    case NB_INPLACE_ADD:
      return PyNumber_InPlaceAdd(a, b);
    case NB_INPLACE_AND:
      return PyNumber_InPlaceAnd(a, b);
    case NB_INPLACE_FLOOR_DIVIDE:
      return PyNumber_InPlaceFloorDivide(a, b);
    case NB_INPLACE_LSHIFT:
      return PyNumber_InPlaceLshift(a, b);
    case NB_INPLACE_MATRIX_MULTIPLY:
      return PyNumber_InPlaceMatrixMultiply(a, b);
    case NB_INPLACE_MULTIPLY:
      return PyNumber_InPlaceMultiply(a, b);
    case NB_INPLACE_REMAINDER:
      return PyNumber_InPlaceRemainder(a, b);
    case NB_INPLACE_OR:
      return PyNumber_InPlaceOr(a, b);
    case NB_INPLACE_POWER:
      return PyNumber_InPlacePower(a, b, Py_None);
    case NB_INPLACE_RSHIFT:
      return PyNumber_InPlaceRshift(a, b);
    case NB_INPLACE_SUBTRACT:
      return PyNumber_InPlaceSubtract(a, b);
    case NB_INPLACE_TRUE_DIVIDE:
      return PyNumber_InPlaceTrueDivide(a, b);
    case NB_INPLACE_XOR:
      return PyNumber_InPlaceXor(a, b);
    default:
      break;
  }
  EMBER_UNSUPPORTED(false) << "binary operator " << op;
  return nullptr;
}

PyObject* name_at(PyCodeObject* co, int i) {
  return PyTuple_GET_ITEM(co->co_names, i);
}

int code_line(PyCodeObject* co, const Instr& in) {
  return in.pos.line >= 0 ? in.pos.line : co->co_firstlineno;
}

}  // namespace

bool reads_tensor_data(const std::string& msg) {
  for (const char* m : {"unallocated storage", "doesn't have storage", "does not have storage",
                        "Cannot access data pointer"}) {
    if (msg.find(m) != std::string::npos) return true;
  }
  return false;
}

int num_arg_slots(PyCodeObject* co) {
  return co->co_argcount + co->co_kwonlyargcount + ((co->co_flags & CO_VARARGS) ? 1 : 0) +
         ((co->co_flags & CO_VARKEYWORDS) ? 1 : 0);
}

bool in_files(PyCodeObject* co, const std::vector<std::string>& prefixes) {
  std::string_view file = PyUnicode_AsUTF8(co->co_filename);
  for (const std::string& p : prefixes) {
    if (file.substr(0, p.size()) == p) return true;
  }
  return false;
}

Interpreter::Interpreter(tracer::TraceSession& session, SourceTable& sources, GuardSet& guards,
                         InterpreterOptions options)
    : session_(session), sources_(sources), guards_(guards), options_(std::move(options)) {}

Interpreter::~Interpreter() = default;

std::string Interpreter::location() const {
  std::string out;
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it) {
    const Frame* fr = *it;
    if (!out.empty()) out += " <- ";
    out += nb::cast<std::string>(nb::handle(fr->code->co_filename)) + ":" +
           std::to_string(fr->line) + " (" + nb::cast<std::string>(nb::handle(fr->code->co_name)) +
           ")";
  }
  return out;
}

namespace {
/// Unwinds the interpreter from a nested stop (record_nested_stop) to run().
struct NestedStop {};
}  // namespace

nb::object Interpreter::run(const FrameView& f, int stop_at, int64_t stop_count) {
  stop_at_ = stop_at;
  stop_count_ = stop_count;
  entry_grad_ = at::GradMode::is_enabled();
  // With blocks change grad mode and autocast for real; an interrupted capture must not leave
  // them changed. Autocast's cache of casts may hold tracer tensors afterwards: emptied.
  struct RestoreGlobalState {
    bool grad = at::GradMode::is_enabled();
    bool autocast_cpu = at::autocast::is_autocast_enabled(at::kCPU);
    bool autocast_cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    at::ScalarType dtype_cpu = at::autocast::get_autocast_dtype(at::kCPU);
    at::ScalarType dtype_cuda = at::autocast::get_autocast_dtype(at::kCUDA);
    bool cache = at::autocast::is_autocast_cache_enabled();
    int nesting = at::autocast::increment_nesting() - 1;
    RestoreGlobalState() { at::autocast::decrement_nesting(); }
    ~RestoreGlobalState() {
      at::GradMode::set_enabled(grad);
      at::autocast::set_autocast_enabled(at::kCPU, autocast_cpu);
      at::autocast::set_autocast_enabled(at::kCUDA, autocast_cuda);
      at::autocast::set_autocast_dtype(at::kCPU, dtype_cpu);
      at::autocast::set_autocast_dtype(at::kCUDA, dtype_cuda);
      at::autocast::set_autocast_cache_enabled(cache);
      int now = at::autocast::increment_nesting() - 1;
      at::autocast::decrement_nesting();
      for (; now > nesting; --now) at::autocast::decrement_nesting();
      for (; now < nesting; ++now) at::autocast::increment_nesting();
      at::autocast::clear_cache();
    }
  } restore_global_state;
  struct UndoStores {
    Interpreter& interp;
    ~UndoStores() { interp.undo_stores(); }
  } undo_stores{*this};
  Frame fr;
  fr.code_obj = nb::borrow(reinterpret_cast<PyObject*>(f.code));
  fr.code = f.code;
  fr.bc = decoded(f.code);
  fr.globals = nb::borrow(f.globals);
  fr.builtins = nb::borrow(f.builtins);
  fr.closure = f.closure != nullptr ? nb::borrow(f.closure) : nb::none();
  fr.top = true;
  fr.locals.resize(static_cast<size_t>(std::max(f.nlocalsplus, 0)));
  PyCodeObject* co = f.code;
  int nargs = num_arg_slots(co);
  for (int i = 0; i < nargs && i < f.nlocalsplus; ++i) {
    PyObject* v = f.value(i);
    if (v == nullptr) continue;
    fr.locals[static_cast<size_t>(i)] = wrap(v, sources_.local(i, local_name(co, i)));
  }
  if (co->co_flags & CO_VARKEYWORDS) {
    // The **kwargs dict is made for this call: the frame may change it (kwargs.pop(...)).
    fresh(fr.locals[static_cast<size_t>(nargs - 1)]);
  }
  if (f.closure != nullptr) {
    Py_ssize_t nfree = PyTuple_GET_SIZE(f.closure);
    for (Py_ssize_t j = 0; j < nfree; ++j) {
      int slot = f.nlocalsplus - static_cast<int>(nfree) + static_cast<int>(j);
      cell_origin_[PyTuple_GET_ITEM(f.closure, j)] = {-1, slot};
    }
  }
  nb::object result;
  try {
    result = run_frame(fr);
  } catch (const NestedStop&) {
    return nb::none();
  }
  EMBER_UNSUPPORTED(stop_.pc >= 0 || at::GradMode::is_enabled() == entry_grad_)
      << "the frame returns with grad mode changed (torch.set_grad_enabled)";
  return result;
}

nb::object Interpreter::run_frame(Frame& fr) {
  frames_.push_back(&fr);
  struct Pop {
    std::vector<Frame*>& frames;
    ~Pop() { frames.pop_back(); }
  } pop_frame{frames_};
  const std::vector<Instr>& instrs = fr.bc->instrs;
  bool returned = false;
  nb::object result;
  while (!returned) {
    EMBER_INTERNAL_ASSERT(fr.pc < instrs.size()) << "ran off the end of the bytecode";
    if (fr.top && static_cast<int>(fr.pc) == stop_at_) {
      stop_.pc = stop_at_;
      stop_.stack = fr.stack;
      stop_.locals = stopped_locals(fr);
      return nb::none();
    }
    if (instructions_ == stop_count_) {
      EMBER_UNSUPPORTED(!fr.top) << "the capture did not repeat itself up to a nested break";
      record_nested_stop();
      throw NestedStop{};
    }
    size_t pc = fr.pc;
    const Instr& in = instrs[fr.pc++];
    fr.line = code_line(fr.code, in);
    const int64_t count = instructions_++;
    std::string reason;
    bool data_dependent = false;
    try {
      step(fr, in, returned, result);
      continue;
    } catch (const GraphBreak&) {
      throw;
    } catch (const EagerThisCall&) {
      throw;
    } catch (const RunsUnhooked&) {
      throw;
    } catch (const DataDependentError& e) {
      if (!fr.top && !nestable(fr, in)) throw;
      reason = e.what();
      data_dependent = true;
    } catch (const Unsupported& e) {
      if (!fr.top && !nestable(fr, in)) throw;
      reason = e.what();
    } catch (nb::python_error& e) {
      if (is_program_exception(e)) {
        if (in.handler < 0) throw;  // to the caller's handler, or out of the capture
        catch_exception(fr, in, e);
        continue;
      }
      if (!fr.top && !nestable(fr, in)) throw;
      // A data-dependent call (.item(), .tolist(), bool of a tensor) raises through PyTorch's
      // bindings; ember's own error is the session's pending one.
      std::string msg = e.what();
      try {
        session_.rethrow_pending_error();
      } catch (const DataDependentError& pending) {
        reason = std::string(pending.what()) + " at " + location();
        data_dependent = true;
      } catch (const Unsupported& pending) {
        reason = std::string(pending.what()) + " at " + location();
      }
      if (reason.empty() && reads_tensor_data(msg)) {
        reason = "the program reads the data of a traced tensor (" + msg + ")";
        data_dependent = true;
      }
      if (reason.empty()) throw;
    }
    // A break while torch.set_grad_enabled has changed grad mode would run the rest of the frame
    // under the caller's (the segment does not set it).
    const bool grad_as_entered = at::GradMode::is_enabled() == entry_grad_;
    if (!fr.top && grad_as_entered) {
      throw GraphBreak(reason, static_cast<int>(pc), data_dependent, count);
    }
    if (!fr.top) {
      if (data_dependent) throw DataDependentError(reason);
      throw Unsupported(reason);
    }
    if (grad_as_entered && breakable(fr, in, fr.code->co_ncellvars > 0 && cells_captured(fr))) {
      throw GraphBreak(reason, static_cast<int>(pc), data_dependent);
    }
    if (data_dependent) throw DataDependentError(reason);
    throw Unsupported(reason);
  }
  return result;
}

bool Interpreter::truth(nb::handle v) {
  if (is_tensor(v)) {
    throw DataDependentError("control flow on tensor data (a tensor used as a bool) at " +
                             location());
  }
  if (!is_plain_value(v)) {
    PyTypeObject* t = Py_TYPE(v.ptr());
    bool has_bool = t->tp_as_number != nullptr && t->tp_as_number->nb_bool != nullptr;
    bool has_len = (t->tp_as_mapping != nullptr && t->tp_as_mapping->mp_length != nullptr) ||
                   (t->tp_as_sequence != nullptr && t->tp_as_sequence->sq_length != nullptr);
    if (has_bool || has_len) {
      int source = source_of(v);
      EMBER_UNSUPPORTED(source >= 0 && has_len && !has_bool && is_nn_module(v))
          << "the truth value of a " << type_name_of(v) << " at " << location();
      guards_.add_len(source, v.ptr());
    }
  }
  int r = PyObject_IsTrue(v.ptr());
  if (r < 0) throw nb::python_error();
  return r == 1;
}

nb::object Interpreter::make_function(Frame& fr, const Instr& in) {
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
  return fresh(fn);
}

void Interpreter::step(Frame& fr, const Instr& in, bool& returned, nb::object& result) {
  PyCodeObject* co = fr.code;
  auto& st = fr.stack;
  switch (in.op) {
    case Op::NOP:
    case Op::RESUME:
    case Op::CACHE:
    case Op::EXTENDED_ARG:
    case Op::PRECALL:
    case Op::KW_NAMES:
      return;
    case Op::POP_TOP:
      pop(fr);
      return;
    case Op::PUSH_NULL:
      st.emplace_back();
      return;
    case Op::COPY:
      st.push_back(peek(fr, static_cast<size_t>(in.arg)));
      return;
    case Op::SWAP:
      std::swap(peek(fr, 1), peek(fr, static_cast<size_t>(in.arg)));
      return;
    case Op::END_FOR:
#if PY_MINOR_VERSION == 12
      pop(fr);
#endif
      pop(fr);
      return;
    case Op::LOAD_CONST:
      st.push_back(const_at(co, in.arg));
      return;
    case Op::RETURN_VALUE:
      result = pop(fr);
      returned = true;
      return;
#if PY_MINOR_VERSION >= 12
    case Op::RETURN_CONST:
      result = const_at(co, in.arg);
      returned = true;
      return;
#endif
    case Op::LOAD_FAST:
    case Op::LOAD_FAST_CHECK: {
      nb::object v = fr.locals[static_cast<size_t>(in.arg)];
      if (!v.is_valid()) {
        PyErr_Format(PyExc_UnboundLocalError,
                     "cannot access local variable '%U' where it is not associated with a value",
                     local_name(co, in.arg));
        throw nb::python_error();
      }
      st.push_back(std::move(v));
      return;
    }
    case Op::LOAD_FAST_AND_CLEAR:
      st.push_back(std::move(fr.locals[static_cast<size_t>(in.arg)]));
      fr.locals[static_cast<size_t>(in.arg)] = nb::object();
      return;
    case Op::STORE_FAST:
      fr.locals[static_cast<size_t>(in.arg)] = pop(fr);
      return;
    case Op::DELETE_FAST:
      fr.locals[static_cast<size_t>(in.arg)] = nb::object();
      return;
    case Op::MAKE_CELL: {
      nb::object& slot = fr.locals[static_cast<size_t>(in.arg)];
      slot = fresh(checked(PyCell_New(slot.ptr())));
      return;
    }
    case Op::COPY_FREE_VARS: {
      EMBER_INTERNAL_ASSERT(!fr.closure.is_none()) << "COPY_FREE_VARS without a closure";
      int n = in.arg;
      int base = static_cast<int>(fr.locals.size()) - n;
      for (int j = 0; j < n; ++j) {
        PyObject* cell = PyTuple_GET_ITEM(fr.closure.ptr(), j);
        fr.locals[static_cast<size_t>(base + j)] = nb::borrow(cell);
        if (!fr.top && !is_fresh(cell) && fr.function_source >= 0) {
          cell_origin_.emplace(cell, std::make_pair(fr.function_source, j));
        }
      }
      return;
    }
    case Op::LOAD_CLOSURE:
      st.push_back(fr.locals[static_cast<size_t>(in.arg)]);
      return;
    case Op::LOAD_DEREF:
      st.push_back(load_deref(fr, in.arg));
      return;
    case Op::STORE_DEREF: {
      nb::object cell = fr.locals[static_cast<size_t>(in.arg)];
      EMBER_UNSUPPORTED(is_fresh(cell))
          << "assigning a closure variable of an enclosing function at " << location();
      nb::object v = pop(fr);
      if (PyCell_Set(cell.ptr(), v.ptr()) < 0) throw nb::python_error();
      return;
    }
    case Op::LOAD_GLOBAL: {
      nb::object v = load_global(fr, name_at(co, in.arg));
      bool null = (in.flags & 1) != 0;
      if (null && kNullBeforeCallable) st.emplace_back();
      st.push_back(std::move(v));
      if (null && !kNullBeforeCallable) st.emplace_back();
      return;
    }
    case Op::LOAD_ATTR: {
      nb::object obj = pop(fr);
      st.push_back(load_attr(obj, name_at(co, in.arg)));
      return;
    }
    case Op::LOAD_METHOD: {
      nb::object obj = pop(fr);
      nb::object m = load_attr(obj, name_at(co, in.arg));
      if (kNullBeforeCallable) st.emplace_back();
      st.push_back(std::move(m));
      if (!kNullBeforeCallable) st.emplace_back();
      return;
    }
#if PY_MINOR_VERSION >= 12
    case Op::LOAD_SUPER_ATTR: {
      // super().name: [super, __class__, self] -> super(__class__, self).name
      nb::object self = pop(fr);
      nb::object cls = pop(fr);
      nb::object super_fn = pop(fr);
      EMBER_UNSUPPORTED(super_fn.ptr() == reinterpret_cast<PyObject*>(&PySuper_Type))
          << "LOAD_SUPER_ATTR with a " << type_name_of(super_fn) << " at " << location();
      nb::object sup = fresh(
          checked(PyObject_CallFunctionObjArgs(super_fn.ptr(), cls.ptr(), self.ptr(), nullptr)));
      nb::object v = load_attr(sup, name_at(co, in.arg));
      if (in.flags & 1) {  // a method load: [NULL, bound] (3.12) or [bound, NULL] (3.13)
        if (kNullBeforeCallable) st.emplace_back();
        st.push_back(std::move(v));
        if (!kNullBeforeCallable) st.emplace_back();
      } else {
        st.push_back(std::move(v));
      }
      return;
    }
#endif
    case Op::STORE_ATTR: {
      nb::object obj = pop(fr);
      nb::object v = pop(fr);
      store_attr(obj, name_at(co, in.arg), v);
      return;
    }
    case Op::BINARY_OP: {
      nb::object b = pop(fr);
      nb::object a = pop(fr);
      EMBER_UNSUPPORTED(is_plain_value(a) && is_plain_value(b))
          << "operator on a " << type_name_of(a) << " and a " << type_name_of(b) << " at "
          << location();
      bool inplace = in.arg >= NB_INPLACE_ADD;
      const bool outside = inplace && PyList_CheckExact(a.ptr()) && mutates_outside(a);
      EMBER_UNSUPPORTED(!inplace || is_tensor(a) || is_fresh(a) || outside ||
                        !PyList_CheckExact(a.ptr()))
          << "an in-place operator on a list from outside the function at " << location();
      st.push_back(checked(binary_op(in.arg, a.ptr(), b.ptr())));
      PyObject* r = st.back().ptr();
      // A list, dict or set the operator made (`[(0, 0)] * n`, `a + b`, `d | e`) is the
      // frame's own, as is one it extended in place.
      bool container = PyList_CheckExact(r) || PyDict_CheckExact(r) || PySet_CheckExact(r);
      if (container && (inplace ? !outside : (r != a.ptr() && r != b.ptr()))) fresh(st.back());
      return;
    }
    case Op::UNARY_NEGATIVE:
    case Op::UNARY_INVERT:
    case Op::UNARY_NOT:
#if PY_MINOR_VERSION == 11
    case Op::UNARY_POSITIVE:
#endif
    {
      nb::object a = pop(fr);
      if (in.op == Op::UNARY_NOT) {
        st.push_back(nb::borrow(truth(a) ? Py_False : Py_True));
        return;
      }
      EMBER_UNSUPPORTED(is_plain_value(a))
          << "operator on a " << type_name_of(a) << " at " << location();
      PyObject* r = in.op == Op::UNARY_NEGATIVE ? PyNumber_Negative(a.ptr())
                    : in.op == Op::UNARY_INVERT ? PyNumber_Invert(a.ptr())
                                                : PyNumber_Positive(a.ptr());
      st.push_back(checked(r));
      return;
    }
#if PY_MINOR_VERSION >= 12
    case Op::CALL_INTRINSIC_1: {
      nb::object a = pop(fr);
      if (in.arg == 5) {  // INTRINSIC_UNARY_POSITIVE
        EMBER_UNSUPPORTED(is_plain_value(a)) << "operator on a " << type_name_of(a);
        st.push_back(checked(PyNumber_Positive(a.ptr())));
      } else if (in.arg == 6) {  // INTRINSIC_LIST_TO_TUPLE
        st.push_back(checked(PyList_AsTuple(a.ptr())));
      } else {
        EMBER_UNSUPPORTED(false) << "CALL_INTRINSIC_1 " << in.arg << " at " << location();
      }
      return;
    }
#endif
    case Op::COMPARE_OP: {
      nb::object b = pop(fr);
      nb::object a = pop(fr);
      EMBER_UNSUPPORTED(is_plain_value(a) && is_plain_value(b))
          << "comparing a " << type_name_of(a) << " and a " << type_name_of(b) << " at "
          << location();
      nb::object r = checked(PyObject_RichCompare(a.ptr(), b.ptr(), in.arg));
#if PY_MINOR_VERSION >= 13
      if (in.flags & 0x10) r = nb::borrow(truth(r) ? Py_True : Py_False);
#endif
      st.push_back(std::move(r));
      return;
    }
    case Op::IS_OP: {
      nb::object b = pop(fr);
      nb::object a = pop(fr);
      if (!is_guardable_constant(a.ptr()) && !is_guardable_constant(b.ptr())) {
        pin_identity(a);
        pin_identity(b);
      }
      bool same = (a.ptr() == b.ptr()) != (in.arg != 0);
      st.push_back(nb::borrow(same ? Py_True : Py_False));
      return;
    }
    case Op::CONTAINS_OP: {
      nb::object container = pop(fr);
      nb::object item = pop(fr);
      pin_identity(item);
      if (nb::object m = special_method(container, "__contains__"); m.is_valid()) {
        st.push_back(nb::borrow(truth(call(m, {item}, {})) != (in.arg != 0) ? Py_True : Py_False));
        return;
      }
      EMBER_UNSUPPORTED(
          (is_plain_value(container) && !is_tensor(container)) ||
          (PyDict_Check(container.ptr()) && Py_TYPE(container.ptr())->tp_as_sequence->sq_contains ==
                                                PyDict_Type.tp_as_sequence->sq_contains))
          << "'in' on a " << type_name_of(container) << " at " << location();
      int r = PySequence_Contains(container.ptr(), item.ptr());
      if (r < 0) throw nb::python_error();
      st.push_back(nb::borrow((r == 1) != (in.arg != 0) ? Py_True : Py_False));
      return;
    }
    case Op::BINARY_SUBSCR: {
      nb::object key = pop(fr);
      nb::object obj = pop(fr);
      st.push_back(subscr(obj, key));
      return;
    }
#if PY_MINOR_VERSION >= 12
    case Op::BINARY_SLICE: {
      nb::object stop = pop(fr);
      nb::object start = pop(fr);
      nb::object obj = pop(fr);
      nb::object key = checked(PySlice_New(start.ptr(), stop.ptr(), nullptr));
      st.push_back(subscr(obj, key));
      return;
    }
    case Op::STORE_SLICE: {
      nb::object stop = pop(fr);
      nb::object start = pop(fr);
      nb::object obj = pop(fr);
      nb::object v = pop(fr);
      EMBER_UNSUPPORTED(is_tensor(obj) || is_fresh(obj) || mutates_outside(obj))
          << "assigning a slice of a " << type_name_of(obj) << " at " << location();
      nb::object key = checked(PySlice_New(start.ptr(), stop.ptr(), nullptr));
      if (PyObject_SetItem(obj.ptr(), key.ptr(), v.ptr()) < 0) throw nb::python_error();
      return;
    }
#endif
    case Op::STORE_SUBSCR: {
      nb::object key = pop(fr);
      nb::object obj = pop(fr);
      nb::object v = pop(fr);
      pin_identity(key);
      EMBER_UNSUPPORTED(is_tensor(obj) || is_fresh(obj) || mutates_outside(obj))
          << "assigning an item of a " << type_name_of(obj) << " at " << location();
      if (nb::object m = special_method(obj, "__setitem__"); m.is_valid()) {
        call(m, {key, v}, {});
        return;
      }
      if (is_tensor(obj)) key = tensor_index(obj, key);
      if (PyObject_SetItem(obj.ptr(), key.ptr(), v.ptr()) < 0) throw nb::python_error();
      return;
    }
    case Op::DELETE_SUBSCR: {
      nb::object key = pop(fr);
      nb::object obj = pop(fr);
      EMBER_UNSUPPORTED(is_fresh(obj) || mutates_outside(obj))
          << "deleting an item of a " << type_name_of(obj) << " at " << location();
      if (nb::object m = special_method(obj, "__delitem__"); m.is_valid()) {
        call(m, {key}, {});
        return;
      }
      if (PyObject_DelItem(obj.ptr(), key.ptr()) < 0) throw nb::python_error();
      return;
    }
    case Op::GET_ITER: {
      nb::object v = materialized(pop(fr));
      EMBER_UNSUPPORTED(is_plain_value(v) || is_fresh(v) || PyIter_Check(v.ptr()))
          << "iterating over a " << type_name_of(v) << " at " << location();
      st.push_back(fresh(checked(PyObject_GetIter(v.ptr()))));
      return;
    }
    case Op::FOR_ITER: {
      nb::handle it = peek(fr);
      EMBER_UNSUPPORTED(is_fresh(it)) << "FOR_ITER over an iterator from outside the function";
      PyObject* next = PyIter_Next(it.ptr());
      if (next != nullptr) {
        st.push_back(nb::steal(next));
        return;
      }
      if (PyErr_Occurred()) throw nb::python_error();
#if PY_MINOR_VERSION == 11
      pop(fr);
#else
      st.push_back(nb::none());  // END_FOR (3.12) or END_FOR + POP_TOP (3.13) pop both
#endif
      fr.pc = static_cast<size_t>(in.target);
      return;
    }
    case Op::GET_YIELD_FROM_ITER: {
      // `yield from it` in a generator run to completion (nn.Module.named_modules): the
      // iterator is driven by SEND below, each of its items yielded in turn.
      EMBER_UNSUPPORTED(fr.yields != nullptr) << "yield from in a captured frame at " << location();
      nb::object v = materialized(pop(fr));
      EMBER_UNSUPPORTED(is_plain_value(v) || is_fresh(v))
          << "yield from a " << type_name_of(v) << " at " << location();
      st.push_back(PyIter_Check(v.ptr()) ? v : fresh(checked(PyObject_GetIter(v.ptr()))));
      return;
    }
    case Op::SEND: {
      // Only next(): what a generator run to completion sends back to its yield from is None.
      nb::object sent = pop(fr);
      nb::handle receiver = peek(fr);
      EMBER_UNSUPPORTED(sent.is_none() && fr.yields != nullptr && is_fresh(receiver) &&
                        PyIter_Check(receiver.ptr()))
          << "SEND to a " << type_name_of(receiver) << " at " << location();
      PyObject* next = PyIter_Next(receiver.ptr());
      if (next != nullptr) {
        st.push_back(nb::steal(next));
        return;
      }
      if (PyErr_Occurred()) throw nb::python_error();
#if PY_MINOR_VERSION == 11
      peek(fr) = nb::none();  // the receiver is replaced by its return value (None)
#else
      st.push_back(nb::none());  // END_SEND pops the receiver below it
#endif
      fr.pc = static_cast<size_t>(in.target);
      return;
    }
    case Op::END_SEND: {
      nb::object value = pop(fr);
      pop(fr);
      st.push_back(std::move(value));
      return;
    }
    case Op::JUMP:
    case Op::JUMP_FORWARD:
    case Op::JUMP_BACKWARD:
    case Op::JUMP_BACKWARD_NO_INTERRUPT:
    case Op::JUMP_NO_INTERRUPT:
      fr.pc = static_cast<size_t>(in.target);
      return;
    case Op::POP_JUMP_IF_TRUE:
    case Op::POP_JUMP_IF_FALSE: {
      nb::object v = pop(fr);
      if (truth(v) == (in.op == Op::POP_JUMP_IF_TRUE)) fr.pc = static_cast<size_t>(in.target);
      return;
    }
    case Op::POP_JUMP_IF_NONE:
    case Op::POP_JUMP_IF_NOT_NONE: {
      nb::object v = pop(fr);
      if (v.is_none() == (in.op == Op::POP_JUMP_IF_NONE)) fr.pc = static_cast<size_t>(in.target);
      return;
    }
#if PY_MINOR_VERSION == 11
    case Op::JUMP_IF_TRUE_OR_POP:
    case Op::JUMP_IF_FALSE_OR_POP: {
      bool t = truth(peek(fr));
      if (t == (in.op == Op::JUMP_IF_TRUE_OR_POP)) {
        fr.pc = static_cast<size_t>(in.target);
      } else {
        pop(fr);
      }
      return;
    }
#endif
#if PY_MINOR_VERSION >= 13
    case Op::TO_BOOL: {
      nb::object v = pop(fr);
      st.push_back(nb::borrow(truth(v) ? Py_True : Py_False));
      return;
    }
#endif
    case Op::IMPORT_NAME: {
      // `import m` / `from m import x` of a module that is already imported: no side effect.
      nb::object fromlist = pop(fr);
      nb::object level = pop(fr);
      PyObject* name = name_at(co, in.arg);
      EMBER_UNSUPPORTED(PyLong_AsLong(level.ptr()) == 0) << "a relative import at " << location();
      PyObject* modules = PyImport_GetModuleDict();
      PyObject* mod = PyDict_GetItemWithError(modules, name);
      EMBER_UNSUPPORTED(mod != nullptr) << "importing a module that is not imported yet ("
                                        << PyUnicode_AsUTF8(name) << ") at " << location();
      if (fromlist.is_none()) {
        // `import a.b` binds the top package.
        nb::object top = checked(
            PyImport_ImportModuleLevelObject(name, fr.globals.ptr(), nullptr, fromlist.ptr(), 0));
        st.push_back(top);
      } else {
        st.push_back(nb::borrow(mod));
      }
      return;
    }
    case Op::IMPORT_FROM: {
      nb::handle mod = peek(fr);
      st.push_back(checked(PyObject_GetAttr(mod.ptr(), name_at(co, in.arg))));
      return;
    }
    case Op::RETURN_GENERATOR:
      EMBER_UNSUPPORTED(fr.yields != nullptr) << "a generator frame at " << location();
      st.push_back(nb::none());
      return;
    case Op::YIELD_VALUE: {
      EMBER_UNSUPPORTED(fr.yields != nullptr) << "yield in a captured frame at " << location();
      fr.yields->push_back(pop(fr));
      st.push_back(nb::none());  // what send() would give back: next() sends None
      return;
    }
    case Op::MAKE_FUNCTION:
      st.push_back(make_function(fr, in));
      return;
    case Op::CALL: {
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
      nb::object kwnames = in.kwnames >= 0 ? const_at(co, in.kwnames) : nb::object();
      st.push_back(call_from(fr, callable, std::move(args), kwnames));
      return;
    }
    case Op::CALL_FUNCTION_EX: {
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
      st.push_back(call_from(fr, callable, std::move(args), kwnames));
      return;
    }
    default:
      if (step_data(fr, in) || step_exceptions(fr, in)) return;
      break;
  }
  EMBER_UNSUPPORTED(false) << "the instruction " << bytecode::op_name(in.op) << " at "
                           << location();
}

}  // namespace ember::capture
