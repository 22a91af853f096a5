/// \file
/// Where the interpreter may take a graph break (top frame and nested), and the frames' state
/// it records when it stops there (graph_break.h turns that state into code).
#include "capture/interp/interpreter.h"
#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;
using bytecode::Op;

bool breakable(const Interpreter::Frame& fr, const Instr& in, bool cells_captured, bool in_withs) {
  if (in.handler >= 0 && !in_withs) return false;  // inside a try block or a with block
  if (fr.code->co_nfreevars > 0 || cells_captured) return false;
  switch (in.op) {
    case Op::CALL:
    case Op::CALL_FUNCTION_EX:
    case Op::POP_JUMP_IF_TRUE:
    case Op::POP_JUMP_IF_FALSE:
    case Op::STORE_ATTR:
    case Op::STORE_SUBSCR:
    case Op::DELETE_SUBSCR:
    case Op::BINARY_OP:
    case Op::COMPARE_OP:
    case Op::BINARY_SUBSCR:
    case Op::LOAD_ATTR:
    case Op::GET_ITER:
      return true;
    default:
      return false;
  }
}

bool is_cell_slot(PyCodeObject* co, int i) {
  constexpr unsigned char kCell = 0x40;  // CO_FAST_CELL (internal/pycore_code.h, 3.11-3.13)
  return (static_cast<unsigned char>(PyBytes_AS_STRING(co->co_localspluskinds)[i]) & kCell) != 0;
}

bool Interpreter::cells_captured(const Frame& fr) const {
  // A function the frame made that closes over one of its cells would keep the old cell when
  // the resume function makes new ones.
  for (PyObject* o : fresh_) {
    if (!PyFunction_Check(o) || PyFunction_GET_CLOSURE(o) == nullptr) continue;
    PyObject* closure = PyFunction_GET_CLOSURE(o);
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(closure); ++k) {
      for (size_t j = 0; j < fr.locals.size(); ++j) {
        if (fr.locals[j].ptr() == PyTuple_GET_ITEM(closure, k)) return true;
      }
    }
  }
  return false;
}

bool Interpreter::nestable(const Frame& fr, const Instr& in) const {
  if (fr.top || frames_.empty() || frames_.back() != &fr || fr.yields != nullptr) return false;
  // Inside with blocks, in any of the frames: Note [Graph breaks inside with blocks].
  const bool in_withs = in.handler >= 0 && withs_resumable(fr, in);
  if (!breakable(fr, in, fr.code->co_ncellvars > 0 && cells_captured(fr), in_withs)) return false;
  for (size_t i = frames_.size() - 1; i-- > 0;) {
    const Frame& caller = *frames_[i];
    if (!frames_[i + 1]->passthrough || caller.yields != nullptr || caller.pc == 0) return false;
    const Instr& call = caller.bc->instrs[caller.pc - 1];
    if (call.op != Op::CALL && call.op != Op::CALL_FUNCTION_EX) return false;
    if (call.handler >= 0 && !withs_resumable(caller, call)) return false;
    if (caller.code->co_nfreevars > 0) return false;
    if (caller.code->co_ncellvars > 0 && cells_captured(caller)) return false;
  }
  return true;
}

bool Interpreter::withs_resumable(const Frame& fr, const Instr& in) const {
  // Note [Graph breaks inside with blocks]. CPython's with block: its body is covered by an
  // entry to PUSH_EXC_INFO; WITH_EXCEPT_START whose depth keeps the block's __exit__ on top;
  // that handler's own instructions by a cleanup entry (COPY 3; POP_EXCEPT; RERAISE 1), whose
  // instructions are covered by the enclosing block's entry. Walk that chain out: every link
  // must be a with block whose __exit__ the interpreter pushed and can make again, and every
  // such __exit__ on the stack a link.
  // Not in torch's own frames: a wrapper such as DistributedDataParallel.forward runs its
  // library calls for real at capture time (the reducer's preparation, buffer broadcasts), which
  // a graph cannot replay; it keeps running eagerly, as when no break inside a block was taken.
  if (is_library_code(fr.code)) return false;
  const auto& instrs = fr.bc->instrs;
  const auto& handlers = fr.bc->handlers;
  size_t links = 0;
  for (int h = in.handler; h >= 0;) {
    const bytecode::Handler& entry = handlers[static_cast<size_t>(h)];
    const auto target = static_cast<size_t>(entry.target);
    if (!entry.lasti || target + 1 >= instrs.size() || instrs[target].op != Op::PUSH_EXC_INFO ||
        instrs[target + 1].op != Op::WITH_EXCEPT_START) {
      return false;
    }
    if (entry.depth < 1 || static_cast<size_t>(entry.depth) > fr.stack.size()) return false;
    if (!reentry_factory(fr.stack[static_cast<size_t>(entry.depth - 1)]).is_valid()) return false;
    ++links;
    const int cleanup = instrs[target].handler;
    if (cleanup < 0) return false;
    h = instrs[static_cast<size_t>(handlers[static_cast<size_t>(cleanup)].target)].handler;
  }
  size_t exits = 0;
  for (const nb::object& v : fr.stack) exits += v.is_valid() && reentry_factory(v).is_valid();
  return links == exits;
}

bool Interpreter::grad_of_withs() const {
  bool grad = entry_grad_;
  for (const Frame* fr : frames_) {
    for (const nb::object& v : fr->stack) {
      if (!v.is_valid()) continue;
      auto it = reentries_.find(v.ptr());
      if (it != reentries_.end() && it->second.grad >= 0) grad = it->second.grad == 1;
    }
  }
  return grad;
}

std::vector<nb::object> Interpreter::reentries_of(const Frame& fr) const {
  std::vector<nb::object> out(fr.stack.size());
  for (size_t i = 0; i < fr.stack.size(); ++i) {
    nb::handle factory = fr.stack[i].is_valid() ? reentry_factory(fr.stack[i]) : nb::handle();
    if (factory.is_valid()) out[i] = nb::borrow(factory);
  }
  return out;
}

std::vector<nb::object> stopped_locals(const Interpreter::Frame& fr) {
  std::vector<nb::object> locals = fr.locals;
  for (size_t j = 0; j < locals.size(); ++j) {
    nb::object& v = locals[j];
    if (is_cell_slot(fr.code, static_cast<int>(j)) && v.is_valid() && PyCell_Check(v.ptr())) {
      PyObject* contents = PyCell_GET(v.ptr());
      v = contents != nullptr ? nb::borrow(contents) : nb::object();
    }
  }
  return locals;
}

void Interpreter::record_nested_stop() {
  EMBER_INTERNAL_ASSERT(frames_.size() > 1) << "a nested stop in the top frame";
  const Frame& top = *frames_.front();
  stop_.pc = static_cast<int>(top.pc) - 1;
  stop_.stack = top.stack;
  stop_.locals = stopped_locals(top);
  stop_.inner.clear();
  stop_.reenter = reentries_of(top);
  for (size_t i = 1; i < frames_.size(); ++i) {
    const Frame& fr = *frames_[i];
    FrameState s;
    s.code = fr.code_obj;
    s.globals = fr.globals;
    s.pc = static_cast<int>(fr.pc) - (i + 1 < frames_.size() ? 1 : 0);
    s.stack = fr.stack;
    s.locals = stopped_locals(fr);
    s.reenter = reentries_of(fr);
    stop_.inner.push_back(std::move(s));
  }
}

}  // namespace ember::capture
