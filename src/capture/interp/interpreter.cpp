/// \file
/// The interpreter's loop: runs a frame's instructions through their handlers (op_table.cpp),
/// turning what a handler cannot capture into a graph break where one may be taken.
#include "capture/interp/interpreter.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>

#include <mutex>
#include <unordered_map>

#include "capture/bytecode/decoder.h"
#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;

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

// Note [A comprehension's iterator]
// On 3.11 a list, set or dict comprehension is a function of one argument, `.0`: the iterator
// its caller made with GET_ITER, used by nobody else. When the caller runs eagerly (a graph
// break above), the comprehension's frame is compiled alone, and that argument is an iterator
// from outside: FOR_ITER over it would consume it at capture time. For the iterators whose rest
// can be read without advancing them (list, tuple, range and dict iterators, through
// __reduce__), the frame iterates over that rest instead, a list read through an IterRest
// source and guarded like any list argument; the compiled frame leaves the caller's iterator
// as it is, which nothing reads after the comprehension.
nb::object Interpreter::comprehension_iterator(PyCodeObject* co, int slot, PyObject* v) {
  std::string_view name = PyUnicode_AsUTF8(co->co_name);
  PyObject* arg = local_name(co, slot);
  if (slot != 0 || !(name == "<listcomp>" || name == "<setcomp>" || name == "<dictcomp>") ||
      arg == nullptr || PyUnicode_CompareWithASCIIString(arg, ".0") != 0) {
    return {};
  }
  nb::object rest = nb::steal(iterator_rest(v));
  if (!rest.is_valid()) {
    PyErr_Clear();
    return {};
  }
  nb::object list = wrap(rest, sources_.iter_rest(sources_.local(slot, arg)));
  return fresh(checked(PyObject_GetIter(list.ptr())));
}

nb::object Interpreter::run(const FrameView& f, int stop_at, int64_t stop_count) {
  stop_at_ = stop_at;
  stop_count_ = stop_count;
  entry_grad_ = at::GradMode::is_enabled();
  // With blocks change grad mode, autocast and the torch-function mode stack for real; an
  // interrupted capture must not leave them changed. Autocast's cache of casts may hold tracer
  // tensors afterwards: emptied.
  struct RestoreGlobalState {
    bool grad = at::GradMode::is_enabled();
    bool autocast_cpu = at::autocast::is_autocast_enabled(at::kCPU);
    bool autocast_cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    at::ScalarType dtype_cpu = at::autocast::get_autocast_dtype(at::kCPU);
    at::ScalarType dtype_cuda = at::autocast::get_autocast_dtype(at::kCUDA);
    bool cache = at::autocast::is_autocast_cache_enabled();
    int nesting = at::autocast::increment_nesting() - 1;
    int64_t modes = at::impl::PythonTorchFunctionTLS::stack_len();
    RestoreGlobalState() { at::autocast::decrement_nesting(); }
    ~RestoreGlobalState() {
      // Torch-function modes a with block entered (Note [torch's own torch-function modes]).
      while (at::impl::PythonTorchFunctionTLS::stack_len() > modes) {
        at::impl::PythonTorchFunctionTLS::pop_stack();
      }
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
    if (nb::object it = comprehension_iterator(co, i, v); it.is_valid()) {
      fr.locals[static_cast<size_t>(i)] = std::move(it);
      continue;
    }
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
  StepResult out;
  while (!out.returned) {
    EMBER_INTERNAL_ASSERT(fr.pc < instrs.size()) << "ran off the end of the bytecode";
    if (fr.top && static_cast<int>(fr.pc) == stop_at_) {
      stop_.pc = stop_at_;
      stop_.stack = fr.stack;
      stop_.locals = stopped_locals(fr);
      stop_.reenter = reentries_of(fr);
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
      step(fr, in, out);
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
    // under the caller's (the segment does not set it); the with blocks a top-frame break
    // enters again set theirs (Note [Graph breaks inside with blocks]).
    if (!fr.top && at::GradMode::is_enabled() == grad_of_withs()) {
      throw GraphBreak(reason, static_cast<int>(pc), data_dependent, count);
    }
    if (!fr.top) {
      if (data_dependent) throw DataDependentError(reason);
      throw Unsupported(reason);
    }
    const bool in_withs = in.handler >= 0 && withs_resumable(fr, in);
    const bool grad_as_resumed =
        at::GradMode::is_enabled() == (in_withs ? grad_of_withs() : entry_grad_);
    if (grad_as_resumed &&
        breakable(fr, in, fr.code->co_ncellvars > 0 && cells_captured(fr), in_withs)) {
      throw GraphBreak(reason, static_cast<int>(pc), data_dependent);
    }
    if (data_dependent) throw DataDependentError(reason);
    throw Unsupported(reason);
  }
  return std::move(out.value);
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

}  // namespace ember::capture
