#include "capture/breaks/with_reentry.h"

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;
using bytecode::Op;

/// The names of the locals that keep `n` re-entered with blocks' __exit__s, appended to `names`.
void add_exit_names(std::vector<std::string>& names, size_t n) {
  for (size_t j = 0; j < n; ++j) names.push_back("__ember_exit" + std::to_string(j));
}

/// Adds the entries of `withs` (outermost first) to out.handlers; their targets come with
/// emit_with_handlers.
void add_with_entries(bytecode::Code& out, std::vector<ReenteredWith>& withs) {
  for (ReenteredWith& w : withs) {
    w.handler = static_cast<int>(out.handlers.size());
    out.handlers.push_back(bytecode::Handler{-1, w.position + 1, true});
    w.cleanup = static_cast<int>(out.handlers.size());
    out.handlers.push_back(bytecode::Handler{-1, w.position + 3, true});
  }
}

/// The handler code of `withs`, as CPython's with statement has it, after the last tail:
///   H: PUSH_EXC_INFO; WITH_EXCEPT_START; POP_TOP; RERAISE 2     (covered by C)
///   C: COPY 3; POP_EXCEPT; RERAISE 1                            (covered by the outer H)
/// The managers the break's code enters (grad modes, autocast, nullcontext) never suppress an
/// exception, so H always re-raises.
void emit_with_handlers(bytecode::Code& out, const std::vector<ReenteredWith>& withs,
                        const bytecode::Position& pos) {
  Writer emit{out, pos};
  for (size_t j = 0; j < withs.size(); ++j) {
    const ReenteredWith& w = withs[j];
    out.handlers[static_cast<size_t>(w.handler)].target = static_cast<int>(out.instrs.size());
    emit.protect = w.cleanup;
    emit(Op::PUSH_EXC_INFO);
    emit(Op::WITH_EXCEPT_START);
    emit(Op::POP_TOP);
    emit(Op::RERAISE, 2);
    out.handlers[static_cast<size_t>(w.cleanup)].target = static_cast<int>(out.instrs.size());
    emit.protect = j > 0 ? withs[j - 1].handler : -1;
    emit(Op::COPY, 3);
    emit(Op::POP_EXCEPT);
    emit(Op::RERAISE, 1);
  }
}

/// The with blocks whose __exit__s `reenter` marks on a stack (outermost first), at stack
/// positions `base + i`, their __exit__s kept in the locals from `first_local` on; their
/// exception-table entries added to `out`.
std::vector<ReenteredWith> reentered_withs(bytecode::Code& out,
                                           const std::vector<nb::object>& reenter, int base,
                                           int first_local) {
  std::vector<ReenteredWith> withs;
  for (size_t i = 0; i < reenter.size(); ++i) {
    if (!reenter[i].is_valid()) continue;
    withs.push_back(
        ReenteredWith{base + static_cast<int>(i), first_local + static_cast<int>(withs.size())});
  }
  add_with_entries(out, withs);
  return withs;
}

/// Enters with block `w` again: a new manager from `factory`, its __exit__ left on the stack
/// (and stored in w.exit_local); the instructions from then on are covered by w's entry
/// (emit.protect).
void emit_reenter(Writer& emit, Consts& consts, nb::handle factory, const ReenteredWith& w) {
  if (kNullBeforeCallable) emit(Op::PUSH_NULL);
  emit(Op::LOAD_CONST, consts.add(factory));
  if (!kNullBeforeCallable) emit(Op::PUSH_NULL);
  emit(Op::CALL, 0);
  emit(Op::BEFORE_WITH);
  emit.protect = w.handler;
  emit(Op::POP_TOP);
  emit(Op::COPY, 1);
  emit(Op::STORE_FAST, w.exit_local);
}

/// Exits with block `w` (its __exit__(None, None, None), from its local), covered by the entry
/// of the block around it (`outer`, or none): emit.protect is that from then on.
void emit_exit(Writer& emit, Consts& consts, const ReenteredWith& w, const ReenteredWith* outer) {
  emit.protect = outer != nullptr ? outer->handler : -1;
  if (kNullBeforeCallable) emit(Op::PUSH_NULL);
  emit(Op::LOAD_FAST, w.exit_local);
  if (!kNullBeforeCallable) emit(Op::PUSH_NULL);
  const int none = consts.add(nb::none());
  for (int a = 0; a < 3; ++a) emit(Op::LOAD_CONST, none);
  emit(Op::CALL, 3);
  emit(Op::POP_TOP);
}

}  // namespace ember::capture
