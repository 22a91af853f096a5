"""The bytecode layer of capture: decoder, printer, assembler (src/capture/bytecode).

Runs with unittest or pytest, on every supported CPython (scripts/test_capture_core.sh PYTHON).
The decoder is checked against an independent model built from `dis`; the assembler by round
trips of stdlib code objects (bytes, tables and stack size identical) and by running round-tripped
functions.
"""

from __future__ import annotations

import dis
import importlib
import os
import pathlib
import sys
import types
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import programs  # noqa: E402
from _load import cc  # noqa: E402

MINOR = sys.version_info.minor
GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"
STDLIB_MODULES = [
    "json.decoder",
    "json.encoder",
    "textwrap",
    "collections",
    "dataclasses",
    "argparse",
    "ast",
    "inspect",
    "functools",
    "typing",
    "asyncio.base_events",
    "re._parser" if MINOR >= 11 else "sre_parse",
    "contextlib",
    "pathlib",
]


def code_objects(co):
    """`co` and every code object nested in its constants."""
    yield co
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            yield from code_objects(c)


def stdlib_codes():
    out = []
    for name in STDLIB_MODULES:
        mod = importlib.import_module(name)
        src = pathlib.Path(mod.__file__).read_text(encoding="utf-8")
        out.extend(code_objects(compile(src, mod.__file__, "exec")))
    return out


def generated_codes():
    """Code that needs EXTENDED_ARG: many constants, names and locals, long jumps."""
    lines = ["def big(x):", "    t = 0"]
    for i in range(300):
        lines.append(f"    v{i} = x + {i * 1.5!r}")
        lines.append(f"    if v{i} > {i}:\n        t += g{i % 40}(v{i}, k{i % 3}=v{i})")
    lines.append("    for i in range(3):\n        t += i\n    return t")
    src = "\n".join(lines)
    return list(code_objects(compile(src, "<generated>", "exec")))


_CODES = None


def all_codes():
    global _CODES
    if _CODES is None:
        program_codes = []
        src = pathlib.Path(programs.__file__).read_text(encoding="utf-8")
        program_codes = list(code_objects(compile(src, programs.__file__, "exec")))
        _CODES = program_codes + generated_codes() + stdlib_codes()
    return _CODES


# ---- an independent model of the decoder's output, built from dis --------------------------------

_DIRECTIONLESS = {
    "JUMP_FORWARD": "JUMP",
    "JUMP_BACKWARD": "JUMP",
    "JUMP_BACKWARD_NO_INTERRUPT": "JUMP_NO_INTERRUPT",
}


def _norm_name(name):
    for prefix in ("POP_JUMP_FORWARD_IF_", "POP_JUMP_BACKWARD_IF_"):
        if name.startswith(prefix):
            return "POP_JUMP_IF_" + name[len(prefix) :]
    return _DIRECTIONLESS.get(name, name)


def _position(p):
    return tuple(-1 if v is None else v for v in (p.lineno, p.end_lineno, p.col_offset, p.end_col_offset))


def expected_instructions(co):
    """(op, arg, flags, kwnames, target, offset, positions) per instruction, from dis."""
    out, index_of, pending, jumps = [], {}, [], []
    kwnames, kw_start = -1, None
    ext_start = None
    for ins in dis.get_instructions(co):
        name = ins.opname
        if name == "EXTENDED_ARG":
            ext_start = ins.offset if ext_start is None else ext_start
            continue
        start = ins.offset if ext_start is None else ext_start
        ext_start = None
        if name == "KW_NAMES":
            kwnames = ins.arg
            pending.append(start)
            continue
        if name == "PRECALL":
            pending.append(start)
            continue
        for s in pending + [start]:
            index_of[s] = len(out)
        pending = []
        arg = ins.arg or 0
        flags, kw = 0, -1
        if name == "CALL":
            kw, kwnames = kwnames, -1
        op = _norm_name(name)
        if ins.opcode in dis.hasjrel:
            jumps.append((len(out), ins.argval))
            arg = 0
        elif name == "LOAD_GLOBAL":
            arg, flags = arg >> 1, arg & 1
        elif name == "LOAD_ATTR" and MINOR >= 12:
            if arg & 1:
                op = "LOAD_METHOD"
            arg >>= 1
        elif name == "COMPARE_OP" and MINOR >= 12:
            bits = 4 if MINOR == 12 else 5
            arg, flags = arg >> bits, arg & ((1 << bits) - 1)
        elif name == "LOAD_SUPER_ATTR":
            arg, flags = arg >> 2, arg & 3
        pos = _position(ins.positions)
        if name in ("LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"):
            first, second = name.split("_")[0], name.split("_")[2]
            out.append([f"{first}_FAST", arg >> 4, 0, -1, -1, start // 2, pos])
            out.append([f"{second}_FAST", arg & 15, 0, -1, -1, start // 2, pos])
            continue
        out.append([op, arg, flags, kw, -1, start // 2, pos])
    for i, target in jumps:
        out[i][4] = index_of[target]
    return out, index_of


def expected_handlers(co, index_of):
    """Per decoded instruction: (target index, depth, lasti) of its exception entry, or None."""
    entries = dis._parse_exception_table(co)

    def at(offset):
        for e in entries:
            if e.start <= offset < e.end:
                return (index_of[e.target], e.depth, e.lasti)
        return None

    return at


def decoded(co):
    handlers = cc.handlers(co)
    out = []
    for (op, arg, flags, kw, target, handler, offset, _line), pos in zip(cc.instructions(co), cc.positions(co)):
        h = None if handler < 0 else tuple(handlers[handler])
        out.append((op, arg, flags, kw, target, offset, tuple(pos), h))
    return out


class DecoderTest(unittest.TestCase):
    def test_opcode_tables_match_the_interpreter(self):
        self.assertEqual(cc.bytecode_python_minor(), MINOR)

    def test_matches_dis_on_stdlib_and_programs(self):
        codes = all_codes()
        self.assertGreater(len(codes), 1000)
        for co in codes:
            expected, index_of = expected_instructions(co)
            handler_at = expected_handlers(co, index_of)
            got = decoded(co)
            self.assertEqual(len(got), len(expected), co)
            for g, e in zip(got, expected):
                want = (*e[:5], e[5], e[6], handler_at(e[5] * 2))
                self.assertEqual(g, want, f"{co.co_name} ({co.co_filename}:{co.co_firstlineno})")

    def test_normalisations(self):
        ops = lambda f: [i[0] for i in cc.instructions(f.__code__)]  # noqa: E731
        all_ops = {op for co in all_codes() for op, *_ in cc.instructions(co)}
        for gone in ("EXTENDED_ARG", "CACHE", "KW_NAMES", "PRECALL", "JUMP_FORWARD", "JUMP_BACKWARD",
                     "JUMP_BACKWARD_NO_INTERRUPT", "LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST",
                     "STORE_FAST_STORE_FAST"):
            self.assertNotIn(gone, all_ops)
        self.assertFalse(any(op.startswith(("POP_JUMP_FORWARD", "POP_JUMP_BACKWARD")) for op in all_ops))
        self.assertIn("JUMP", all_ops)
        self.assertIn("LOAD_METHOD", ops(programs.method_calls))

        # Keyword names: folded into CALL on 3.11/3.12; CALL_KW with the tuple on the stack on 3.13.
        calls = [i for i in cc.instructions(programs.calls.__code__) if i[0] in ("CALL", "CALL_KW")]
        consts = programs.calls.__code__.co_consts
        if MINOR <= 12:
            kw = [consts[i[3]] for i in calls if i[3] >= 0]
            self.assertEqual(kw, [("key", "reverse"), ("a", "b"), ("default",)])
        else:
            self.assertEqual(sum(i[0] == "CALL_KW" for i in calls), 3)
            self.assertTrue(all(i[3] == -1 for i in calls))

        # Jump targets are instruction indices, and args of jumps are 0.
        instrs = cc.instructions(programs.loop_sum.__code__)
        jumps = [i for i in instrs if i[4] >= 0]
        self.assertTrue(jumps)
        for op, arg, *_ in jumps:
            self.assertEqual(arg, 0, op)
        self.assertTrue(all(0 <= i[4] < len(instrs) for i in jumps))
        self.assertTrue(any(i[4] < n for n, i in enumerate(instrs) if i[4] >= 0))  # a backward jump

        # LOAD_GLOBAL's push-NULL bit is in flags; arg is the co_names index.
        for op, arg, flags, *_ in cc.instructions(programs.calls.__code__):
            if op == "LOAD_GLOBAL":
                self.assertEqual(programs.calls.__code__.co_names[arg], "sorted")
                self.assertEqual(flags, 1)
                break

    def test_specialised_and_instrumented_code_decodes_the_same(self):
        f = programs.loop_sum
        before = cc.instructions(f.__code__)
        for _ in range(2000):  # warm up: the adaptive interpreter specialises in place
            f(range(5))
        self.assertEqual(cc.instructions(f.__code__), before)
        sys.settrace(lambda *a: None)  # 3.12+: instruments the code objects it sees
        try:
            f(range(3))
            self.assertEqual(cc.instructions(f.__code__), before)
            self.assertEqual(cc.roundtrip(f.__code__).co_code, f.__code__.co_code)
        finally:
            sys.settrace(None)

    def test_positions_cover_every_instruction(self):
        for line in (i[7] for i in cc.instructions(programs.add.__code__)):
            self.assertGreaterEqual(line, programs.add.__code__.co_firstlineno)

    def test_rejects_non_code(self):
        with self.assertRaises(Exception):
            cc.decode_print(42)


class PrinterTest(unittest.TestCase):
    def test_golden(self):
        text = "".join(
            f"== {f.__qualname__} ==\n{cc.decode_print(f.__code__)}" for f in programs.GOLDEN_CASES
        )
        path = GOLDEN_DIR / f"print_3_{MINOR}.txt"
        if os.environ.get("EMBER_ACCEPT_GOLDEN") == "1":
            GOLDEN_DIR.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
        self.assertTrue(path.exists(), f"{path} missing: run with EMBER_ACCEPT_GOLDEN=1")
        self.assertEqual(text, path.read_text(encoding="utf-8"))

    def test_deterministic(self):
        co = programs.closure.__code__
        self.assertEqual(cc.decode_print(co), cc.decode_print(co))
        self.assertNotIn("0x", cc.decode_print(co))

    def test_shows_resolved_args(self):
        text = cc.decode_print(programs.calls.__code__)
        self.assertIn("(sorted)", text)
        self.assertIn("(s)", text)  # a local
        self.assertIn("('-')", text)  # a constant
        self.assertIn("handler", cc.decode_print(programs.try_except_finally.__code__))


def roundtrip_deep(co):
    """roundtrip() of `co` and, recursively, of the code objects in its constants."""
    new = cc.roundtrip(co)
    consts = tuple(roundtrip_deep(c) if isinstance(c, types.CodeType) else c for c in co.co_consts)
    return new.replace(co_consts=consts)


def rebuild(f, code):
    g = types.FunctionType(code, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = f.__kwdefaults__
    return g


def run_coroutine(c):
    try:
        c.send(None)
    except StopIteration as e:
        return e.value
    raise AssertionError("coroutine did not finish")


def drive_generator(g):
    out = [next(g)]
    out.append(g.send(10))
    out.extend(g)
    return out


# (function, call) pairs: call(f) runs the function under test and returns something comparable.
RUN_CASES = [
    (programs.add, lambda f: (f(2, 3), f("a", "b"))),
    (programs.loop_sum, lambda f: f(range(50))),
    (programs.try_except_finally, lambda f: (f(0), f(2))),
    (programs.with_block, lambda f: (f(1), f(5))),
    (programs.calls, lambda f: f("a, bb ,c")),
    (programs.closure, lambda f: f(3)),
    (programs.generator, lambda f: (list(f(5)), drive_generator(f(3)))),
    (programs.comprehensions, lambda f: f(range(10))),
    (programs.compare_chain, lambda f: (f(1, 2, 3), f(3, 2, 1), f(1, 1, 1))),
    (programs.nested_try, lambda f: (f([1, 2, 0, 5]), f([5, 5]))),
    (programs.star_calls, lambda f: f(1, 2, a=3)),
    (programs.fstrings, lambda f: f("x", 3.14159)),
    (programs.slices, lambda f: f(list(range(10)))),
    (programs.method_calls, lambda f: f(3)),
    (programs.unpacking, lambda f: f([(1, 2), 3, 4])),
    (programs.coroutine, lambda f: run_coroutine(f(1))),
    (programs.yield_from, lambda f: list(f(4))),
    (programs.many_locals, lambda f: f(10)),
    (programs.Child.norm2, lambda f: f(programs.Child(2, 3))),
    (programs.Point.scaled, lambda f: f(programs.Point(1, 2), 3)),
]


def generated_function():
    """The EXTENDED_ARG-heavy `big` of generated_codes() as a function, with its globals."""
    glb = {f"g{i}": (lambda v, **kw: v + len(kw)) for i in range(40)}
    exec(generated_codes()[0], glb)
    return glb["big"]


class RoundTripTest(unittest.TestCase):
    def test_stdlib_code_is_identical(self):
        codes = all_codes()
        for co in codes:
            new = cc.roundtrip(co)
            where = f"{co.co_name} ({co.co_filename}:{co.co_firstlineno})"
            self.assertEqual(new.co_code, co.co_code, where)
            self.assertEqual(new.co_exceptiontable, co.co_exceptiontable, where)
            self.assertEqual(new.co_linetable, co.co_linetable, where)
            self.assertEqual(new.co_stacksize, co.co_stacksize, where)
            self.assertEqual(list(new.co_positions()), list(co.co_positions()), where)
            self.assertEqual(new, co, where)

    def test_extended_args_are_exercised(self):
        big = generated_codes()[1]
        self.assertEqual(big.co_name, "big")
        self.assertIn(dis.opmap["EXTENDED_ARG"], big.co_code[::2])
        self.assertEqual(cc.roundtrip(big).co_code, big.co_code)

    def test_round_tripped_functions_run(self):
        for f, call in RUN_CASES:
            g = rebuild(f, roundtrip_deep(f.__code__))
            self.assertIsNot(g.__code__, f.__code__)
            self.assertEqual(call(g), call(f), f.__qualname__)
        big = generated_function()
        self.assertEqual(rebuild(big, cc.roundtrip(big.__code__))(1.0), big(1.0))

    def test_traceback_lines_survive(self):
        def line_of_error(f):
            try:
                f(1, None)
            except TypeError as e:
                tb = e.__traceback__
                while tb.tb_next is not None:
                    tb = tb.tb_next
                return tb.tb_lineno
            raise AssertionError("no error")

        f = programs.add
        self.assertEqual(line_of_error(rebuild(f, cc.roundtrip(f.__code__))), line_of_error(f))


def with_nops(co, count):
    """The decoded instructions of `co` with `count` NOPs before every jump (targets remapped)."""
    ins, hs, pos = cc.instructions(co), cc.handlers(co), cc.positions(co)
    new, new_pos, index_of = [], [], {}
    for i, t in enumerate(ins):
        if t[4] >= 0:
            for _ in range(count):
                new.append(("NOP", 0, 0, -1, -1, t[5], -1, t[7]))
                new_pos.append(pos[i])
        index_of[i] = len(new)
        new.append(t)
        new_pos.append(pos[i])
    new = [(*t[:4], index_of[t[4]] if t[4] >= 0 else -1, *t[5:]) for t in new]
    hs = [(index_of[target], depth, lasti) for target, depth, lasti in hs]
    return new, hs, new_pos


class AssembleTest(unittest.TestCase):
    def test_long_jumps_need_extended_args_and_still_run(self):
        for f, call in RUN_CASES:
            co = f.__code__
            instrs, hs, pos = with_nops(co, 150)
            new = cc.assemble(co, instrs, hs, positions=pos)
            self.assertEqual(new.co_stacksize, co.co_stacksize, f.__qualname__)
            if f is programs.loop_sum:  # its loops jump back over other jumps' NOPs
                self.assertIn(dis.opmap["EXTENDED_ARG"], new.co_code[::2])
            self.assertEqual(call(rebuild(f, new)), call(f), f.__qualname__)
            # Decoding the result gives back the edited IR, positions included.
            got = [(*t[:5], t[5], t[7]) for t in cc.instructions(new)]
            self.assertEqual(got, [(*t[:5], t[5], t[7]) for t in instrs], f.__qualname__)
            self.assertEqual([tuple(p) for p in cc.positions(new)], [tuple(p) for p in pos])

    def test_overrides(self):
        co = programs.loop_sum.__code__
        ins, hs, pos = cc.instructions(co), cc.handlers(co), cc.positions(co)
        new = cc.assemble(co, ins, hs, positions=pos, name="renamed", firstlineno=co.co_firstlineno - 5)
        self.assertEqual((new.co_name, new.co_qualname), ("renamed", "renamed"))
        self.assertEqual(new.co_firstlineno, co.co_firstlineno - 5)
        self.assertEqual(list(new.co_positions()), list(co.co_positions()))
        self.assertEqual(rebuild(programs.loop_sum, new)(range(9)), programs.loop_sum(range(9)))

    def test_new_instructions_without_offsets(self):
        # A hand-written function: return a + b * 2, with an always-taken forward jump over junk.
        base = programs.add.__code__
        line = base.co_firstlineno
        consts = base.co_consts + (2,)
        two = len(consts) - 1
        resume = [t for t in cc.instructions(base) if t[0] == "RESUME"][0]
        instrs = [
            resume,
            ("JUMP", 0, 0, -1, 3, -1, -1, line),
            ("LOAD_CONST", 0, 0, -1, -1, -1, -1, line),  # dead
            ("LOAD_FAST", 0, 0, -1, -1, -1, -1, line),
            ("LOAD_FAST", 1, 0, -1, -1, -1, -1, line),
            ("LOAD_CONST", two, 0, -1, -1, -1, -1, line),
            ("BINARY_OP", 5, 0, -1, -1, -1, -1, line),  # *
            ("BINARY_OP", 0, 0, -1, -1, -1, -1, line),  # +
            ("RETURN_VALUE", 0, 0, -1, -1, -1, -1, line),
        ]
        new = cc.assemble(base, instrs, [], consts=consts)
        self.assertEqual(new.co_stacksize, 3)
        self.assertEqual(rebuild(programs.add, new)(1, 4), 9)
        self.assertEqual([t[0] for t in cc.instructions(new)][3:5], ["LOAD_FAST", "LOAD_FAST"])

    @unittest.skipIf(MINOR < 12, "3.11 has backward conditional jumps")
    def test_backward_conditional_jump_is_rejected(self):
        co = programs.loop_sum.__code__
        ins = [list(t) for t in cc.instructions(co)]
        i = next(n for n, t in enumerate(ins) if t[0].startswith("POP_JUMP_IF"))
        ins[i][4] = 0
        with self.assertRaisesRegex(Exception, "cannot jump backward"):
            cc.assemble(co, [tuple(t) for t in ins], cc.handlers(co))


if __name__ == "__main__":
    unittest.main()
