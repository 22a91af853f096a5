"""A seeded generator of small programs for differential testing of ember.compile.

`make_program(seed)` writes a Python function from a grammar of Python constructs (branches on
shapes and on data, loops, lists, tuples, dicts, comprehensions, lambdas, helper calls, `with`
blocks, graph breaks) and tensor ops (pointwise, reductions, views, softmax, layer norm, factories
that read the default dtype, in-place updates of the inputs). `check_program(seed)` compiles it
with ember.compile and calls it several times, each call with one of: fresh inputs, one tensor
passed for two arguments, overlapping views of one tensor, or a change of global state (the
default dtype, grad mode, deterministic algorithms, the thread count) around the call; each call
is compared with eager on inputs built the same way (outputs, dtypes, and the inputs after the
call). It returns the outcome: "ok", "mismatch: ..." or "error: ..." (ember raised where eager
did not, or raised another exception type).

The generator is deterministic for a seed, so a failing seed is its own reproduction:
`python scripts/fuzz_capture.py --seed N --show`.
"""

from __future__ import annotations

import contextlib
import random
import traceback
from dataclasses import dataclass, field

import global_state
import torch

import ember

SHAPES = [(4,), (3, 4), (2, 3, 4), (5, 2)]
UNARY = ["torch.sin({x})", "torch.cos({x})", "torch.tanh({x})", "torch.sigmoid({x})",
         "torch.relu({x})", "{x}.abs()", "-{x}", "torch.exp({x}.clamp(-3, 3))",
         "torch.nn.functional.gelu({x})", "{x}.clamp(min=-0.5)"]
BINARY = ["{x} + {y}", "{x} - {y}", "{x} * {y}", "torch.maximum({x}, {y})",
          "torch.where({x} > {y}, {x}, {y})", "{x} * 0.5 + {y}"]
REDUCE = ["{x}.sum(dim=-1, keepdim=True)", "{x}.mean(dim=-1, keepdim=True)",
          "{x}.amax(dim=-1, keepdim=True)", "{x}.amin(dim=0, keepdim=True)"]


@dataclass
class Program:
    seed: int
    shape: tuple
    source: str
    nargs: int
    mutates: bool = False
    helpers: list = field(default_factory=list)


class _Writer:
    def __init__(self, rng: random.Random, shape: tuple, nargs: int):
        self.rng = rng
        self.shape = shape
        self.vars = ["a", "b", "c"][:nargs]
        self.inputs = list(self.vars)
        self.lines: list[str] = []
        self.helpers: list[str] = []
        self.n = 0
        self.mutates = False

    def new(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def pick(self) -> str:
        return self.rng.choice(self.vars)

    def emit(self, text: str, indent: int = 1) -> None:
        for line in text.splitlines():
            self.lines.append("    " * indent + line)

    def statement(self) -> None:
        r = self.rng
        x, y, v = self.pick(), self.pick(), self.new()
        kind = r.randrange(20)
        shape = self.shape
        if kind <= 3:
            self.emit(f"{v} = {r.choice(UNARY).format(x=x)}")
        elif kind <= 6:
            self.emit(f"{v} = {r.choice(BINARY).format(x=x, y=y)}")
        elif kind == 7:
            self.emit(f"{v} = {x} - {r.choice(REDUCE).format(x=x)}")
        elif kind == 8:
            self.emit(f"if {x}.shape[-1] > {r.randrange(2, 6)}:\n    {v} = {x} * 2\n"
                      f"else:\n    {v} = {x} - 1")
        elif kind == 9:
            self.emit(f"{v} = {x}\nfor i in range({r.randrange(1, 4)}):\n"
                      f"    {v} = {v} * 0.5 + {y} * i")
        elif kind == 10:
            self.emit(f"items = [{x}, {y}, {x} * 3]\n{v} = items[0] + items[-1] * items[1]")
        elif kind == 11:
            self.emit(f"d = {{'u': {x}, 'w': ({y}, 2.0)}}\n{v} = d['u'] * d['w'][1] - d['w'][0]")
        elif kind == 12:
            h = f"helper{len(self.helpers)}"
            self.helpers.append(f"def {h}(t, s=1.5):\n    return torch.tanh(t) * s + t.mean()\n")
            self.emit(f"{v} = {h}({x}, s={r.choice([0.5, 2.0])})")
        elif kind == 13:
            self.emit(f"f = lambda t, k={r.randrange(1, 4)}: t.sin() * k\n{v} = f({x}) + f({y}, 1)")
        elif kind == 14:
            self.emit(f"{v} = sum([{x} * i for i in range({r.randrange(1, 4)})])")
        elif kind == 15:
            self.emit(f"with torch.no_grad():\n    {v} = {x} + 1")
        elif kind == 16 and self.inputs:
            target = r.choice(self.inputs)
            self.emit(r.choice([f"{target}.mul_(0.5)", f"{target}.add_({y})",
                                f"{target}.clamp_(-1, 1)"]))
            self.mutates = True
            self.emit(f"{v} = {target} + {y}")
        elif kind == 17:
            self.emit(r.choice(['print("", end="")', "pass"]))
            self.emit(f"{v} = {x} * {y}")
        elif kind == 18:
            # A predicate far from its threshold for most values: `x.sum() > 0` on a centered
            # tensor (layer norm, x - x.mean()) is decided by rounding, and eager's and a
            # kernel's summation orders may round it differently (a true branch flip, not a bug;
            # 11 of the first 10,000 programs).
            self.emit(f"if {x}.abs().mean() > 0.75:\n    {v} = {x} + 1\nelse:\n    {v} = {x} - 1")
        else:
            dims = ", ".join(str(s) for s in shape)
            self.emit(r.choice([
                f"{v} = {x} + torch.ones({dims}) * 0.25",
                f"{v} = torch.softmax({x}, dim=-1)",
                f"{v} = torch.nn.functional.layer_norm({x}, ({shape[-1]},))",
                f"{v} = {x}.flatten().reshape({dims}) * {x}.shape[0]",
                f"{v} = {x}.unsqueeze(0).squeeze(0).contiguous()",
            ]))
        self.vars.append(v)


def make_program(seed: int) -> Program:
    rng = random.Random(seed)
    shape = rng.choice(SHAPES)
    nargs = rng.choice([1, 2, 2, 3])
    w = _Writer(rng, shape, nargs)
    for _ in range(rng.randrange(2, 8)):
        w.statement()
    outs = rng.sample(w.vars[nargs:] or w.vars, k=min(2, len(w.vars[nargs:] or w.vars)))
    form = rng.randrange(3)
    if form == 0:
        w.emit(f"return {outs[0]}")
    elif form == 1:
        w.emit(f"return ({', '.join(outs)},)")
    else:
        w.emit("return {" + ", ".join(f"'o{i}': {o}" for i, o in enumerate(outs)) + "}")
    args = ", ".join(["a", "b", "c"][:nargs])
    source = "".join(w.helpers) + f"def prog({args}):\n" + "\n".join(w.lines) + "\n"
    return Program(seed, shape, source, nargs, w.mutates, w.helpers)


def build(p: Program):
    namespace = {"torch": torch}
    exec(compile(p.source, f"<fuzz {p.seed}>", "exec"), namespace)
    return namespace["prog"]


# --- how each call is made --------------------------------------------------------------------

CALL_MODES = ["fresh", "fresh", "same_tensor", "overlapping_views", "default_dtype", "no_grad",
              "deterministic", "threads"]


def make_inputs(p: Program, mode: str, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if mode == "same_tensor" and p.nargs >= 2:
        t = torch.randn(p.shape, generator=g)
        return [t, t] + [torch.randn(p.shape, generator=g) for _ in range(p.nargs - 2)]
    if mode == "overlapping_views" and p.nargs >= 2:
        base = torch.randn((p.shape[0] + 1,) + tuple(p.shape[1:]), generator=g)
        return [base[:-1], base[1:]] + [torch.randn(p.shape, generator=g)
                                        for _ in range(p.nargs - 2)]
    return [torch.randn(p.shape, generator=g) for _ in range(p.nargs)]


@contextlib.contextmanager
def call_state(mode: str):
    state = {"default_dtype": lambda: global_state.default_dtype(torch.float64),
             "no_grad": torch.no_grad,
             "deterministic": lambda: global_state.deterministic(True),
             "threads": lambda: global_state.num_threads(1)}.get(mode, contextlib.nullcontext)
    with state():
        yield


def _compare(actual, expected, path="out") -> str | None:
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return f"{path}: expected a tensor, got {type(actual).__name__}"
        if actual.dtype != expected.dtype or actual.shape != expected.shape:
            return (f"{path}: {actual.dtype}{list(actual.shape)} vs eager's "
                    f"{expected.dtype}{list(expected.shape)}")
        scale = max(1.0, float(expected.detach().abs().max()) if expected.numel() else 1.0)
        if not torch.allclose(actual.detach(), expected.detach(), rtol=1e-4, atol=1e-4 * scale,
                              equal_nan=True):
            err = float((actual.detach() - expected.detach()).abs().max())
            return f"{path}: max abs err {err:.3g} (scale {scale:.3g})"
        return None
    if isinstance(expected, (tuple, list)):
        if type(actual) is not type(expected) or len(actual) != len(expected):
            return f"{path}: {type(actual).__name__} vs eager's {type(expected).__name__}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            if (m := _compare(a, e, f"{path}[{i}]")) is not None:
                return m
        return None
    if isinstance(expected, dict):
        if type(actual) is not dict or list(actual) != list(expected):
            return f"{path}: keys differ"
        for k in expected:
            if (m := _compare(actual[k], expected[k], f"{path}[{k!r}]")) is not None:
                return m
        return None
    return None if actual == expected else f"{path}: {actual!r} vs eager's {expected!r}"


def check_program(seed: int, calls: int = 4) -> str:
    """Runs program `seed` eagerly and under ember.compile for `calls` calls; its outcome."""
    p = make_program(seed)
    fn = build(p)
    compiled = ember.compile(fn)
    rng = random.Random(seed * 7919 + 1)
    modes = ["fresh"] + [rng.choice(CALL_MODES) for _ in range(calls - 1)]
    for i, mode in enumerate(modes):
        expected_inputs = make_inputs(p, mode, seed * 100 + i)
        actual_inputs = make_inputs(p, mode, seed * 100 + i)
        with call_state(mode):
            try:
                expected = fn(*expected_inputs)
                eager_error = None
            except Exception as e:  # the program itself fails: ember must fail the same way
                eager_error = e
            try:
                actual = compiled(*actual_inputs)
                ember_error = None
            except Exception as e:
                ember_error = e
        where = f"call {i} ({mode})"
        if eager_error is not None or ember_error is not None:
            if eager_error is None:
                return (f"error: {where}: ember raised {type(ember_error).__name__}: "
                        f"{str(ember_error)[:300]}\n{traceback.format_exc()[-1500:]}")
            if ember_error is None or type(ember_error) is not type(eager_error):
                return (f"error: {where}: eager raised {type(eager_error).__name__}, ember "
                        f"{'nothing' if ember_error is None else type(ember_error).__name__}")
            continue
        if (m := _compare(actual, expected)) is not None:
            return f"mismatch: {where}: {m}"
        for j, (a, e) in enumerate(zip(actual_inputs, expected_inputs)):
            if (m := _compare(a, e, f"argument {j} after the call")) is not None:
                return f"mismatch: {where}: {m}"
    return "ok"
