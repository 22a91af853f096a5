"""The capture interpreter's op table (src/capture/interp/op_table.cpp): one entry per op of
src/capture/bytecode/ops.def, and the ops with a handler are exactly those the interpreter's
former `switch` handled (written down once, below); every other op is unsupported."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import ember

MINOR = sys.version_info.minor

# The ops Interpreter::step's switch (with step_data and step_exceptions) handled before the
# table replaced it, per CPython minor version.
_ALWAYS = {
    # no effect, the stack
    "NOP", "RESUME", "CACHE", "EXTENDED_ARG", "PRECALL", "KW_NAMES",
    "POP_TOP", "PUSH_NULL", "COPY", "SWAP", "END_FOR",
    # loads, stores, imports
    "LOAD_CONST", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "STORE_FAST",
    "DELETE_FAST", "MAKE_CELL", "COPY_FREE_VARS", "LOAD_CLOSURE", "LOAD_DEREF", "STORE_DEREF",
    "LOAD_GLOBAL", "LOAD_ATTR", "LOAD_METHOD", "STORE_ATTR", "BINARY_SUBSCR", "STORE_SUBSCR",
    "DELETE_SUBSCR", "IMPORT_NAME", "IMPORT_FROM",
    # operators
    "BINARY_OP", "UNARY_NEGATIVE", "UNARY_INVERT", "UNARY_NOT", "COMPARE_OP", "IS_OP",
    "CONTAINS_OP",
    # control flow, loops, returns, generators
    "RETURN_VALUE", "GET_ITER", "FOR_ITER", "GET_YIELD_FROM_ITER", "SEND", "END_SEND", "JUMP",
    "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_NO_INTERRUPT",
    "POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
    "RETURN_GENERATOR", "YIELD_VALUE",
    # calls
    "MAKE_FUNCTION", "CALL", "CALL_FUNCTION_EX",
    # values (step_data)
    "BUILD_SLICE", "BUILD_TUPLE", "BUILD_LIST", "BUILD_SET", "BUILD_MAP", "BUILD_CONST_KEY_MAP",
    "BUILD_STRING", "LIST_APPEND", "SET_ADD", "LIST_EXTEND", "SET_UPDATE", "DICT_UPDATE",
    "DICT_MERGE", "MAP_ADD", "UNPACK_SEQUENCE", "FORMAT_VALUE", "UNPACK_EX",
    # exceptions and with blocks (step_exceptions)
    "PUSH_EXC_INFO", "POP_EXCEPT", "CHECK_EXC_MATCH", "RERAISE", "RAISE_VARARGS",
    "LOAD_ASSERTION_ERROR", "BEFORE_WITH", "WITH_EXCEPT_START",
}
_BY_MINOR = {
    11: {"UNARY_POSITIVE", "JUMP_IF_TRUE_OR_POP", "JUMP_IF_FALSE_OR_POP", "LIST_TO_TUPLE"},
    12: {"RETURN_CONST", "LOAD_SUPER_ATTR", "CALL_INTRINSIC_1", "BINARY_SLICE", "STORE_SLICE"},
    13: {"RETURN_CONST", "LOAD_SUPER_ATTR", "CALL_INTRINSIC_1", "BINARY_SLICE", "STORE_SLICE",
         "TO_BOOL"},
}
HANDLED = _ALWAYS | _BY_MINOR[MINOR]


def ops_def() -> list[str]:
    path = Path(__file__).resolve().parents[3] / "src" / "capture" / "bytecode" / "ops.def"
    return re.findall(r"^EMBER_BYTECODE_OP\((\w+)\)$", path.read_text(), re.MULTILINE)


def test_handled_ops_are_those_the_switch_handled():
    handled = ember._C.capture_handled_ops()
    assert len(handled) == len(set(handled))
    assert set(handled) == HANDLED


def test_table_follows_ops_def():
    ops = ops_def()
    assert len(ops) > 150 and len(ops) == len(set(ops))
    handled = ember._C.capture_handled_ops()
    assert set(handled) <= set(ops)
    assert handled == [op for op in ops if op in set(handled)]  # in ops.def order


def test_unsupported_op_is_a_graph_break_with_its_name():
    # STORE_GLOBAL has no handler: the unsupported entry raises, as the switch's default did.
    def f(x):
        global _ember_op_table_probe
        _ember_op_table_probe = 1
        return x + 1

    c = ember.compile(f, fullgraph=True)
    with pytest.raises(ember.Unsupported, match="the instruction STORE_GLOBAL at"):
        c(torch.randn(3))


def test_call_kinds_in_policy_order():
    # The call policy (src/capture/interp/call_policy.cpp): the first kind that matches a
    # callable handles its call. The order is the policy's (an nn.Module is matched before it
    # is seen as an object with __call__, a bound method before a function, ...).
    assert ember._C.capture_call_kinds() == [
        "higher-order op",
        "torch.utils.checkpoint",
        "torch.vmap wrapper",
        "nn.Module",
        "bound method",
        "Python function",
        "C function",
        "class",
        "torch.jit.script function",
        "functools.lru_cache wrapper",
        "functools.partial",
        "C descriptor or torch op",
        "numpy ufunc",
    ]
