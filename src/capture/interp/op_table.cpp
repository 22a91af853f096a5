/// \file
/// The interpreter's dispatch: a table with one entry per Op of bytecode/ops.def, each the
/// handler of that op or op_unsupported. The handlers live in files by concept:
/// interpreter_flow.cpp (the stack, jumps, loops, returns, generators), interpreter_operators.cpp,
/// interpreter_loads.cpp, interpreter_stores.cpp, interpreter_data.cpp (building and taking apart
/// values), interpreter_exceptions.cpp (raise, except, with) and call_policy.cpp (calls).
#include <array>
#include <string>
#include <vector>

#include "capture/interp/interpreter_internal.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;
using bytecode::Op;

const std::array<Interpreter::OpHandler, bytecode::kNumOps>& Interpreter::op_table() {
  static constexpr std::array<OpHandler, bytecode::kNumOps> table = [] {
    std::array<OpHandler, bytecode::kNumOps> t{};
    // Every op of ops.def starts unsupported; `handle` gives an op its handler, once.
#define EMBER_BYTECODE_OP(name) t[static_cast<size_t>(Op::name)] = &Interpreter::op_unsupported;
#include "capture/bytecode/ops.def"
#undef EMBER_BYTECODE_OP
    std::array<bool, bytecode::kNumOps> handled{};
    auto handle = [&](Op op, OpHandler h) {
      const size_t i = static_cast<size_t>(op);
      if (handled[i]) throw "an op is given two handlers";  // not a constant: fails to compile
      handled[i] = true;
      t[i] = h;
    };
    // interpreter_flow.cpp and here
    for (Op op : {Op::NOP, Op::RESUME, Op::CACHE, Op::EXTENDED_ARG, Op::PRECALL, Op::KW_NAMES}) {
      handle(op, &Interpreter::op_nothing);
    }
    handle(Op::POP_TOP, &Interpreter::op_POP_TOP);
    handle(Op::PUSH_NULL, &Interpreter::op_PUSH_NULL);
    handle(Op::COPY, &Interpreter::op_COPY);
    handle(Op::SWAP, &Interpreter::op_SWAP);
    handle(Op::RETURN_VALUE, &Interpreter::op_RETURN_VALUE);
#if PY_MINOR_VERSION >= 12
    handle(Op::RETURN_CONST, &Interpreter::op_RETURN_CONST);
#endif
    for (Op op : {Op::JUMP, Op::JUMP_FORWARD, Op::JUMP_BACKWARD, Op::JUMP_BACKWARD_NO_INTERRUPT,
                  Op::JUMP_NO_INTERRUPT}) {
      handle(op, &Interpreter::op_jump);
    }
    handle(Op::POP_JUMP_IF_TRUE, &Interpreter::op_pop_jump_if_bool);
    handle(Op::POP_JUMP_IF_FALSE, &Interpreter::op_pop_jump_if_bool);
    handle(Op::POP_JUMP_IF_NONE, &Interpreter::op_pop_jump_if_none);
    handle(Op::POP_JUMP_IF_NOT_NONE, &Interpreter::op_pop_jump_if_none);
#if PY_MINOR_VERSION == 11
    handle(Op::JUMP_IF_TRUE_OR_POP, &Interpreter::op_jump_if_or_pop);
    handle(Op::JUMP_IF_FALSE_OR_POP, &Interpreter::op_jump_if_or_pop);
#endif
#if PY_MINOR_VERSION >= 13
    handle(Op::TO_BOOL, &Interpreter::op_TO_BOOL);
#endif
    handle(Op::GET_ITER, &Interpreter::op_GET_ITER);
    handle(Op::FOR_ITER, &Interpreter::op_FOR_ITER);
    handle(Op::END_FOR, &Interpreter::op_END_FOR);
    handle(Op::GET_YIELD_FROM_ITER, &Interpreter::op_GET_YIELD_FROM_ITER);
    handle(Op::SEND, &Interpreter::op_SEND);
    handle(Op::END_SEND, &Interpreter::op_END_SEND);
    handle(Op::RETURN_GENERATOR, &Interpreter::op_RETURN_GENERATOR);
    handle(Op::YIELD_VALUE, &Interpreter::op_YIELD_VALUE);
    // interpreter_operators.cpp
    handle(Op::BINARY_OP, &Interpreter::op_BINARY_OP);
    handle(Op::UNARY_NEGATIVE, &Interpreter::op_unary);
    handle(Op::UNARY_INVERT, &Interpreter::op_unary);
    handle(Op::UNARY_NOT, &Interpreter::op_unary);
#if PY_MINOR_VERSION == 11
    handle(Op::UNARY_POSITIVE, &Interpreter::op_unary);
#else
    handle(Op::CALL_INTRINSIC_1, &Interpreter::op_CALL_INTRINSIC_1);
#endif
    handle(Op::COMPARE_OP, &Interpreter::op_COMPARE_OP);
    handle(Op::IS_OP, &Interpreter::op_IS_OP);
    handle(Op::CONTAINS_OP, &Interpreter::op_CONTAINS_OP);
    // interpreter_loads.cpp
    handle(Op::LOAD_CONST, &Interpreter::op_LOAD_CONST);
    handle(Op::LOAD_FAST, &Interpreter::op_load_fast);
    handle(Op::LOAD_FAST_CHECK, &Interpreter::op_load_fast);
    handle(Op::LOAD_FAST_AND_CLEAR, &Interpreter::op_LOAD_FAST_AND_CLEAR);
    handle(Op::MAKE_CELL, &Interpreter::op_MAKE_CELL);
    handle(Op::COPY_FREE_VARS, &Interpreter::op_COPY_FREE_VARS);
    handle(Op::LOAD_CLOSURE, &Interpreter::op_LOAD_CLOSURE);
    handle(Op::LOAD_DEREF, &Interpreter::op_LOAD_DEREF);
    handle(Op::LOAD_GLOBAL, &Interpreter::op_LOAD_GLOBAL);
    handle(Op::LOAD_ATTR, &Interpreter::op_LOAD_ATTR);
    handle(Op::LOAD_METHOD, &Interpreter::op_LOAD_METHOD);
#if PY_MINOR_VERSION >= 12
    handle(Op::LOAD_SUPER_ATTR, &Interpreter::op_LOAD_SUPER_ATTR);
#endif
    handle(Op::BINARY_SUBSCR, &Interpreter::op_BINARY_SUBSCR);
#if PY_MINOR_VERSION >= 12
    handle(Op::BINARY_SLICE, &Interpreter::op_BINARY_SLICE);
#endif
    handle(Op::IMPORT_NAME, &Interpreter::op_IMPORT_NAME);
    handle(Op::IMPORT_FROM, &Interpreter::op_IMPORT_FROM);
    // interpreter_stores.cpp
    handle(Op::STORE_FAST, &Interpreter::op_STORE_FAST);
    handle(Op::DELETE_FAST, &Interpreter::op_DELETE_FAST);
    handle(Op::STORE_DEREF, &Interpreter::op_STORE_DEREF);
    handle(Op::STORE_ATTR, &Interpreter::op_STORE_ATTR);
    handle(Op::STORE_SUBSCR, &Interpreter::op_STORE_SUBSCR);
#if PY_MINOR_VERSION >= 12
    handle(Op::STORE_SLICE, &Interpreter::op_STORE_SLICE);
#endif
    handle(Op::DELETE_SUBSCR, &Interpreter::op_DELETE_SUBSCR);
    // interpreter_data.cpp
    handle(Op::BUILD_SLICE, &Interpreter::op_BUILD_SLICE);
    for (Op op : {Op::BUILD_TUPLE, Op::BUILD_LIST, Op::BUILD_SET}) {
      handle(op, &Interpreter::op_build_sequence);
    }
    handle(Op::BUILD_MAP, &Interpreter::op_BUILD_MAP);
    handle(Op::BUILD_CONST_KEY_MAP, &Interpreter::op_BUILD_CONST_KEY_MAP);
    handle(Op::BUILD_STRING, &Interpreter::op_BUILD_STRING);
    handle(Op::LIST_APPEND, &Interpreter::op_LIST_APPEND);
    handle(Op::SET_ADD, &Interpreter::op_SET_ADD);
    handle(Op::LIST_EXTEND, &Interpreter::op_LIST_EXTEND);
    handle(Op::SET_UPDATE, &Interpreter::op_SET_UPDATE);
    handle(Op::DICT_UPDATE, &Interpreter::op_dict_update);
    handle(Op::DICT_MERGE, &Interpreter::op_dict_update);
    handle(Op::MAP_ADD, &Interpreter::op_MAP_ADD);
#if PY_MINOR_VERSION == 11
    handle(Op::LIST_TO_TUPLE, &Interpreter::op_LIST_TO_TUPLE);
#endif
    handle(Op::UNPACK_SEQUENCE, &Interpreter::op_UNPACK_SEQUENCE);
    handle(Op::UNPACK_EX, &Interpreter::op_UNPACK_EX);
    handle(Op::FORMAT_VALUE, &Interpreter::op_FORMAT_VALUE);
    // interpreter_exceptions.cpp
    handle(Op::PUSH_EXC_INFO, &Interpreter::op_PUSH_EXC_INFO);
    handle(Op::POP_EXCEPT, &Interpreter::op_POP_EXCEPT);
    handle(Op::CHECK_EXC_MATCH, &Interpreter::op_CHECK_EXC_MATCH);
    handle(Op::RERAISE, &Interpreter::op_RERAISE);
    handle(Op::RAISE_VARARGS, &Interpreter::op_RAISE_VARARGS);
    handle(Op::LOAD_ASSERTION_ERROR, &Interpreter::op_LOAD_ASSERTION_ERROR);
    handle(Op::BEFORE_WITH, &Interpreter::op_BEFORE_WITH);
    handle(Op::WITH_EXCEPT_START, &Interpreter::op_WITH_EXCEPT_START);
    // call_policy.cpp
    handle(Op::CALL, &Interpreter::op_CALL);
    handle(Op::CALL_FUNCTION_EX, &Interpreter::op_CALL_FUNCTION_EX);
    handle(Op::MAKE_FUNCTION, &Interpreter::op_MAKE_FUNCTION);
    return t;
  }();
  static_assert(table.size() == bytecode::kNumOps, "one entry per op of ops.def");
  return table;
}

void Interpreter::step(Frame& fr, const Instr& in, StepResult& out) {
  (this->*op_table()[static_cast<size_t>(in.op)])(fr, in, out);
}

std::vector<std::string> Interpreter::handled_ops() {
  std::vector<std::string> out;
  const auto& table = op_table();
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i] != &Interpreter::op_unsupported) {
      out.emplace_back(bytecode::op_name(static_cast<Op>(i)));
    }
  }
  return out;
}

void Interpreter::op_unsupported(Frame&, const Instr& in, StepResult&) {
  EMBER_UNSUPPORTED(false) << "the instruction " << bytecode::op_name(in.op) << " at "
                           << location();
}

void Interpreter::op_nothing(Frame&, const Instr&, StepResult&) {}

}  // namespace ember::capture
